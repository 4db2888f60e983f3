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

struct SmoothL1Grad {
  static constexpr int kNumInputs = 3;  // gradOut, self, target
  float beta, scale, inv_beta;  // inv_beta: 1 / beta, 0 for beta = 0
  template <typename T>
  T operator()(T g, T x, T y) const {
    const T d = x - y;
    const T sign = d > 0.0f ? Splat<T>(1.0f) : (d < 0.0f ? Splat<T>(-1.0f) : T{});
    T dl = Abs(d) < beta ? d * inv_beta : sign;
    dl = d != d ? d : dl;  // NaN difference stays NaN
    return g * scale * dl;
  }
};

template <>
struct PointwiseKernel<kSmoothL1LossBackward> {
  using Params = SmoothL1LossBackwardParams;
  static SmoothL1Grad Make(const Params& p) {
    return {p.beta, p.scale, p.beta > 0.0f ? 1.0f / p.beta : 0.0f};
  }
};

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_OPS_SMOOTH_L1_LOSS_BACKWARD_KERNEL_H_
