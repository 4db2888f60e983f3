// aclnnBatchNormReduceBackward, the FFI handler's part: the custom call's attributes (their
// one declaration) and the aclnn call. The host provider's part: batch_norm_reduce_backward.cc.
#ifndef JAX_ACLNN_OPS_BATCH_NORM_REDUCE_BACKWARD_H_
#define JAX_ACLNN_OPS_BATCH_NORM_REDUCE_BACKWARD_H_

#include <cstdint>

#include "aclnn_abi.h"
#include "attributes.h"

namespace jax_aclnn::ops {

// batch_norm_reduce_backward: gradOut, input, mean, invstd, weight -> sumDy,
// sumDyXmu, gradWeight, gradBias.
#define JAX_ACLNN_ATTRIBUTES_BatchNormReduceBackward(X) \
  X(bool, has_weight)                                   \
  X(bool, input_g)                                      \
  X(bool, weight_g)                                     \
  X(bool, bias_g)

struct BatchNormReduceBackward {
  static constexpr int kNumInputs = 5, kNumOutputs = 4;
  JAX_ACLNN_ATTRIBUTES_STRUCT(BatchNormReduceBackward) attrs;
  // Masked outputs (and an absent weight) are zero-sized placeholders in the
  // custom call and null pointers for aclnn.
  template <typename Buffers>
  void OmitAbsent(Buffers& b) const {
    if (!attrs.has_weight) b.in[4] = nullptr;
    if (!attrs.input_g) b.out[0] = b.out[1] = nullptr;
    if (!attrs.weight_g) b.out[2] = nullptr;
    if (!attrs.bias_g) b.out[3] = nullptr;
  }
  template <typename Api, typename Descriptors>
  aclnnStatus GetWorkspaceSize(const Api& api, Descriptors&, aclTensor** in, aclTensor** out,
                               uint64_t* ws, aclOpExecutor** ex) const {
    return api.aclnnBatchNormReduceBackwardGetWorkspaceSize(
        in[0], in[1], in[2], in[3], in[4], attrs.input_g, attrs.weight_g, attrs.bias_g, out[0],
        out[1], out[2], out[3], ws, ex);
  }
};

}  // namespace jax_aclnn::ops

#endif  // JAX_ACLNN_OPS_BATCH_NORM_REDUCE_BACKWARD_H_
