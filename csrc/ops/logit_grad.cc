// aclnnLogitGrad on the host provider: its first phase.
#include "host/dtype.h"
#include "host/provider.h"
#include "operators.h"

namespace jax_aclnn::host {
namespace {

constexpr const char* kLogitGrad = kAclnnOpNames[jax_aclnn::kLogitGrad];

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the exported C functions below

extern "C" {

aclnnStatus aclnnLogitGradGetWorkspaceSize(const aclTensor* x, const aclTensor* dy, double eps,
                                           const aclTensor* out, uint64_t* workspaceSize,
                                           aclOpExecutor** executor) {
  PointwiseParams p;
  p.eps = eps;
  const char* names[] = {"x", "dy"};
  const aclTensor* inputs[] = {x, dy};
  return PointwiseGetWorkspaceSize(kLogitGrad, PointwiseOp::kLogitGrad, p, names, inputs, 2,
                                   out, "out", true, workspaceSize, executor);
}

}  // extern "C"
