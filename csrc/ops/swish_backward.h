// aclnnSwishBackward, the FFI handler's part: the custom call's attributes (their
// one declaration) and the aclnn call. The host provider's part: swish_backward.cc.
#ifndef JAX_ACLNN_OPS_SWISH_BACKWARD_H_
#define JAX_ACLNN_OPS_SWISH_BACKWARD_H_

#include <cstdint>

#include "aclnn_abi.h"
#include "attributes.h"

namespace jax_aclnn::ops {

// swish_backward: gradOutput, self -> gradInput.
#define JAX_ACLNN_ATTRIBUTES_SwishBackward(X) \
  X(bool, has_beta)                           \
  X(float, beta)

struct SwishBackward {
  static constexpr int kNumInputs = 2, kNumOutputs = 1;
  JAX_ACLNN_ATTRIBUTES_STRUCT(SwishBackward) attrs;
  template <typename Api, typename Descriptors>
  aclnnStatus GetWorkspaceSize(const Api& api, Descriptors& d, aclTensor** in, aclTensor** out,
                               uint64_t* ws, aclOpExecutor** ex) const {
    aclScalar* beta_scalar = nullptr;  // betaOptional: null means 1.0
    if (attrs.has_beta) {
      auto scalar = d.Scalar(attrs.beta);
      if (scalar.has_error()) return ACLNN_ERR_INNER_NULLPTR;
      beta_scalar = *scalar;
    }
    return api.aclnnSwishBackwardGetWorkspaceSize(in[0], in[1], beta_scalar, out[0], ws, ex);
  }
};

}  // namespace jax_aclnn::ops

#endif  // JAX_ACLNN_OPS_SWISH_BACKWARD_H_
