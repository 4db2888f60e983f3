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

struct Logit {  // in: x, dy
  double eps;
  void operator()(int64_t n, const float* const* in, float* out) const {
    const float* x = in[0];
    const float* dy = in[1];
    const float nan = std::numeric_limits<float>::quiet_NaN();
    if (std::isnan(eps)) {
      for (int64_t i = 0; i < n; ++i) out[i] = nan;
    } else if (eps < 0.0) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        float v = dy[i] / (x[i] * (1.0f - x[i]));
        out[i] = (x[i] < 0.0f || x[i] > 1.0f) ? nan : v;
      }
    } else {
      const float lo = static_cast<float>(eps), hi = static_cast<float>(1.0 - eps);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        float v = dy[i] / (x[i] * (1.0f - x[i]));
        out[i] = (x[i] < lo || x[i] > hi) ? 0.0f : v;
      }
    }
  }
};

template <>
struct PointwiseKernel<kLogitGrad> {
  using Params = LogitGradParams;
  static Logit Make(const Params& p) { return {p.eps}; }
};

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_OPS_LOGIT_GRAD_KERNEL_H_
