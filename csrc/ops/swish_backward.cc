// aclnnSwishBackward on the host provider: its first phase.
#include "host/dtype.h"
#include "host/provider.h"
#include "operators.h"

namespace jax_aclnn::host {
namespace {

constexpr const char* kSwish = kAclnnOpNames[kSwishBackward];

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the exported C functions below

extern "C" {

aclnnStatus aclnnSwishBackwardGetWorkspaceSize(const aclTensor* gradOutput, const aclTensor* self,
                                               const aclScalar* betaOptional,
                                               aclTensor* gradInput, uint64_t* workspaceSize,
                                               aclOpExecutor** executor) {
  PointwiseParams p;
  p.beta = betaOptional != nullptr ? static_cast<float>(betaOptional->value) : 1.0f;
  const char* names[] = {"gradOutput", "self"};
  const aclTensor* inputs[] = {gradOutput, self};
  return PointwiseGetWorkspaceSize(kSwish, PointwiseOp::kSwishBackward, p, names, inputs, 2,
                                   gradInput, "gradInput", true, workspaceSize, executor);
}

}  // extern "C"
