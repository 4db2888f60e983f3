// aclnnHardshrinkBackward's host kernel: the parameters its first phase fills
// (hardshrink_backward.cc) and the element-wise functor (host/pointwise_kernel.h).
#ifndef JAX_ACLNN_OPS_HARDSHRINK_BACKWARD_KERNEL_H_
#define JAX_ACLNN_OPS_HARDSHRINK_BACKWARD_KERNEL_H_

namespace jax_aclnn::host {

struct HardshrinkBackwardParams {
  float lambd;  // already clamped at 0
};

}  // namespace jax_aclnn::host

#ifdef JAX_ACLNN_KERNEL_TARGET
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {

struct Hardshrink {  // in: gradOutput, self
  float lambd;
  void operator()(int64_t n, const float* const* in, float* out) const {
    const float* g = in[0];
    const float* x = in[1];
    const float l = lambd;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = std::fabs(x[i]) <= l ? 0.0f : g[i];
  }
};

template <>
struct PointwiseKernel<kHardshrinkBackward> {
  using Params = HardshrinkBackwardParams;
  static Hardshrink Make(const Params& p) { return {p.lambd}; }
};

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_OPS_HARDSHRINK_BACKWARD_KERNEL_H_
