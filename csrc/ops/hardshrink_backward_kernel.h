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

struct HardshrinkGrad {
  static constexpr int kNumInputs = 2;  // gradOutput, self
  float lambd;
  template <typename T>
  T operator()(T g, T x) const {
    return Abs(x) <= lambd ? T{} : g;
  }
};

template <>
struct PointwiseKernel<kHardshrinkBackward> {
  using Params = HardshrinkBackwardParams;
  static HardshrinkGrad Make(const Params& p) { return {p.lambd}; }
};

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_OPS_HARDSHRINK_BACKWARD_KERNEL_H_
