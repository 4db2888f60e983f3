// The aclnn operators: the one list. X(Name, name) stands for the aclnn
// operator aclnn<Name>, the JAX function jax_aclnn.<name> and its custom-call
// target aclnn_<name>. The C++ tables (OpId, the operator names, the FFI
// handler sets, the host provider's second phases) are derived from it; the
// Python operators are checked against it (_aclnn_ffi.operators(),
// tests/test_build.py).
#ifndef JAX_ACLNN_OPERATORS_H_
#define JAX_ACLNN_OPERATORS_H_

// Each operator's own files (csrc/ops/): the FFI handler's part (<op>.h),
// the host provider's part (<op>.cc). <op>.h declares its attributes
// (attributes.h) and a struct jax_aclnn::ops::<Name> with
//   kNumInputs, kNumOutputs  its buffers, in the aclnn signature's order;
//   Attributes attrs         JAX_ACLNN_ATTRIBUTES_STRUCT(<Name>);
//   GetWorkspaceSize(api, descriptors, in, out, workspaceSize, executor)
//                            the aclnn first-phase call (descriptors.Scalar(v)
//                            makes an aclScalar, destroyed with the call's);
//   OmitAbsent(buffers)      optional: nulls the buffers absent in this call.
#include "ops/smooth_l1_loss_backward.h"
#include "ops/logit_grad.h"
#include "ops/hardshrink_backward.h"
#include "ops/swish_backward.h"
#include "ops/batch_norm_reduce_backward.h"

#define JAX_ACLNN_OPERATORS(X)                          \
  X(SmoothL1LossBackward, smooth_l1_loss_backward)     \
  X(LogitGrad, logit_grad)                             \
  X(HardshrinkBackward, hardshrink_backward)           \
  X(SwishBackward, swish_backward)                     \
  X(BatchNormReduceBackward, batch_norm_reduce_backward)

namespace jax_aclnn {

#define JAX_ACLNN_OP_ID(Name, name) k##Name,
enum OpId { JAX_ACLNN_OPERATORS(JAX_ACLNN_OP_ID) kNumOps };
#undef JAX_ACLNN_OP_ID

// aclnn operator names, indexed by OpId.
#define JAX_ACLNN_OP_NAME(Name, name) "aclnn" #Name,
inline constexpr const char* kAclnnOpNames[kNumOps] = {JAX_ACLNN_OPERATORS(JAX_ACLNN_OP_NAME)};
#undef JAX_ACLNN_OP_NAME

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_OPERATORS_H_
