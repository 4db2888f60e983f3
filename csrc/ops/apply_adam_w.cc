// The first phases of aclnnApplyAdamW and aclnnApplyAdamWV2 on the host
// provider. Both run one kernel (host/adamw_kernel.cc, RunApplyAdamW), which
// takes this update's beta1^t and beta2^t. As CANN's ops-nn pages give
// them, every tensor here contiguous:
//
// aclnnApplyAdamWV2 (optim/apply_adam_w_v2/docs/aclnnApplyAdamWV2.md):
// varRef, mRef, vRef, grad (and maxGradNormOptionalRef, required with
// amsgrad, updated to max(maxGradNorm, v)) of one shape of rank 1 to 8 and
// one type, FLOAT32, FLOAT16 or BFLOAT16, updated in place; step INT64 or
// FLOAT32 with one element, read when the update runs (t = step + 1, beta^t
// = pow(beta, t); not written); lr, beta1, beta2, weightDecay, eps float
// attributes.
//
// aclnnApplyAdamW (optim/apply_adam_w/docs/aclnnApplyAdamW.md, its tiling
// optim/apply_adam_w/op_host/arch35/apply_adam_w_tiling.cpp and kernel
// optim/apply_adam_w/op_kernel/arch35/apply_adam_w_dag.h): varRef, mRef,
// vRef, grad as V2's; beta1Power, beta2Power (beta^(t-1): the kernel
// multiplies each by its beta, "beta1_power_out = beta1_power * beta1"), lr,
// weightDecay, beta1, beta2, eps one-element tensors of varRef's type
// ("shape要求为[1]", "与varRef保持一致"), read when the update runs;
// maxGradNormOptional an input only (const; required with amsgrad, then of
// varRef's type and shape): the denominator takes max(maxGradNorm, v), vRef
// gets v and maxGradNorm is not written (the kernel's ApplyAdamWAmsGradDAG).
// Refusals as the page's table: a null tensor ACLNN_ERR_PARAM_NULLPTR (161001),
// a type or shape not as above ACLNN_ERR_PARAM_INVALID (161002).
#include <cmath>
#include <cstdint>

#include "host/dtype.h"
#include "host/provider.h"

namespace jax_aclnn::host {
namespace {

constexpr const char* kV1 = "aclnnApplyAdamW";
constexpr const char* kV2 = "aclnnApplyAdamWV2";

// varRef: a contiguous tensor of rank 1 to 8 (both versions).
aclnnStatus CheckVar(const char* op, const aclTensor* var) {
  if (aclnnStatus st = CheckTensor(op, "varRef", var)) return st;
  if (var->view.rank < 1 || var->view.rank > 8)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: varRef has shape %s; its rank must be 1 to 8", op,
                ShapeString(var->view).c_str());
  return CheckContiguous(op, "varRef", var);
}

// A contiguous tensor of varRef's type and shape.
aclnnStatus CheckLikeVar(const char* op, const char* name, const aclTensor* t,
                         const aclTensor* var) {
  if (aclnnStatus st = CheckTensor(op, name, t)) return st;
  if (aclnnStatus st = CheckSameType(op, "varRef", var, name, t)) return st;
  if (aclnnStatus st = CheckDims(op, name, t, var->view.dims, var->view.rank)) return st;
  return CheckContiguous(op, name, t);
}

// A tensor of one element (any shape holding one) with data, or the status
// naming what is wrong.
aclnnStatus CheckOneElement(const char* op, const char* name, const aclTensor* t) {
  if (t == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is a null pointer", op, name);
  if (t->view.NumElements() != 1)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s; expected one element", op, name,
                ShapeString(t->view).c_str());
  if (t->view.data == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s has no data", op, name);
  return ACLNN_SUCCESS;
}

// The value of a one-element FLOAT32, FLOAT16 or BFLOAT16 tensor, in float32.
float ReadFloat(const View& t) {
  const void* p = t.data;
  switch (t.dtype) {
    case ACL_FLOAT16: return HalfToFloat(*static_cast<const uint16_t*>(p));
    case ACL_BF16: return Bf16ToFloat(*static_cast<const uint16_t*>(p));
    default: return *static_cast<const float*>(p);
  }
}

void RunV2(const aclOpExecutor& ex, void*, const JaxAclnnHostStream* stream) {
  const auto p = ex.params.As<AdamWParams>();
  const View& step = ex.inputs[1];
  const double s = step.dtype == ACL_INT64 ? double(*static_cast<const int64_t*>(step.data))
                                           : double(*static_cast<const float*>(step.data));
  // as V2's kernel: t = step + 1 in float32, beta^t from it
  const float t = static_cast<float>(s) + 1.0f;
  const auto power = [t](float beta) {
    return static_cast<float>(std::pow(double(beta), double(t)));
  };
  const View* max_v = p.amsgrad ? &ex.outputs[3] : nullptr;
  RunApplyAdamW(ex.outputs[0], ex.outputs[1], ex.outputs[2], max_v, max_v, ex.inputs[0], p,
                power(p.beta1), power(p.beta2), stream);
}

// inputs: grad, beta1Power, beta2Power, lr, weightDecay, beta1, beta2, eps,
// (maxGradNormOptional); params: amsgrad and maximize.
void RunV1(const aclOpExecutor& ex, void*, const JaxAclnnHostStream* stream) {
  const auto flags = ex.params.As<AdamWParams>();
  const auto at = [&ex](int i) { return ReadFloat(ex.inputs[i]); };
  const AdamWParams p{at(3), at(5), at(6), at(4), at(7), flags.amsgrad, flags.maximize};
  // as V1's kernel, in float32: beta^t = beta^(t-1) * beta
  RunApplyAdamW(ex.outputs[0], ex.outputs[1], ex.outputs[2],
                p.amsgrad ? &ex.inputs[8] : nullptr, nullptr, ex.inputs[0], p, at(1) * p.beta1,
                at(2) * p.beta2, stream);
}

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the provider's common code

extern "C" aclnnStatus aclnnApplyAdamWGetWorkspaceSize(
    aclTensor* varRef, aclTensor* mRef, aclTensor* vRef, const aclTensor* beta1Power,
    const aclTensor* beta2Power, const aclTensor* lr, const aclTensor* weightDecay,
    const aclTensor* beta1, const aclTensor* beta2, const aclTensor* eps, const aclTensor* grad,
    const aclTensor* maxGradNormOptional, bool amsgrad, bool maximize, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  if (aclnnStatus st = CheckVar(kV1, varRef)) return st;
  if (aclnnStatus st = CheckLikeVar(kV1, "mRef", mRef, varRef)) return st;
  if (aclnnStatus st = CheckLikeVar(kV1, "vRef", vRef, varRef)) return st;
  const Operand scalars[] = {{"beta1Power", beta1Power}, {"beta2Power", beta2Power},
                             {"lr", lr}, {"weightDecay", weightDecay}, {"beta1", beta1},
                             {"beta2", beta2}, {"eps", eps}};
  for (const Operand& s : scalars) {
    if (aclnnStatus st = CheckOneElement(kV1, s.name, s.tensor)) return st;
    if (aclnnStatus st = CheckTensor(kV1, s.name, s.tensor)) return st;
    if (aclnnStatus st = CheckSameType(kV1, "varRef", varRef, s.name, s.tensor)) return st;
  }
  if (aclnnStatus st = CheckLikeVar(kV1, "grad", grad, varRef)) return st;
  if (amsgrad && maxGradNormOptional == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: maxGradNormOptional is a null pointer with amsgrad",
                kV1);
  if (maxGradNormOptional != nullptr) {  // checked when given (the tiling), read with amsgrad
    if (aclnnStatus st = CheckLikeVar(kV1, "maxGradNormOptional", maxGradNormOptional, varRef))
      return st;
  }
  const AdamWParams flags{0, 0, 0, 0, 0, amsgrad, maximize};
  return MakeExecutor(kV1, RunV1, PointwiseParams::Of(flags),
                      {grad, beta1Power, beta2Power, lr, weightDecay, beta1, beta2, eps,
                       amsgrad ? maxGradNormOptional : nullptr},
                      {varRef, mRef, vRef}, 0, workspaceSize, executor);
}

extern "C" aclnnStatus aclnnApplyAdamWV2GetWorkspaceSize(
    aclTensor* varRef, aclTensor* mRef, aclTensor* vRef, aclTensor* maxGradNormOptionalRef,
    const aclTensor* grad, const aclTensor* step, float lr, float beta1, float beta2,
    float weightDecay, float eps, bool amsgrad, bool maximize, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  if (aclnnStatus st = CheckVar(kV2, varRef)) return st;
  if (aclnnStatus st = CheckLikeVar(kV2, "mRef", mRef, varRef)) return st;
  if (aclnnStatus st = CheckLikeVar(kV2, "vRef", vRef, varRef)) return st;
  if (amsgrad && maxGradNormOptionalRef == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR,
                "%s: maxGradNormOptionalRef is a null pointer with amsgrad", kV2);
  if (amsgrad) {
    if (aclnnStatus st =
            CheckLikeVar(kV2, "maxGradNormOptionalRef", maxGradNormOptionalRef, varRef))
      return st;
  } else if (maxGradNormOptionalRef != nullptr) {  // not read: its type checked, not its shape
    if (aclnnStatus st = CheckTensor(kV2, "maxGradNormOptionalRef", maxGradNormOptionalRef))
      return st;
    if (aclnnStatus st =
            CheckSameType(kV2, "varRef", varRef, "maxGradNormOptionalRef", maxGradNormOptionalRef))
      return st;
  }
  if (aclnnStatus st = CheckLikeVar(kV2, "grad", grad, varRef)) return st;
  if (aclnnStatus st = CheckOneElement(kV2, "step", step)) return st;
  if (aclnnStatus st = CheckDataType(kV2, "step", step, {ACL_INT64, ACL_FLOAT})) return st;
  const AdamWParams p{lr, beta1, beta2, weightDecay, eps, amsgrad, maximize};
  return MakeExecutor(kV2, RunV2, PointwiseParams::Of(p), {grad, step},
                      {varRef, mRef, vRef, amsgrad ? maxGradNormOptionalRef : nullptr}, 0,
                      workspaceSize, executor);
}
