// The test provider's optimizer operators (test_provider.h), float32 on host
// memory. aclnnApplyAdamWV2 from hicann/ops-nn
// optim/apply_adam_w_v2/docs/aclnnApplyAdamWV2.md and
// optim/apply_adam_w_v2/op_host/op_api/aclnn_apply_adam_w_v2.h, the update
// computed as optim/apply_adam_w_v2/op_kernel/apply_adam_w_v2_fp.h does it
// (the page's formula leaves the step's increment and the order out).
// aclnnApplyAdamW (V1) from optim/apply_adam_w/docs/aclnnApplyAdamW.md, its
// scalars one-element tensors, beta1Power and beta2Power beta^(t-1) (its
// kernel, optim/apply_adam_w/op_kernel/arch35/apply_adam_w_dag.h: "beta1_power_out
// = beta1_power * beta1"), maxGradNormOptional read, never written.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "testing/operator_checks.h"
#include "testing/test_provider.h"

using namespace jax_aclnn::test_provider;       // NOLINT: the C ABI's definitions below
using namespace jax_aclnn::test_provider::ops;  // NOLINT

namespace {

// One update of `size` floats in place, in float32 in the kernels' order,
// beta1_t and beta2_t this update's beta^t: g = maximize ? -grad : grad;
// var *= 1 - lr * weightDecay; m += (g - m) * (1 - beta1); v = v * beta2 +
// g * g * (1 - beta2); second = max_v ? max(max_v, v) : v (written back to
// max_v where write_max); denom = sqrt(second) / sqrt(1 - beta2^t) + eps;
// var -= lr / (1 - beta1^t) * m / denom.
void AdamW(float* var, float* m, float* v, float* max_v, bool write_max, const float* grad,
           int64_t size, float lr, float beta1, float beta2, float weightDecay, float eps,
           float beta1_t, float beta2_t, bool maximize) {
  const float step_size = lr / (1.0f - beta1_t), bias2_sqrt = 1.0f / std::sqrt(1.0f - beta2_t);
  const float decay = 1.0f - lr * weightDecay, one_sub_beta1 = 1.0f - beta1,
              one_sub_beta2 = 1.0f - beta2;
  for (int64_t i = 0; i < size; ++i) {
    const float g = maximize ? -grad[i] : grad[i];
    var[i] *= decay;
    m[i] += (g - m[i]) * one_sub_beta1;
    v[i] = v[i] * beta2 + g * g * one_sub_beta2;
    const float second = max_v != nullptr ? std::max(max_v[i], v[i]) : v[i];
    if (write_max) max_v[i] = second;
    const float denom = std::sqrt(second) * bias2_sqrt + eps;
    var[i] -= m[i] / denom * step_size;
  }
}

// Both versions' tensors: varRef float32 of rank 1 to 8; mRef, vRef and
// grad float32 of its shape.
aclnnStatus CheckAdamWTensors(const char* op, const aclTensor* varRef, const aclTensor* mRef,
                              const aclTensor* vRef, const aclTensor* grad) {
  RETURN_IF_ERROR(CheckFloat32(op, "varRef", varRef));
  RETURN_IF_ERROR(CheckRank(op, "varRef", varRef, 1, 8));
  for (auto [name, t] : {std::pair{"mRef", mRef}, std::pair{"vRef", vRef},
                         std::pair{"grad", grad}}) {
    RETURN_IF_ERROR(CheckFloat32(op, name, t));
    RETURN_IF_ERROR(CheckShape(op, name, t, varRef->dims));
  }
  return ACLNN_SUCCESS;
}

}  // namespace

// In place on varRef, mRef, vRef (and maxGradNormOptionalRef with amsgrad),
// with t = step + 1 (step, int64 or float32 with one element, is not
// written): AdamW above, beta^t = pow(beta, t).
EXPORT aclnnStatus aclnnApplyAdamWV2GetWorkspaceSize(
    aclTensor* varRef, aclTensor* mRef, aclTensor* vRef, aclTensor* maxGradNormOptionalRef,
    const aclTensor* grad, const aclTensor* step, float lr, float beta1, float beta2,
    float weightDecay, float eps, bool amsgrad, bool maximize, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  const char* op = "aclnnApplyAdamWV2";
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspaceSize));
  RETURN_IF_ERROR(CheckNotNull(op, "executor", executor));
  RETURN_IF_ERROR(CheckAdamWTensors(op, varRef, mRef, vRef, grad));
  if (amsgrad && maxGradNormOptionalRef == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: maxGradNormOptionalRef is null with amsgrad", op);
  if (maxGradNormOptionalRef != nullptr) {
    RETURN_IF_ERROR(CheckFloat32(op, "maxGradNormOptionalRef", maxGradNormOptionalRef));
    RETURN_IF_ERROR(CheckShape(op, "maxGradNormOptionalRef", maxGradNormOptionalRef, varRef->dims));
  }
  RETURN_IF_ERROR(CheckTensor(op, "step", step, {ACL_INT64, ACL_FLOAT}));
  if (Numel(step) != 1)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: step has shape %s; expected one element", op,
                Shape(step).c_str());
  const int64_t size = Numel(varRef);
  Kernel kernel = [=](const std::vector<Slot>& in, const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    if (size == 0) return ACLNN_SUCCESS;
    const float t = (in[1].tensor->dtype == ACL_FLOAT ? Floats(in[1])[0]
                                                      : float(IntAt(in[1], 0))) + 1.0f;
    const auto power = [t](float beta) { return float(std::pow(double(beta), double(t))); };
    AdamW(Floats(out[0]), Floats(out[1]), Floats(out[2]), amsgrad ? Floats(out[3]) : nullptr,
          amsgrad, Floats(in[0]), size, lr, beta1, beta2, weightDecay, eps, power(beta1),
          power(beta2), maximize);
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(grad), SlotOf(step)},
                      {SlotOf(varRef), SlotOf(mRef), SlotOf(vRef), SlotOf(maxGradNormOptionalRef)},
                      std::move(kernel), workspaceSize, executor);
}

JAX_ACLNN_TEST_SECOND_PHASE(ApplyAdamWV2)

// In place on varRef, mRef, vRef: AdamW above with beta^t = beta^(t-1) *
// beta, the scalars one-element float32 tensors read when it runs.
EXPORT aclnnStatus aclnnApplyAdamWGetWorkspaceSize(
    aclTensor* varRef, aclTensor* mRef, aclTensor* vRef, const aclTensor* beta1Power,
    const aclTensor* beta2Power, const aclTensor* lr, const aclTensor* weightDecay,
    const aclTensor* beta1, const aclTensor* beta2, const aclTensor* eps, const aclTensor* grad,
    const aclTensor* maxGradNormOptional, bool amsgrad, bool maximize, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  const char* op = "aclnnApplyAdamW";
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspaceSize));
  RETURN_IF_ERROR(CheckNotNull(op, "executor", executor));
  RETURN_IF_ERROR(CheckAdamWTensors(op, varRef, mRef, vRef, grad));
  const std::pair<const char*, const aclTensor*> scalars[] = {
      {"beta1Power", beta1Power}, {"beta2Power", beta2Power}, {"lr", lr},
      {"weightDecay", weightDecay}, {"beta1", beta1}, {"beta2", beta2}, {"eps", eps}};
  for (auto [name, t] : scalars) {
    RETURN_IF_ERROR(CheckFloat32(op, name, t));
    if (Numel(t) != 1)
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s; expected one element", op, name,
                  Shape(t).c_str());
  }
  if (amsgrad && maxGradNormOptional == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: maxGradNormOptional is null with amsgrad", op);
  if (maxGradNormOptional != nullptr) {
    RETURN_IF_ERROR(CheckFloat32(op, "maxGradNormOptional", maxGradNormOptional));
    RETURN_IF_ERROR(CheckShape(op, "maxGradNormOptional", maxGradNormOptional, varRef->dims));
  }
  const int64_t size = Numel(varRef);
  Kernel kernel = [=](const std::vector<Slot>& in, const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    if (size == 0) return ACLNN_SUCCESS;
    const auto at = [&in](int i) { return Floats(in[i])[0]; };
    AdamW(Floats(out[0]), Floats(out[1]), Floats(out[2]), amsgrad ? Floats(in[8]) : nullptr,
          false, Floats(in[0]), size, at(3), at(5), at(6), at(4), at(7), at(1) * at(5),
          at(2) * at(6), maximize);
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op,
                      {SlotOf(grad), SlotOf(beta1Power), SlotOf(beta2Power), SlotOf(lr),
                       SlotOf(weightDecay), SlotOf(beta1), SlotOf(beta2), SlotOf(eps),
                       SlotOf(amsgrad ? maxGradNormOptional : nullptr)},
                      {SlotOf(varRef), SlotOf(mRef), SlotOf(vRef)}, std::move(kernel),
                      workspaceSize, executor);
}

JAX_ACLNN_TEST_SECOND_PHASE(ApplyAdamW)
