// aclnnHardshrinkBackward, the FFI handler's part: the custom call's attributes (their
// one declaration) and the aclnn call. The host provider's part: hardshrink_backward.cc.
#ifndef JAX_ACLNN_OPS_HARDSHRINK_BACKWARD_H_
#define JAX_ACLNN_OPS_HARDSHRINK_BACKWARD_H_

#include <cstdint>

#include "aclnn_abi.h"
#include "attributes.h"

namespace jax_aclnn::ops {

// hardshrink_backward: gradOutput, self -> gradInput.
#define JAX_ACLNN_ATTRIBUTES_HardshrinkBackward(X) X(float, lambd)

struct HardshrinkBackward {
  static constexpr int kNumInputs = 2, kNumOutputs = 1;
  JAX_ACLNN_ATTRIBUTES_STRUCT(HardshrinkBackward) attrs;
  template <typename Api, typename Descriptors>
  aclnnStatus GetWorkspaceSize(const Api& api, Descriptors& d, aclTensor** in, aclTensor** out,
                               uint64_t* ws, aclOpExecutor** ex) const {
    auto scalar = d.Scalar(attrs.lambd);
    if (scalar.has_error()) return ACLNN_ERR_INNER_NULLPTR;
    return api.aclnnHardshrinkBackwardGetWorkspaceSize(in[0], in[1], *scalar, out[0], ws, ex);
  }
};

}  // namespace jax_aclnn::ops

#endif  // JAX_ACLNN_OPS_HARDSHRINK_BACKWARD_H_
