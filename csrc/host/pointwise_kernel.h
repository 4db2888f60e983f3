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
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {

// An element-wise operator's kernel, specialised in its <op>_kernel.h:
//   using Params = ...;               the parameters its first phase fills
//                                     (held in a PointwiseParams, kernels.h);
//   static Functor Make(const Params&);
// where Functor(n, inputs, out) computes n elements of the result in float
// from the inputs' float chunks.
template <OpId op>
struct PointwiseKernel;

// exp(x) in float, vectorisable (Cephes polynomial, about 1 ulp; the build
// passes -fno-trapping-math so that the loops around it if-convert). x is
// clamped to the finite range with plain selects (std::min/max's NaN rules
// cost extra instructions per vector), which also send NaN to the lower
// bound, so that n below is an integer in [-126, 128]; callers handle NaN
// themselves.
inline float ExpF(float x) {
  x = x > -87.33654475f ? x : -87.33654475f;
  x = x < 88.72283905f ? x : 88.72283905f;
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);  // x = n ln2 + r
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  return p * __builtin_bit_cast(float, bits);
}

// The element-wise formulas (the operators' docstrings in jax_aclnn/ops/), on float chunks.
// `out` may be the memory of an input: XLA gives the result the incoming
// gradient's buffer (`alias_gradient` in jax_aclnn/_primitive.py; same shape,
// so same strides). That is safe here: each iteration reads element i of
// every input before writing element i of `out` (no pointer is __restrict;
// `omp simd` still vectorises, there being no loop-carried dependence), and
// PointwiseRange reads (or converts into a buffer) a chunk of each input
// before that chunk of the output is written, each task its own range.

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_HOST_POINTWISE_KERNEL_H_
