// What the element-wise operators' kernels (csrc/ops/<op>_kernel.h) build
// on. operators.h includes it, then each operator's kernel header, after
// declaring OpId. The kernels are compiled once per CPU target
// (kernels.cc, CMakeLists.txt), each copy in its own namespace; elsewhere
// (JAX_ACLNN_KERNEL_TARGET undefined) only the parameter structs are seen.
#ifndef JAX_ACLNN_HOST_POINTWISE_KERNEL_H_
#define JAX_ACLNN_HOST_POINTWISE_KERNEL_H_

#include <cmath>
#include <cstdint>
#include <limits>

#ifdef JAX_ACLNN_KERNEL_TARGET
#include "host/simd.h"

namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {

// An element-wise operator's kernel, specialised in its <op>_kernel.h:
//   using Params = ...;               the parameters its first phase fills
//                                     (held in a PointwiseParams, kernels.h);
//   static Functor Make(const Params&);
// where Functor has `static constexpr int kNumInputs` and
//   template <typename T> T operator()(T in0, T in1, ...) const;
// the operator's formula on one element (T = float) or on a vector of them
// (T = Vec, simd.h), computed in float32 whatever the storage type.
template <OpId op>
struct PointwiseKernel;

// exp(x) in float, vectorisable (Cephes polynomial, about 1 ulp; the build
// passes -fno-trapping-math so that the loops around it if-convert). x is
// clamped to [-87.34, 88.72] with plain selects (std::min/max's NaN rules
// cost extra instructions per vector), so that n below is an integer in
// [-126, 128]: below the range the result is the smallest normal float,
// above it +inf (2^128 overflows), and NaN goes to the lower bound (callers
// handle NaN themselves).
template <typename T>
inline T ExpF(T x) {
  x = AtMost(AtLeast(x, -87.33654475f), 88.72283905f);
  const T n = Floor(x * 1.44269504088896341f + 0.5f);  // x = n ln2 + r
  const T r = x - n * 0.693359375f + n * 2.12194440e-4f;
  T p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * Pow2(n);
}

// Below it ExpF returns the smallest normal float, not 0.
constexpr float kExpFloor = -87.33654475f;

// exp(x) where a softmax needs it exactly: 0 below ExpF's range (so
// exp(-inf) = 0, a masked score's weight) and NaN kept.
template <typename T>
inline T ExpOrZero(T x) {
  const T e = x < kExpFloor ? Splat<T>(0.0f) : ExpF(x);
  return x == x ? e : x;
}

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_HOST_POINTWISE_KERNEL_H_
