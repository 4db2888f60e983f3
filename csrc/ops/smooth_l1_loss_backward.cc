// aclnnSmoothL1LossBackward on the host provider: its first phase.
#include "host/dtype.h"
#include "host/provider.h"
#include "operators.h"

namespace jax_aclnn::host {
namespace {

constexpr const char* kSmoothL1 = kAclnnOpNames[kSmoothL1LossBackward];

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the exported C functions below

extern "C" {

aclnnStatus aclnnSmoothL1LossBackwardGetWorkspaceSize(const aclTensor* gradOut,
                                                      const aclTensor* self,
                                                      const aclTensor* target, int64_t reduction,
                                                      float beta, aclTensor* gradInput,
                                                      uint64_t* workspaceSize,
                                                      aclOpExecutor** executor) {
  if (reduction < 0 || reduction > 2)
    return Fail(ACLNN_ERR_PARAM_INVALID,
                "%s: reduction must be 0 (none), 1 (mean) or 2 (sum), got %lld", kSmoothL1,
                static_cast<long long>(reduction));
  if (!(beta >= 0.0f))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: beta must be non-negative, got %g", kSmoothL1,
                static_cast<double>(beta));
  PointwiseParams p;
  p.beta = beta;
  if (reduction == 1 && self != nullptr && self->view.NumElements() > 0)
    p.scale = static_cast<float>(1.0 / static_cast<double>(self->view.NumElements()));
  const char* names[] = {"gradOut", "self", "target"};
  const aclTensor* inputs[] = {gradOut, self, target};
  return PointwiseGetWorkspaceSize(kSmoothL1, PointwiseOp::kSmoothL1LossBackward, p, names,
                                   inputs, 3, gradInput, "gradInput", false, workspaceSize,
                                   executor);
}

}  // extern "C"
