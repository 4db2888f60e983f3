// aclnnSmoothL1LossBackward's host kernel: the parameters its first phase fills
// (smooth_l1_loss_backward.cc) and the element-wise functor (host/pointwise_kernel.h).
#ifndef JAX_ACLNN_OPS_SMOOTH_L1_LOSS_BACKWARD_KERNEL_H_
#define JAX_ACLNN_OPS_SMOOTH_L1_LOSS_BACKWARD_KERNEL_H_

namespace jax_aclnn::host {

struct SmoothL1LossBackwardParams {
  float beta;   // >= 0
  float scale;  // 1 / numel(self) for reduction "mean", else 1
};

}  // namespace jax_aclnn::host

#ifdef JAX_ACLNN_KERNEL_TARGET
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {

struct SmoothL1 {  // in: gradOut, self, target
  float beta, scale;
  void operator()(int64_t n, const float* const* in, float* out) const {
    const float* g = in[0];
    const float* x = in[1];
    const float* y = in[2];
    // Attributes in locals: a member read in the loop blocks vectorisation.
    const float b = beta, sc = scale, inv_beta = beta > 0.0f ? 1.0f / beta : 0.0f;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      float d = x[i] - y[i];
      float sign = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
      float dl = std::fabs(d) < b ? d * inv_beta : sign;
      dl = d != d ? d : dl;  // NaN difference stays NaN
      out[i] = g[i] * sc * dl;
    }
  }
};

template <>
struct PointwiseKernel<kSmoothL1LossBackward> {
  using Params = SmoothL1LossBackwardParams;
  static SmoothL1 Make(const Params& p) { return {p.beta, p.scale}; }
};

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_OPS_SMOOTH_L1_LOSS_BACKWARD_KERNEL_H_
