// aclnnSwishBackward on the host provider: its first phase (the second phase is the
// same for every operator, host/provider.cc).
#include "host/provider.h"

using namespace jax_aclnn;        // NOLINT: the operator list
using namespace jax_aclnn::host;  // NOLINT: the provider's common code

extern "C" aclnnStatus aclnnSwishBackwardGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* self, const aclScalar* betaOptional,
    aclTensor* gradInput, uint64_t* workspaceSize, aclOpExecutor** executor) {
  SwishBackwardParams p;
  p.beta = betaOptional != nullptr ? static_cast<float>(betaOptional->value) : 1.0f;
  return PointwiseGetWorkspaceSize(kAclnnOpNames[kSwishBackward], kSwishBackward,
                                   PointwiseParams::Of(p),
                                   {{"gradOutput", gradOutput}, {"self", self}},
                                   {"gradInput", gradInput}, /*same_shape=*/true, workspaceSize,
                                   executor);
}
