// aclnnLogitGrad, the FFI handler's part: the custom call's attributes (their
// one declaration) and the aclnn call. The host provider's part: logit_grad.cc.
#ifndef JAX_ACLNN_OPS_LOGIT_GRAD_H_
#define JAX_ACLNN_OPS_LOGIT_GRAD_H_

#include <cstdint>

#include "aclnn_abi.h"
#include "attributes.h"

namespace jax_aclnn::ops {

// logit_grad: x, dy -> out.
#define JAX_ACLNN_ATTRIBUTES_LogitGrad(X) X(double, eps)

struct LogitGrad {
  static constexpr int kNumInputs = 2, kNumOutputs = 1;
  JAX_ACLNN_ATTRIBUTES_STRUCT(LogitGrad) attrs;
  template <typename Api, typename Descriptors>
  aclnnStatus GetWorkspaceSize(const Api& api, Descriptors&, aclTensor** in, aclTensor** out,
                               uint64_t* ws, aclOpExecutor** ex) const {
    return api.aclnnLogitGradGetWorkspaceSize(in[0], in[1], attrs.eps, out[0], ws, ex);
  }
};

}  // namespace jax_aclnn::ops

#endif  // JAX_ACLNN_OPS_LOGIT_GRAD_H_
