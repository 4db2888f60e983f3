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

struct SwishGrad {
  static constexpr int kNumInputs = 2;  // gradOutput, self
  float beta;
  template <typename T>
  T operator()(T g, T x) const {
    const T bx = beta * x;
    const T s = 1.0f / (1.0f + ExpF(-bx));
    const T r = g * s * (1.0f + bx * (1.0f - s));
    return r + (bx - bx);  // NaN input stays NaN (ExpF clamps it), branch-free
  }
};

template <>
struct PointwiseKernel<kSwishBackward> {
  using Params = SwishBackwardParams;
  static SwishGrad Make(const Params& p) { return {p.beta}; }
};

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_OPS_SWISH_BACKWARD_KERNEL_H_
