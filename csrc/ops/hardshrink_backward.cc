// aclnnHardshrinkBackward on the host provider: its first phase.
#include "host/dtype.h"
#include "host/provider.h"
#include "operators.h"

namespace jax_aclnn::host {
namespace {

constexpr const char* kHardshrink = kAclnnOpNames[kHardshrinkBackward];

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the exported C functions below

extern "C" {

aclnnStatus aclnnHardshrinkBackwardGetWorkspaceSize(const aclTensor* gradOutput,
                                                    const aclTensor* self,
                                                    const aclScalar* lambd,
                                                    aclTensor* gradInput,
                                                    uint64_t* workspaceSize,
                                                    aclOpExecutor** executor) {
  if (lambd == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: lambd is a null pointer", kHardshrink);
  PointwiseParams p;
  p.lambd = lambd->value > 0.0 ? static_cast<float>(lambd->value) : 0.0f;
  const char* names[] = {"gradOutput", "self"};
  const aclTensor* inputs[] = {gradOutput, self};
  return PointwiseGetWorkspaceSize(kHardshrink, PointwiseOp::kHardshrinkBackward, p, names,
                                   inputs, 2, gradInput, "gradInput", false, workspaceSize,
                                   executor);
}

}  // extern "C"
