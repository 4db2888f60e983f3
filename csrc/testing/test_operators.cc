// The test provider's real operators (test_provider.h): aclnnSoftplusBackward
// and aclnnRmsNormGrad, float32 on host memory.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "testing/test_provider.h"

namespace jax_aclnn::test_provider {
namespace {

int64_t Product(const int64_t* dims, size_t n) {
  int64_t p = 1;
  for (size_t i = 0; i < n; ++i) p *= dims[i];
  return p;
}

std::string Join(const std::vector<int64_t>& dims) {
  return test_provider::Join(dims, [](int64_t d) { return std::to_string(d); });
}

std::string Shape(const aclTensor* t) { return "[" + Join(t->dims) + "]"; }

aclnnStatus CheckFloat32(const char* op, const char* name, const aclTensor* t) {
  if (t == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is null", op, name);
  if (t->dtype != ACL_FLOAT)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has data type %s; only f32 is supported", op,
                name, DtypeName(t->dtype).c_str());
  int64_t contiguous = 1;
  for (size_t d = t->strides.size(); d-- > 0; contiguous *= t->dims[d])
    if (t->dims[d] != 1 && t->strides[d] != contiguous)
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s is not contiguous", op, name);
  return ACLNN_SUCCESS;
}

aclnnStatus CheckShape(const char* op, const char* name, const aclTensor* t,
                       const std::vector<int64_t>& dims) {
  if (t->dims != dims)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s; expected [%s]", op, name,
                Shape(t).c_str(), Join(dims).c_str());
  return ACLNN_SUCCESS;
}

// Null data in a second phase with elements to read or write.
aclnnStatus CheckData(const char* op, int64_t elements, const std::vector<Slot>& in,
                      const std::vector<Slot>& out) {
  for (const auto* slots : {&in, &out})
    for (const Slot& s : *slots)
      if (elements > 0 && s.data == nullptr)
        return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: a tensor has no data", op);
  return ACLNN_SUCCESS;
}

}  // namespace
}  // namespace jax_aclnn::test_provider

using namespace jax_aclnn::test_provider;  // NOLINT: the C ABI's definitions below

// PyTorch's softplus_backward, computed in float as ATen's CPU kernel does.
EXPORT aclnnStatus aclnnSoftplusBackwardGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* self, const aclScalar* beta,
    const aclScalar* threshold, aclTensor* gradInput, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  const char* op = "aclnnSoftplusBackward";
  if (beta == nullptr || threshold == nullptr || workspaceSize == nullptr || executor == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: a null argument", op);
  RETURN_IF_ERROR(CheckFloat32(op, "gradOutput", gradOutput));
  RETURN_IF_ERROR(CheckFloat32(op, "self", self));
  RETURN_IF_ERROR(CheckFloat32(op, "gradInput", gradInput));
  RETURN_IF_ERROR(CheckShape(op, "self", self, gradOutput->dims));
  RETURN_IF_ERROR(CheckShape(op, "gradInput", gradInput, gradOutput->dims));
  const int64_t n = Product(self->dims.data(), self->dims.size());
  const float b = static_cast<float>(beta->real), t = static_cast<float>(threshold->real);
  Kernel kernel = [op, n, b, t](const std::vector<Slot>& in,
                                const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, n, in, out));
    const float *g = Floats(in[0]), *x = Floats(in[1]);
    float* result = Floats(out[0]);
    for (int64_t i = 0; i < n; ++i) {
      const float z = std::exp(x[i] * b);
      result[i] = (x[i] * b) > t ? g[i] : g[i] * z / (z + 1.0f);
    }
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(gradOutput), SlotOf(self)}, {SlotOf(gradInput)},
                      std::move(kernel), workspaceSize, executor);
}

// RMSNorm's backward: x (rows..., D...), gamma (D...), rstd (rows..., 1...).
EXPORT aclnnStatus aclnnRmsNormGradGetWorkspaceSize(
    const aclTensor* dy, const aclTensor* x, const aclTensor* rstd, const aclTensor* gamma,
    const aclTensor* dxOut, const aclTensor* dgammaOut, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  const char* op = "aclnnRmsNormGrad";
  if (workspaceSize == nullptr || executor == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: workspaceSize or executor is null", op);
  const char* names[] = {"dy", "x", "rstd", "gamma", "dxOut", "dgammaOut"};
  const aclTensor* tensors[] = {dy, x, rstd, gamma, dxOut, dgammaOut};
  for (int i = 0; i < 6; ++i) RETURN_IF_ERROR(CheckFloat32(op, names[i], tensors[i]));
  const size_t rank = x->dims.size(), gamma_rank = gamma->dims.size();
  if (gamma_rank > rank)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: gamma %s has a higher rank than x %s", op,
                Shape(gamma).c_str(), Shape(x).c_str());
  const size_t lead = rank - gamma_rank;
  std::vector<int64_t> rstd_dims(x->dims.begin(), x->dims.begin() + lead);
  rstd_dims.resize(rank, 1);
  RETURN_IF_ERROR(CheckShape(op, "gamma", gamma, {x->dims.begin() + lead, x->dims.end()}));
  RETURN_IF_ERROR(CheckShape(op, "dy", dy, x->dims));
  RETURN_IF_ERROR(CheckShape(op, "rstd", rstd, rstd_dims));
  RETURN_IF_ERROR(CheckShape(op, "dxOut", dxOut, x->dims));
  RETURN_IF_ERROR(CheckShape(op, "dgammaOut", dgammaOut, gamma->dims));
  const int64_t rows = Product(x->dims.data(), lead);
  const int64_t n = Product(gamma->dims.data(), gamma_rank);
  Kernel kernel = [op, rows, n](const std::vector<Slot>& in,
                                const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, rows * n, in, out));
    const float *dy = Floats(in[0]), *x = Floats(in[1]), *rstd = Floats(in[2]),
                *gamma = Floats(in[3]);
    float *dx = Floats(out[0]), *dgamma = Floats(out[1]);
    std::vector<double> dgamma_sum(n, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const float *dy_r = dy + r * n, *x_r = x + r * n;
      const double rs = rstd[r];
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += double(dy_r[j]) * gamma[j] * x_r[j];
      const double mean = sum / n;
      for (int64_t j = 0; j < n; ++j) {
        dx[r * n + j] = float(rs * gamma[j] * dy_r[j] - x_r[j] * rs * rs * rs * mean);
        dgamma_sum[j] += double(dy_r[j]) * x_r[j] * rs;
      }
    }
    for (int64_t j = 0; j < n; ++j) dgamma[j] = float(dgamma_sum[j]);
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(dy), SlotOf(x), SlotOf(rstd), SlotOf(gamma)},
                      {SlotOf(dxOut), SlotOf(dgammaOut)}, std::move(kernel), workspaceSize,
                      executor);
}

JAX_ACLNN_TEST_SECOND_PHASE(SoftplusBackward)
JAX_ACLNN_TEST_SECOND_PHASE(RmsNormGrad)
