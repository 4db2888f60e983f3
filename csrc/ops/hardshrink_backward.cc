// aclnnHardshrinkBackward on the host provider: its first phase (the second phase is the
// same for every operator, host/provider.cc).
#include "host/provider.h"

using namespace jax_aclnn;        // NOLINT: the operator list
using namespace jax_aclnn::host;  // NOLINT: the provider's common code

extern "C" aclnnStatus aclnnHardshrinkBackwardGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* self, const aclScalar* lambd,
    aclTensor* gradInput, uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = kAclnnOpNames[kHardshrinkBackward];
  if (lambd == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: lambd is a null pointer", op);
  HardshrinkBackwardParams p;
  p.lambd = lambd->value > 0.0 ? static_cast<float>(lambd->value) : 0.0f;
  return PointwiseGetWorkspaceSize(op, kHardshrinkBackward, PointwiseParams::Of(p),
                                   {{"gradOutput", gradOutput}, {"self", self}},
                                   {"gradInput", gradInput}, /*same_shape=*/false, workspaceSize,
                                   executor);
}
