// The test provider's normalization and gated-activation operators
// (test_provider.h), float32 on host memory. From CANN's documented
// semantics (hicann/ops-nn):
//  - aclnnRmsNorm: norm/rms_norm/docs/aclnnRmsNorm.md;
//  - aclnnAddRmsNorm: norm/add_rms_norm/docs/aclnnAddRmsNorm.md and
//    norm/add_rms_norm/op_host/op_api/aclnn_add_rms_norm.h;
//  - aclnnSwiGlu: activation/swi_glu/docs/aclnnSwiGlu.md;
//  - aclnnSwiGluGrad: activation/swi_glu_grad/docs/aclnnSwiGluGrad.md.
// Sums are accumulated in double. Outputs are written contiguously (CANN
// takes non-contiguous outputs for some of these; this provider does not).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "testing/operator_checks.h"
#include "testing/test_provider.h"

namespace jax_aclnn::test_provider::ops {
namespace {

// RmsNorm's shapes (aclnnRmsNorm.md): gamma = x.shape[n:] with n < rank
// (rank 1-8, gamma not empty), rstd = x.shape[:n] + (1,) * gamma.ndim.
aclnnStatus CheckRmsShapes(const char* op, const char* x_name, const aclTensor* x,
                           const aclTensor* gamma, bool gamma_may_be_empty, Dims* rstd_dims,
                           int64_t* rows, int64_t* n) {
  RETURN_IF_ERROR(CheckRank(op, x_name, x, 1, 8));
  RETURN_IF_ERROR(CheckRank(op, "gamma", gamma, 1, 8));
  const size_t rank = x->dims.size(), gamma_rank = gamma->dims.size();
  if (gamma_rank > rank)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: gamma %s has a higher rank than %s %s", op,
                Shape(gamma).c_str(), x_name, Shape(x).c_str());
  const size_t lead = rank - gamma_rank;
  if (!std::equal(gamma->dims.begin(), gamma->dims.end(), x->dims.begin() + lead))
    return Fail(ACLNN_ERR_PARAM_INVALID,
                "%s: gamma has shape %s; expected the trailing dimensions of %s %s", op,
                Shape(gamma).c_str(), x_name, Shape(x).c_str());
  if (!gamma_may_be_empty && Numel(gamma) == 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: gamma %s is empty", op, Shape(gamma).c_str());
  rstd_dims->assign(x->dims.begin(), x->dims.begin() + lead);
  rstd_dims->resize(rank, 1);
  *rows = Product(x->dims, 0, lead);
  *n = Numel(gamma);
  return ACLNN_SUCCESS;
}

// y = x * rstd * gamma over rows of n, rstd = 1 / sqrt(mean(x^2) + epsilon).
void RmsNormRows(const float* x, const float* gamma, double epsilon, int64_t rows, int64_t n,
                 float* y, float* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x_r = x + r * n;
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += double(x_r[j]) * x_r[j];
    const double rs = 1.0 / std::sqrt(sum / double(n) + epsilon);
    for (int64_t j = 0; j < n; ++j) y[r * n + j] = float(x_r[j] * rs * gamma[j]);
    if (rstd != nullptr) rstd[r] = float(rs);
  }
}

// SwiGlu's split (aclnnSwiGlu.md): x viewed as [outer, 2 * half, inner]
// along dim; A = the first half, B = the second.
struct Split {
  int64_t outer, half, inner;
};
aclnnStatus CheckSwiGluShapes(const char* op, const aclTensor* x, int64_t dim, Split* split,
                              Dims* halved) {
  if (x->dims.empty())
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: x has shape []; its rank must be at least 1", op);
  const int64_t d = NormalizeDim(dim, x->dims.size());
  if (d < 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: dim %lld is out of range for x %s", op,
                static_cast<long long>(dim), Shape(x).c_str());
  if (x->dims[d] % 2 != 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: x %s has an odd size along dim %lld", op,
                Shape(x).c_str(), static_cast<long long>(dim));
  *halved = x->dims;
  (*halved)[d] /= 2;
  *split = {Product(x->dims, 0, d), x->dims[d] / 2, Product(x->dims, d + 1, x->dims.size())};
  return ACLNN_SUCCESS;
}

double Sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }

}  // namespace
}  // namespace jax_aclnn::test_provider::ops

using namespace jax_aclnn::test_provider;       // NOLINT: the C ABI's definitions below
using namespace jax_aclnn::test_provider::ops;  // NOLINT

// RmsNorm(x)_i = x_i / Rms(x) * gamma_i, Rms(x) = sqrt(mean(x^2) + epsilon)
// over gamma's (trailing) dimensions; rstdOut = 1 / Rms(x), float32.
EXPORT aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor* x, const aclTensor* gamma,
                                                double epsilon, const aclTensor* yOut,
                                                const aclTensor* rstdOut,
                                                uint64_t* workspaceSize,
                                                aclOpExecutor** executor) {
  const char* op = "aclnnRmsNorm";
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspaceSize));
  RETURN_IF_ERROR(CheckNotNull(op, "executor", executor));
  RETURN_IF_ERROR(CheckFloat32(op, "x", x, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckFloat32(op, "gamma", gamma, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckFloat32(op, "yOut", yOut));
  RETURN_IF_ERROR(CheckFloat32(op, "rstdOut", rstdOut));
  Dims rstd_dims;
  int64_t rows, n;
  RETURN_IF_ERROR(CheckRmsShapes(op, "x", x, gamma, false, &rstd_dims, &rows, &n));
  RETURN_IF_ERROR(CheckShape(op, "yOut", yOut, x->dims));
  RETURN_IF_ERROR(CheckShape(op, "rstdOut", rstdOut, rstd_dims));
  Kernel kernel = [op, rows, n, epsilon](const std::vector<Slot>& in,
                                         const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    if (rows * n == 0) return ACLNN_SUCCESS;
    const Dense x(in[0]), gamma(in[1]);
    RmsNormRows(x.get(), gamma.get(), epsilon, rows, n, Floats(out[0]), Floats(out[1]));
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(x), SlotOf(gamma)}, {SlotOf(yOut), SlotOf(rstdOut)},
                      std::move(kernel), workspaceSize, executor);
}

// x = x1 + x2 (xOut), then RmsNorm of x (yOut, rstdOut). rstdOut and xOut
// may be null (that output is then not written); rstdOut without xOut is
// refused, as CANN's page says.
EXPORT aclnnStatus aclnnAddRmsNormGetWorkspaceSize(const aclTensor* x1, const aclTensor* x2,
                                                   const aclTensor* gamma, double epsilon,
                                                   aclTensor* yOut, aclTensor* rstdOut,
                                                   aclTensor* xOut, uint64_t* workspaceSize,
                                                   aclOpExecutor** executor) {
  const char* op = "aclnnAddRmsNorm";
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspaceSize));
  RETURN_IF_ERROR(CheckNotNull(op, "executor", executor));
  RETURN_IF_ERROR(CheckFloat32(op, "x1", x1, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckFloat32(op, "x2", x2, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckFloat32(op, "gamma", gamma, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckFloat32(op, "yOut", yOut));
  if (rstdOut != nullptr && xOut == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: xOut is null while rstdOut is not", op);
  if (rstdOut != nullptr) RETURN_IF_ERROR(CheckFloat32(op, "rstdOut", rstdOut));
  if (xOut != nullptr) RETURN_IF_ERROR(CheckFloat32(op, "xOut", xOut));
  if (!(epsilon >= 0))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: epsilon %g is negative", op, epsilon);
  Dims rstd_dims;
  int64_t rows, n;
  RETURN_IF_ERROR(CheckRmsShapes(op, "x1", x1, gamma, true, &rstd_dims, &rows, &n));
  RETURN_IF_ERROR(CheckShape(op, "x2", x2, x1->dims));
  RETURN_IF_ERROR(CheckShape(op, "yOut", yOut, x1->dims));
  if (rstdOut != nullptr) RETURN_IF_ERROR(CheckShape(op, "rstdOut", rstdOut, rstd_dims));
  if (xOut != nullptr) RETURN_IF_ERROR(CheckShape(op, "xOut", xOut, x1->dims));
  Kernel kernel = [op, rows, n, epsilon](const std::vector<Slot>& in,
                                         const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    if (rows * n == 0) return ACLNN_SUCCESS;
    const Dense x1(in[0]), x2(in[1]), gamma(in[2]);
    std::vector<float> x(static_cast<size_t>(rows * n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = x1[i] + x2[i];  // float32, as xOut holds it
    RmsNormRows(x.data(), gamma.get(), epsilon, rows, n, Floats(out[0]),
                out[1].tensor ? Floats(out[1]) : nullptr);
    if (out[2].tensor != nullptr) std::copy(x.begin(), x.end(), Floats(out[2]));
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(x1), SlotOf(x2), SlotOf(gamma)},
                      {SlotOf(yOut), SlotOf(rstdOut), SlotOf(xOut)}, std::move(kernel),
                      workspaceSize, executor);
}

// out = Swish(A) * B = A * sigmoid(A) * B, A and B the first and second
// halves of x along dim (in [-rank, rank - 1]); out is x's shape with that
// dimension halved.
EXPORT aclnnStatus aclnnSwiGluGetWorkspaceSize(const aclTensor* x, int64_t dim,
                                               const aclTensor* out, uint64_t* workspaceSize,
                                               aclOpExecutor** executor) {
  const char* op = "aclnnSwiGlu";
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspaceSize));
  RETURN_IF_ERROR(CheckNotNull(op, "executor", executor));
  RETURN_IF_ERROR(CheckFloat32(op, "x", x));
  RETURN_IF_ERROR(CheckFloat32(op, "out", out));
  Split s;
  Dims halved;
  RETURN_IF_ERROR(CheckSwiGluShapes(op, x, dim, &s, &halved));
  RETURN_IF_ERROR(CheckShape(op, "out", out, halved));
  Kernel kernel = [op, s](const std::vector<Slot>& in,
                          const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    const float* x = Floats(in[0]);
    float* y = Floats(out[0]);
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t j = 0; j < s.half; ++j)
        for (int64_t i = 0; i < s.inner; ++i) {
          const double a = x[(o * 2 * s.half + j) * s.inner + i];
          const double b = x[(o * 2 * s.half + s.half + j) * s.inner + i];
          y[(o * s.half + j) * s.inner + i] = float(a * Sigmoid(a) * b);
        }
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(x)}, {SlotOf(out)}, std::move(kernel), workspaceSize,
                      executor);
}

// The gradient of SwiGlu with respect to x: outA = yGrad * [sigmoid(A) +
// sigmoid(A) * (1 - sigmoid(A)) * A] * B, outB = yGrad * sigmoid(A) * A,
// out = concat(outA, outB) along dim (x's shape). yGrad is not empty.
EXPORT aclnnStatus aclnnSwiGluGradGetWorkspaceSize(const aclTensor* yGrad, const aclTensor* x,
                                                   int64_t dim, const aclTensor* out,
                                                   uint64_t* workspaceSize,
                                                   aclOpExecutor** executor) {
  const char* op = "aclnnSwiGluGrad";
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspaceSize));
  RETURN_IF_ERROR(CheckNotNull(op, "executor", executor));
  RETURN_IF_ERROR(CheckFloat32(op, "yGrad", yGrad));
  RETURN_IF_ERROR(CheckFloat32(op, "x", x, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckFloat32(op, "out", out));
  RETURN_IF_ERROR(CheckRank(op, "x", x, 1, 8));
  Split s;
  Dims halved;
  RETURN_IF_ERROR(CheckSwiGluShapes(op, x, dim, &s, &halved));
  RETURN_IF_ERROR(CheckShape(op, "yGrad", yGrad, halved));
  if (Numel(yGrad) == 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: yGrad %s is empty", op, Shape(yGrad).c_str());
  RETURN_IF_ERROR(CheckShape(op, "out", out, x->dims));
  Kernel kernel = [op, s](const std::vector<Slot>& in,
                          const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    const float* dy = Floats(in[0]);
    const Dense x(in[1]);
    float* dx = Floats(out[0]);
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t j = 0; j < s.half; ++j)
        for (int64_t i = 0; i < s.inner; ++i) {
          const int64_t ia = (o * 2 * s.half + j) * s.inner + i, ib = ia + s.half * s.inner;
          const double a = x[ia], b = x[ib], g = dy[(o * s.half + j) * s.inner + i];
          const double sig = Sigmoid(a);
          dx[ia] = float(g * (sig + sig * (1 - sig) * a) * b);
          dx[ib] = float(g * sig * a);
        }
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(yGrad), SlotOf(x)}, {SlotOf(out)}, std::move(kernel),
                      workspaceSize, executor);
}

JAX_ACLNN_TEST_SECOND_PHASE(RmsNorm)
JAX_ACLNN_TEST_SECOND_PHASE(AddRmsNorm)
JAX_ACLNN_TEST_SECOND_PHASE(SwiGlu)
JAX_ACLNN_TEST_SECOND_PHASE(SwiGluGrad)
