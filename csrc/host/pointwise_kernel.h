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

// -126 ln2 rounded up: at and below it ExpF returns exp(kExpFloor), the
// smallest normal float to 4.5e-6 (never a subnormal), not 0.
constexpr float kExpFloor = -87.33654022f;
// 128 ln2 rounded up, the first float whose exp overflows.
constexpr float kExpCeiling = 88.72283936f;

// x = n ln2 + r with n an integer and |r| <= ln2 / 2, for x in
// [kExpFloor, kExpCeiling] (n in [-126, 128], returned through `n`). At
// both ends r >= 0 (n = -126 and n = 128), as ScaleByPow2 needs; below the
// ceiling, where n = 128, r < 0.
template <typename T>
inline T SplitExpArgument(T x, T& n) {
  n = Floor(x * 1.44269504088896341f + 0.5f);
  return x - n * 0.693359375f + n * 2.12194440e-4f;
}

// SplitExpArgument of x first clamped to [kExpFloor, kExpCeiling] with
// plain selects (std::min/max's NaN rules cost extra instructions per
// vector): below the range exp's result is exp(kExpFloor), and NaN goes to
// the lower bound (callers handle NaN themselves).
template <typename T>
inline T ReduceExpArgument(T x, T& n) {
  return SplitExpArgument(AtMost(AtLeast(x, kExpFloor), kExpCeiling), n);
}

// exp(r) for |r| <= ln2 / 2 (ExpOfReduced), and from it ExpF, exp(x) in
// float, vectorisable (Cephes polynomial, about 1 ulp; the build
// passes -fno-trapping-math so that the loops around it if-convert). The
// polynomial is in Estrin's form: from r, a chain of r^2, r^4, two FMAs
// and an add (the three first-degree FMAs beside it) where Horner's was
// eight operations long, and that chain is what an element-wise loop of
// exponentials waits on (x86-64-v3, float32 SwiGLU at 1M elements in
// bursts: 169 -> 160 us, measured with (r + 1) added first, one add
// shorter). The last two adds stay apart, 1 added last, as in Cephes:
// (r + 1) rounded first made 28% of the results differ, up to 1.26 ulp.
template <typename T>
inline T ExpOfReduced(T r) {
  const T r2 = r * r, r4 = r2 * r2;
  const T a = 1.9875691500e-4f * r + 1.3981999507e-3f;
  const T b = 8.3334519073e-3f * r + 4.1665795894e-2f;
  const T c = 1.6666665459e-1f * r + 5.0000001201e-1f;
  const T p = a * r4 + (b * r2 + c);
  return p * r2 + r + 1.0f;
}
template <typename T>
inline T ExpF(T x) {
  T n;
  const T r = ReduceExpArgument(x, n);
  return ScaleByPow2(ExpOfReduced(r), n);
}

// exp(x) as ExpF, to 5.4e-6 relative error, for results stored in float16
// or bfloat16: a degree-4 minimax polynomial on ExpF's reduced range (fitted
// to exp(r) = 1 + r + r^2 q(r), q of degree 2). Its error is a 45th of
// float16's half ulp (2.4e-4) and a 360th of bfloat16's (2.0e-3): SwiGLU's
// outputs are still float64's correctly rounded value but for 0.17% of
// them in float16 and 0.02% in bfloat16 (ExpF: 0.008% and 0.001%), those
// one ulp off. Its chain from r is one operation shorter than ExpF's (no
// r^4), with four fewer instructions, and (r + 1) is added in parallel
// (x86-64-v3, bfloat16 SwiGLU in bursts: 1M elements 1.3x faster; at 16M
// 0.96-1.12x XLA's code before, 1.15-1.19x in a default bench run after).
template <typename T>
inline T ExpForHalf(T x) {
  T n;
  const T r = ReduceExpArgument(x, n);
  const T r2 = r * r;
  const T q = 4.12776396e-2f * r2 + (1.67535052e-1f * r + 5.00051141e-1f);
  return ScaleByPow2(q * r2 + (r + 1.0f), n);
}

// exp(x) where a softmax needs it exactly: 0 below ExpF's range (so
// exp(-inf) = 0, a masked score's weight) and NaN kept.
template <typename T>
inline T ExpOrZero(T x) {
  const T e = x < kExpFloor ? Splat<T>(0.0f) : ExpF(x);
  return x == x ? e : x;
}

// exp(x) as ExpF for x in [-inf, 0], not NaN, as a softmax's normalizer
// sum exp(x - max) takes it: without ExpOrZero's and the ceiling's selects
// (five of the 34 instructions of its vector loop on x86-64-v3). Below
// kExpFloor it is exp(kExpFloor), 1.2e-38, not 0: in a sum that holds
// exp(0) = 1 such terms vanish.
template <typename T>
inline T ExpOfNonPositive(T x) {
  T n;
  const T r = SplitExpArgument(AtLeast(x, kExpFloor), n);
  return ScaleByPow2(ExpOfReduced(r), n);
}

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_HOST_POINTWISE_KERNEL_H_
