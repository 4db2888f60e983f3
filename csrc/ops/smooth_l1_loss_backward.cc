// aclnnSmoothL1LossBackward on the host provider: its first phase (the second phase is the
// same for every operator, host/provider.cc).
#include "host/provider.h"

using namespace jax_aclnn;        // NOLINT: the operator list
using namespace jax_aclnn::host;  // NOLINT: the provider's common code

extern "C" aclnnStatus aclnnSmoothL1LossBackwardGetWorkspaceSize(
    const aclTensor* gradOut, const aclTensor* self, const aclTensor* target, int64_t reduction,
    float beta, aclTensor* gradInput, uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = kAclnnOpNames[kSmoothL1LossBackward];
  if (reduction < 0 || reduction > 2)
    return Fail(ACLNN_ERR_PARAM_INVALID,
                "%s: reduction must be 0 (none), 1 (mean) or 2 (sum), got %lld", op,
                static_cast<long long>(reduction));
  if (!(beta >= 0.0f))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: beta must be non-negative, got %g", op,
                static_cast<double>(beta));
  SmoothL1LossBackwardParams p;
  p.beta = beta;
  p.scale = 1.0f;
  if (reduction == 1 && self != nullptr && self->view.NumElements() > 0)
    p.scale = static_cast<float>(1.0 / static_cast<double>(self->view.NumElements()));
  return PointwiseGetWorkspaceSize(op, kSmoothL1LossBackward, PointwiseParams::Of(p),
                                   {{"gradOut", gradOut}, {"self", self}, {"target", target}},
                                   {"gradInput", gradInput}, /*same_shape=*/false, workspaceSize,
                                   executor);
}
