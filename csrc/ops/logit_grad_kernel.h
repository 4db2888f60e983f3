// aclnnLogitGrad's host kernel: the parameters its first phase fills
// (logit_grad.cc) and the element-wise functor (host/pointwise_kernel.h).
#ifndef JAX_ACLNN_OPS_LOGIT_GRAD_KERNEL_H_
#define JAX_ACLNN_OPS_LOGIT_GRAD_KERNEL_H_

namespace jax_aclnn::host {

struct LogitGradParams {
  double eps;
};

}  // namespace jax_aclnn::host

#ifdef JAX_ACLNN_KERNEL_TARGET
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {

struct LogitGrad {
  static constexpr int kNumInputs = 2;  // x, dy
  // x outside [lo, hi] gives `outside`; eps NaN gives `outside` (NaN) everywhere.
  float lo, hi, outside;
  bool eps_nan;
  template <typename T>
  T operator()(T x, T dy) const {
    if (eps_nan) return Splat<T>(outside);
    const T v = dy / (x * (1.0f - x));
    return (x < lo || x > hi) ? outside : v;
  }
};

template <>
struct PointwiseKernel<kLogitGrad> {
  using Params = LogitGradParams;
  // eps < 0: no clamping, NaN outside [0, 1].
  static LogitGrad Make(const Params& p) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    if (std::isnan(p.eps)) return {0.0f, 1.0f, nan, true};
    if (p.eps < 0.0) return {0.0f, 1.0f, nan, false};
    // Both bounds from eps as a float, the upper one in float arithmetic
    // (1.0f - eps), as CANN's LogitGrad kernel and ATen's logit_backward.
    const float eps = static_cast<float>(p.eps);
    return {eps, 1.0f - eps, 0.0f, false};
  }
};

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_OPS_LOGIT_GRAD_KERNEL_H_
