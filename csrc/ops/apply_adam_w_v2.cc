// aclnnApplyAdamWV2's first phase on the host provider (the kernel:
// host/adamw_kernel.cc). As CANN's ops-nn page gives it
// (optim/apply_adam_w_v2/docs/aclnnApplyAdamWV2.md): varRef, mRef, vRef,
// grad (and maxGradNormOptionalRef, required with amsgrad) of one shape of
// rank 1 to 8 and one type, FLOAT32, FLOAT16 or BFLOAT16, updated in place;
// step INT64 or FLOAT32 with one element, read when the update runs (t =
// step + 1; not written). Here every tensor is contiguous.
#include <cstdint>

#include "host/provider.h"
#include "host/rows.h"

namespace jax_aclnn::host {
namespace {

constexpr const char* kOp = "aclnnApplyAdamWV2";

// A contiguous tensor of varRef's type and shape.
aclnnStatus CheckLikeVar(const char* name, const aclTensor* t, const aclTensor* var) {
  if (t == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is a null pointer", kOp, name);
  if (aclnnStatus st = CheckTensor(kOp, name, t)) return st;
  if (aclnnStatus st = CheckSameType(kOp, "varRef", var, name, t)) return st;
  if (aclnnStatus st = CheckDims(kOp, name, t, var->view.dims, var->view.rank)) return st;
  if (!IsContiguous(t->view))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s must be contiguous", kOp, name);
  return ACLNN_SUCCESS;
}

void RunApplyAdamWExecutor(const aclOpExecutor& ex, void*, const JaxAclnnHostStream* stream) {
  const auto p = ex.params.As<AdamWParams>();
  const View& step = ex.inputs[1];
  const double s = step.dtype == ACL_INT64 ? double(*static_cast<const int64_t*>(step.data))
                                           : double(*static_cast<const float*>(step.data));
  RunApplyAdamW(ex.outputs[0], ex.outputs[1], ex.outputs[2],
                p.amsgrad ? &ex.outputs[3] : nullptr, ex.inputs[0], p, s, stream);
}

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the provider's common code

extern "C" aclnnStatus aclnnApplyAdamWV2GetWorkspaceSize(
    aclTensor* varRef, aclTensor* mRef, aclTensor* vRef, aclTensor* maxGradNormOptionalRef,
    const aclTensor* grad, const aclTensor* step, float lr, float beta1, float beta2,
    float weightDecay, float eps, bool amsgrad, bool maximize, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  if (aclnnStatus st = CheckTensor(kOp, "varRef", varRef)) return st;
  if (varRef->view.rank < 1 || varRef->view.rank > 8)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: varRef has shape %s; its rank must be 1 to 8",
                kOp, ShapeString(varRef->view).c_str());
  if (!IsContiguous(varRef->view))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: varRef must be contiguous", kOp);
  if (aclnnStatus st = CheckLikeVar("mRef", mRef, varRef)) return st;
  if (aclnnStatus st = CheckLikeVar("vRef", vRef, varRef)) return st;
  if (amsgrad && maxGradNormOptionalRef == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR,
                "%s: maxGradNormOptionalRef is a null pointer with amsgrad", kOp);
  if (amsgrad) {
    if (aclnnStatus st = CheckLikeVar("maxGradNormOptionalRef", maxGradNormOptionalRef, varRef))
      return st;
  } else if (maxGradNormOptionalRef != nullptr) {  // not read: its type checked, not its shape
    if (aclnnStatus st = CheckTensor(kOp, "maxGradNormOptionalRef", maxGradNormOptionalRef))
      return st;
    if (aclnnStatus st =
            CheckSameType(kOp, "varRef", varRef, "maxGradNormOptionalRef", maxGradNormOptionalRef))
      return st;
  }
  if (aclnnStatus st = CheckLikeVar("grad", grad, varRef)) return st;
  if (step == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: step is a null pointer", kOp);
  if (aclnnStatus st = CheckDataType(kOp, "step", step, {ACL_INT64, ACL_FLOAT})) return st;
  if (step->view.NumElements() != 1)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: step has shape %s; expected one element", kOp,
                ShapeString(step->view).c_str());
  if (step->view.data == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: step has no data", kOp);
  const AdamWParams p{lr, beta1, beta2, weightDecay, eps, amsgrad, maximize};
  return MakeExecutor(kOp, RunApplyAdamWExecutor, PointwiseParams::Of(p), {grad, step},
                      {varRef, mRef, vRef, amsgrad ? maxGradNormOptionalRef : nullptr}, 0,
                      workspaceSize, executor);
}
