// aclnnSmoothL1LossBackward, the FFI handler's part: the custom call's attributes (their
// one declaration) and the aclnn call. The host provider's part: smooth_l1_loss_backward.cc.
#ifndef JAX_ACLNN_OPS_SMOOTH_L1_LOSS_BACKWARD_H_
#define JAX_ACLNN_OPS_SMOOTH_L1_LOSS_BACKWARD_H_

#include <cstdint>

#include "aclnn_abi.h"
#include "attributes.h"

namespace jax_aclnn::ops {

// smooth_l1_loss_backward: gradOut, self, target -> gradInput.
#define JAX_ACLNN_ATTRIBUTES_SmoothL1LossBackward(X) \
  X(int64_t, reduction)                              \
  X(float, beta)

struct SmoothL1LossBackward {
  static constexpr int kNumInputs = 3, kNumOutputs = 1;
  JAX_ACLNN_ATTRIBUTES_STRUCT(SmoothL1LossBackward) attrs;
  template <typename Api, typename Descriptors>
  aclnnStatus GetWorkspaceSize(const Api& api, Descriptors&, aclTensor** in, aclTensor** out,
                               uint64_t* ws, aclOpExecutor** ex) const {
    return api.aclnnSmoothL1LossBackwardGetWorkspaceSize(in[0], in[1], in[2], attrs.reduction,
                                                         attrs.beta, out[0], ws, ex);
  }
};

}  // namespace jax_aclnn::ops

#endif  // JAX_ACLNN_OPS_SMOOTH_L1_LOSS_BACKWARD_H_
