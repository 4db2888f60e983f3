// aclnnSwishBackward's host kernel: the parameters its first phase fills
// (swish_backward.cc) and the element-wise functor (host/pointwise_kernel.h).
#ifndef JAX_ACLNN_OPS_SWISH_BACKWARD_KERNEL_H_
#define JAX_ACLNN_OPS_SWISH_BACKWARD_KERNEL_H_

namespace jax_aclnn::host {

struct SwishBackwardParams {
  float beta;
};

}  // namespace jax_aclnn::host

#ifdef JAX_ACLNN_KERNEL_TARGET
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {

struct Swish {  // in: gradOutput, self
  float beta;
  void operator()(int64_t n, const float* const* in, float* out) const {
    const float* g = in[0];
    const float* x = in[1];
    const float b = beta;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      float bx = b * x[i];
      float s = 1.0f / (1.0f + ExpF(-bx));
      float r = g[i] * s * (1.0f + bx * (1.0f - s));
      out[i] = r + (bx - bx);  // NaN input stays NaN (ExpF clamps it), branch-free
    }
  }
};

template <>
struct PointwiseKernel<kSwishBackward> {
  using Params = SwishBackwardParams;
  static Swish Make(const Params& p) { return {p.beta}; }
};

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_OPS_SWISH_BACKWARD_KERNEL_H_
