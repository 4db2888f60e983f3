// The test provider's optimizer operator (test_provider.h), float32 on host
// memory. aclnnApplyAdamWV2 from hicann/ops-nn
// optim/apply_adam_w_v2/docs/aclnnApplyAdamWV2.md and
// optim/apply_adam_w_v2/op_host/op_api/aclnn_apply_adam_w_v2.h, the update
// computed as optim/apply_adam_w_v2/op_kernel/apply_adam_w_v2_fp.h does it
// (the page's formula leaves the step's increment and the order out).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "testing/operator_checks.h"
#include "testing/test_provider.h"

using namespace jax_aclnn::test_provider;       // NOLINT: the C ABI's definitions below
using namespace jax_aclnn::test_provider::ops;  // NOLINT

// In place on varRef, mRef, vRef (and maxGradNormOptionalRef with amsgrad),
// in float32 in the kernel's order, with t = step + 1 (step, int64 or
// float32 with one element, is not written): g = maximize ? -grad : grad;
// var *= 1 - lr * weightDecay; m += (g - m) * (1 - beta1); v = v * beta2 +
// g * g * (1 - beta2); amsgrad: maxGradNorm = max(maxGradNorm, v);
// denom = sqrt(amsgrad ? maxGradNorm : v) / sqrt(1 - beta2^t) + eps;
// var -= lr / (1 - beta1^t) * m / denom.
EXPORT aclnnStatus aclnnApplyAdamWV2GetWorkspaceSize(
    aclTensor* varRef, aclTensor* mRef, aclTensor* vRef, aclTensor* maxGradNormOptionalRef,
    const aclTensor* grad, const aclTensor* step, float lr, float beta1, float beta2,
    float weightDecay, float eps, bool amsgrad, bool maximize, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  const char* op = "aclnnApplyAdamWV2";
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspaceSize));
  RETURN_IF_ERROR(CheckNotNull(op, "executor", executor));
  RETURN_IF_ERROR(CheckFloat32(op, "varRef", varRef));
  RETURN_IF_ERROR(CheckRank(op, "varRef", varRef, 1, 8));
  RETURN_IF_ERROR(CheckFloat32(op, "mRef", mRef));
  RETURN_IF_ERROR(CheckFloat32(op, "vRef", vRef));
  RETURN_IF_ERROR(CheckFloat32(op, "grad", grad));
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
  RETURN_IF_ERROR(CheckShape(op, "mRef", mRef, varRef->dims));
  RETURN_IF_ERROR(CheckShape(op, "vRef", vRef, varRef->dims));
  RETURN_IF_ERROR(CheckShape(op, "grad", grad, varRef->dims));
  const int64_t size = Numel(varRef);
  Kernel kernel = [=](const std::vector<Slot>& in, const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    if (size == 0) return ACLNN_SUCCESS;
    const float t = (in[1].tensor->dtype == ACL_FLOAT ? Floats(in[1])[0]
                                                      : float(IntAt(in[1], 0))) + 1.0f;
    const float bias1 = 1.0f - float(std::pow(double(beta1), double(t)));
    const float bias2 = 1.0f - float(std::pow(double(beta2), double(t)));
    const float step_size = lr / bias1, bias2_sqrt = 1.0f / std::sqrt(bias2);
    const float decay = 1.0f - lr * weightDecay, one_sub_beta1 = 1.0f - beta1,
                one_sub_beta2 = 1.0f - beta2;
    const float* g_in = Floats(in[0]);
    float *var = Floats(out[0]), *m = Floats(out[1]), *v = Floats(out[2]);
    float* max_v = amsgrad ? Floats(out[3]) : nullptr;
    for (int64_t i = 0; i < size; ++i) {
      const float g = maximize ? -g_in[i] : g_in[i];
      var[i] *= decay;
      m[i] += (g - m[i]) * one_sub_beta1;
      v[i] = v[i] * beta2 + g * g * one_sub_beta2;
      float second = v[i];
      if (amsgrad) second = max_v[i] = std::max(max_v[i], v[i]);
      const float denom = std::sqrt(second) * bias2_sqrt + eps;
      var[i] -= m[i] / denom * step_size;
    }
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(grad), SlotOf(step)},
                      {SlotOf(varRef), SlotOf(mRef), SlotOf(vRef), SlotOf(maxGradNormOptionalRef)},
                      std::move(kernel), workspaceSize, executor);
}

JAX_ACLNN_TEST_SECOND_PHASE(ApplyAdamWV2)
