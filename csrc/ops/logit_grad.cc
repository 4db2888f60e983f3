// aclnnLogitGrad on the host provider: its first phase (the second phase is the
// same for every operator, host/provider.cc).
#include "host/provider.h"

using namespace jax_aclnn;        // NOLINT: the operator list
using namespace jax_aclnn::host;  // NOLINT: the provider's common code

extern "C" aclnnStatus aclnnLogitGradGetWorkspaceSize(const aclTensor* x, const aclTensor* dy,
                                                      double eps, const aclTensor* out,
                                                      uint64_t* workspaceSize,
                                                      aclOpExecutor** executor) {
  LogitGradParams p;
  p.eps = eps;
  return PointwiseGetWorkspaceSize(kAclnnOpNames[kLogitGrad], kLogitGrad, PointwiseParams::Of(p),
                                   {{"x", x}, {"dy", dy}}, {"out", out}, /*same_shape=*/true,
                                   workspaceSize, executor);
}
