// The test provider's mixture-of-experts operators (test_provider.h).
// float32 on host memory, sums accumulated in double, from CANN's documented
// semantics (hicann/ops-transformer; the full pages at
// yuanfang-chen/ops-transformer 08dee71d, the headers under
// moe/<op>/op_host/op_api/aclnn_<op>.h):
//  - aclnnMoeGatingTopKSoftmaxV2: moe/moe_gating_top_k_softmax_v2/docs/
//    aclnnMoeGatingTopKSoftmaxV2.md (no op_api header; the page's prototype);
//  - aclnnMoeTokenPermute: moe/moe_token_permute/docs/aclnnMoeTokenPermute.md;
//  - aclnnMoeTokenPermuteGrad: moe/moe_token_permute_grad/docs/aclnnMoeTokenPermuteGrad.md;
//  - aclnnMoeTokenUnpermute: moe/moe_token_unpermute/docs/aclnnMoeTokenUnpermute.md;
//  - aclnnMoeTokenUnpermuteGrad: moe/moe_token_unpermute_grad/docs/aclnnMoeTokenUnpermuteGrad.md.
// Index conventions: the permutation sorts the T*k choices (choice t*k + j,
// token t's j-th expert) by expert, stably; sortedIndices (the permute's
// sortedIndicesOut, CANN's expandedRowIdx) is its inverse: for choice
// t*k + j, the row of the permuted tokens that holds it. Indices are int32
// (expert ids int32 or int64, as the permute's page allows), contiguous.
// Each first phase records its arguments (jaxAclnnTestRecorded, recording.h),
// the line starting with the operator's name. Only paddedMode = false, the
// only mode the pages support, is implemented.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "testing/operator_checks.h"
#include "testing/recording.h"
#include "testing/test_provider.h"

namespace jax_aclnn::test_provider::ops {
namespace {

// The permute pages' limit on topK (Atlas A2/A3) and on expert ids.
constexpr int64_t kMaxTopK = 512;
constexpr int64_t kIndexLimit = 16777215;

// An output that CANN's prototype declares `const aclTensor*`
// (aclnnMoeTokenPermute's and aclnnMoeGatingTopKSoftmaxV2's outputs).
struct Output {
  const aclTensor* tensor;
};
template <typename T>
void AddArg(Recorder* r, T value) { r->Arg(value); }
void AddArg(Recorder* r, Output o) {
  r->outputs.push_back(SlotOf(o.tensor));
  r->Add(Describe(o.tensor));
}
// A first phase's record: the operator's name, then its arguments.
template <typename... Args>
Recorder Recorded(const char* op, Args... args) {
  Recorder r;
  r.Add(op);
  (AddArg(&r, args), ...);
  return r;
}

aclnnStatus CheckCommon(const char* op, uint64_t* workspace_size, aclOpExecutor** executor) {
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspace_size));
  return CheckNotNull(op, "executor", executor);
}

aclnnStatus CheckUnpadded(const char* op, bool padded_mode) {
  if (padded_mode)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: paddedMode true is not supported (CANN's page: "
                "only false)", op);
  return ACLNN_SUCCESS;
}

aclnnStatus CheckTopK(const char* op, const char* what, int64_t k) {
  if (k < 1 || k > kMaxTopK)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s = %lld must be 1 to %lld", op, what,
                static_cast<long long>(k), static_cast<long long>(kMaxTopK));
  return ACLNN_SUCCESS;
}

// sortedIndices (n,) int32, with probs (T, k) or without it (k = 1): the
// tokens T = n / k; an error unless n = T * k.
aclnnStatus CheckRouting(const char* op, const aclTensor* sorted_indices, const aclTensor* probs,
                         int64_t* tokens, int64_t* k) {
  RETURN_IF_ERROR(CheckTensor(op, "sortedIndices", sorted_indices, {ACL_INT32}));
  RETURN_IF_ERROR(CheckRank(op, "sortedIndices", sorted_indices, 1, 1));
  const int64_t n = sorted_indices->dims[0];
  *k = 1;
  if (probs != nullptr) {
    RETURN_IF_ERROR(CheckFloat32(op, "probsOptional", probs, /*strided_ok=*/true));
    RETURN_IF_ERROR(CheckRank(op, "probsOptional", probs, 2, 2));
    *k = probs->dims[1];
    RETURN_IF_ERROR(CheckTopK(op, "topK_num (probsOptional's second dimension)", *k));
  }
  *tokens = probs != nullptr ? probs->dims[0] : n;
  if (*tokens * *k != n)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: sortedIndices %s has %lld rows; probsOptional %s "
                "gives tokens_num * topK_num = %lld", op, Shape(sorted_indices).c_str(),
                static_cast<long long>(n), Shape(probs).c_str(),
                static_cast<long long>(*tokens * *k));
  return ACLNN_SUCCESS;
}

aclnnStatus CheckNoRestoreShape(const char* op, const aclIntArray* restore_shape) {
  if (restore_shape != nullptr)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: restoreShapeOptional must be null (CANN's page: "
                "only nullptr is supported)", op);
  return ACLNN_SUCCESS;
}

// Element i of sortedIndices, an error unless it is a row in [0, rows).
aclnnStatus RowAt(const char* op, const Slot& sorted_indices, int64_t i, int64_t rows,
                  int64_t* row) {
  *row = IntAt(sorted_indices, i);
  if (*row < 0 || *row >= rows)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: sortedIndices[%lld] = %lld is outside [0, %lld)",
                op, static_cast<long long>(i), static_cast<long long>(*row),
                static_cast<long long>(rows));
  return ACLNN_SUCCESS;
}

// The k largest of values[0, e), largest first, equal values in index order
// (jax.lax.top_k's order; CANN does not document its tie order).
std::vector<int64_t> TopK(const std::vector<double>& values, int64_t k) {
  std::vector<int64_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  order.resize(static_cast<size_t>(k));
  return order;
}

// softmax of values (double, max subtracted), each rounded to float32.
std::vector<double> Softmax(const std::vector<double>& values) {
  std::vector<double> p(values.size());
  if (values.empty()) return p;
  const double m = *std::max_element(values.begin(), values.end());
  double sum = 0;
  for (size_t i = 0; i < values.size(); ++i) sum += p[i] = std::exp(values[i] - m);
  for (double& v : p) v = static_cast<float>(v / sum);
  return p;
}

}  // namespace
}  // namespace jax_aclnn::test_provider::ops

using namespace jax_aclnn::test_provider;       // NOLINT: the C ABI's definitions below
using namespace jax_aclnn::test_provider::ops;  // NOLINT

// renorm 0: softmaxResult = softmax(x, -1), (yOut, expertIdxOut) =
// topK(softmaxResult, k); renorm 1: (topk, expertIdxOut) = topK(x, k), yOut =
// softmax(topk, -1). x (..., E) 2-D or 3-D; finishedOptional bool x[:-1]: a
// finished row's expert ids are E (its yOut as computed: the page changes
// only the ids); yOut (..., k) of x's dtype, expertIdxOut (..., k) int32 (the
// page's table row "rowIdxOut INT32", its example ACL_INT32);
// softmaxResultOutOptional float32 of x's shape, written only
// with renorm 0 and outputSoftmaxResultFlag. 0 <= k <= min(E, 1024).
EXPORT aclnnStatus aclnnMoeGatingTopKSoftmaxV2GetWorkspaceSize(
    const aclTensor* x, const aclTensor* finishedOptional, int64_t k, int64_t renorm,
    bool outputSoftmaxResultFlag, const aclTensor* yOut, const aclTensor* expertIdxOut,
    const aclTensor* softmaxResultOutOptional, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  const char* op = "aclnnMoeGatingTopKSoftmaxV2";
  RETURN_IF_ERROR(CheckCommon(op, workspaceSize, executor));
  RETURN_IF_ERROR(CheckFloat32(op, "x", x, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckRank(op, "x", x, 2, 3));
  const Dims rows_dims(x->dims.begin(), x->dims.end() - 1);
  const int64_t rows = Product(rows_dims, 0, rows_dims.size()), e = x->dims.back();
  if (finishedOptional != nullptr) {
    RETURN_IF_ERROR(CheckTensor(op, "finishedOptional", finishedOptional, {ACL_BOOL}));
    RETURN_IF_ERROR(CheckShape(op, "finishedOptional", finishedOptional, rows_dims));
  }
  if (k < 0 || k > e || k > 1024)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: k = %lld must be 0 to min(x's last dimension, "
                "1024) (x %s)", op, static_cast<long long>(k), Shape(x).c_str());
  if (renorm != 0 && renorm != 1)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: renorm = %lld is not 0 (softmax, then top k) or "
                "1 (top k, then softmax)", op, static_cast<long long>(renorm));
  Dims out_dims = rows_dims;
  out_dims.push_back(k);
  RETURN_IF_ERROR(CheckFloat32(op, "yOut", yOut));
  RETURN_IF_ERROR(CheckShape(op, "yOut", yOut, out_dims));
  RETURN_IF_ERROR(CheckTensor(op, "expertIdxOut", expertIdxOut, {ACL_INT32}));
  RETURN_IF_ERROR(CheckShape(op, "expertIdxOut", expertIdxOut, out_dims));
  const bool write_softmax = renorm == 0 && outputSoftmaxResultFlag;
  if (write_softmax) {
    RETURN_IF_ERROR(CheckFloat32(op, "softmaxResultOutOptional", softmaxResultOutOptional));
    RETURN_IF_ERROR(CheckShape(op, "softmaxResultOutOptional", softmaxResultOutOptional,
                               x->dims));
  }
  Recorder r = Recorded(op, x, finishedOptional, k, renorm, outputSoftmaxResultFlag, Output{yOut},
                        Output{expertIdxOut}, Output{softmaxResultOutOptional});
  Kernel kernel = [=](const std::vector<Slot>& in, const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    const Dense xs(in[0]);
    const bool* finished = static_cast<const bool*>(in[1].data);
    float* y = Floats(out[0]);
    int32_t* ids = static_cast<int32_t*>(out[1].data);
    std::vector<double> row(e);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t c = 0; c < e; ++c) row[c] = xs[i * e + c];
      const std::vector<double> p = renorm == 0 ? Softmax(row) : row;
      if (write_softmax)
        for (int64_t c = 0; c < e; ++c) Floats(out[2])[i * e + c] = static_cast<float>(p[c]);
      const std::vector<int64_t> top = TopK(p, k);
      std::vector<double> top_values(k);
      for (int64_t j = 0; j < k; ++j) top_values[j] = p[top[j]];
      if (renorm == 1) top_values = Softmax(top_values);
      const bool done = finished != nullptr && finished[i];
      for (int64_t j = 0; j < k; ++j) {
        y[i * k + j] = static_cast<float>(top_values[j]);
        ids[i * k + j] = static_cast<int32_t>(done ? e : top[j]);
      }
    }
    return ACLNN_SUCCESS;
  };
  return MakeRecordingExecutor(op, std::move(r), std::move(kernel), workspaceSize, executor);
}

// indices (T, topK) or (T,) (topK 1) of expert ids: order = the choices
// sorted by expert, stably; sortedIndicesOut = argsort(order) (n = T * topK,
// int32); permuteTokensOut[r] = tokens[order[r] / topK] for the first
// min(n, numOutTokens) rows (numOutTokens 0: all n; negative: n +
// numOutTokens, as a slice). tokens (T, ...) rank >= 2; permuteTokensOut
// (rows, ...) with the same product of trailing dimensions.
EXPORT aclnnStatus aclnnMoeTokenPermuteGetWorkspaceSize(
    const aclTensor* tokens, const aclTensor* indices, int64_t numOutTokens, bool paddedMode,
    const aclTensor* permuteTokensOut, const aclTensor* sortedIndicesOut,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnMoeTokenPermute";
  RETURN_IF_ERROR(CheckCommon(op, workspaceSize, executor));
  RETURN_IF_ERROR(CheckFloat32(op, "tokens", tokens, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckRank(op, "tokens", tokens, 2, 8));
  RETURN_IF_ERROR(CheckTensor(op, "indices", indices, {ACL_INT32, ACL_INT64}));
  RETURN_IF_ERROR(CheckRank(op, "indices", indices, 1, 2));
  RETURN_IF_ERROR(CheckUnpadded(op, paddedMode));
  const int64_t t = tokens->dims[0], h = Product(tokens->dims, 1, tokens->dims.size());
  const int64_t top_k = indices->dims.size() == 2 ? indices->dims[1] : 1;
  if (indices->dims[0] != t)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: indices %s must have num_tokens = %lld rows "
                "(tokens %s)", op, Shape(indices).c_str(), static_cast<long long>(t),
                Shape(tokens).c_str());
  RETURN_IF_ERROR(CheckTopK(op, "topK (indices' second dimension)", top_k));
  const int64_t n = t * top_k;
  if (n >= kIndexLimit)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: indices has %lld elements; fewer than %lld", op,
                static_cast<long long>(n), static_cast<long long>(kIndexLimit));
  const int64_t out_rows = numOutTokens == 0 ? n
                           : numOutTokens > 0 ? std::min(n, numOutTokens)
                                              : std::max<int64_t>(0, n + numOutTokens);
  RETURN_IF_ERROR(CheckFloat32(op, "permuteTokensOut", permuteTokensOut));
  RETURN_IF_ERROR(CheckRank(op, "permuteTokensOut", permuteTokensOut, 2, 8));
  const Dims& pd = permuteTokensOut->dims;
  if (pd[0] != out_rows || Product(pd, 1, pd.size()) != h)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: permuteTokensOut has shape %s; expected %lld rows "
                "(min(num_tokens * topK, numOutTokens)) of tokens' %lld elements (tokens %s)",
                op, Shape(permuteTokensOut).c_str(), static_cast<long long>(out_rows),
                static_cast<long long>(h), Shape(tokens).c_str());
  RETURN_IF_ERROR(CheckTensor(op, "sortedIndicesOut", sortedIndicesOut, {ACL_INT32}));
  RETURN_IF_ERROR(CheckShape(op, "sortedIndicesOut", sortedIndicesOut, {n}));
  Recorder r = Recorded(op, tokens, indices, numOutTokens, paddedMode, Output{permuteTokensOut},
                        Output{sortedIndicesOut});
  Kernel kernel = [=](const std::vector<Slot>& in, const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    std::vector<int64_t> expert(n), order(n);
    for (int64_t i = 0; i < n; ++i) {
      expert[i] = IntAt(in[1], i);
      if (expert[i] < 0 || expert[i] >= kIndexLimit)
        return Fail(ACLNN_ERR_PARAM_INVALID, "%s: indices[%lld] = %lld is outside [0, %lld)", op,
                    static_cast<long long>(i), static_cast<long long>(expert[i]),
                    static_cast<long long>(kIndexLimit));
    }
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return expert[a] < expert[b]; });
    const Dense xs(in[0]);
    float* permuted = Floats(out[0]);
    int32_t* sorted = static_cast<int32_t*>(out[1].data);
    for (int64_t row = 0; row < n; ++row) {
      sorted[order[row]] = static_cast<int32_t>(row);
      if (row < out_rows)
        std::copy_n(xs.get() + order[row] / top_k * h, h, permuted + row * h);
    }
    return ACLNN_SUCCESS;
  };
  return MakeRecordingExecutor(op, std::move(r), std::move(kernel), workspaceSize, executor);
}

// out[t] = sum_j permutedOutputGrad[sortedIndices[t * numTopk + j]]:
// permutedOutputGrad (n, H), sortedIndices (n,) int32, out (n / numTopk, H).
EXPORT aclnnStatus aclnnMoeTokenPermuteGradGetWorkspaceSize(
    const aclTensor* permutedOutputGrad, const aclTensor* sortedIndices, int64_t numTopk,
    bool paddedMode, aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnMoeTokenPermuteGrad";
  RETURN_IF_ERROR(CheckCommon(op, workspaceSize, executor));
  RETURN_IF_ERROR(CheckFloat32(op, "permutedOutputGrad", permutedOutputGrad));
  RETURN_IF_ERROR(CheckRank(op, "permutedOutputGrad", permutedOutputGrad, 2, 2));
  RETURN_IF_ERROR(CheckTensor(op, "sortedIndices", sortedIndices, {ACL_INT32}));
  RETURN_IF_ERROR(CheckTopK(op, "numTopk", numTopk));
  RETURN_IF_ERROR(CheckUnpadded(op, paddedMode));
  const int64_t n = permutedOutputGrad->dims[0], h = permutedOutputGrad->dims[1];
  RETURN_IF_ERROR(CheckShape(op, "sortedIndices", sortedIndices, {n}));
  if (n % numTopk != 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: permutedOutputGrad %s: its %lld rows are not "
                "tokens_num * numTopk (numTopk %lld)", op, Shape(permutedOutputGrad).c_str(),
                static_cast<long long>(n), static_cast<long long>(numTopk));
  const int64_t t = n / numTopk;
  RETURN_IF_ERROR(CheckFloat32(op, "out", out));
  RETURN_IF_ERROR(CheckShape(op, "out", out, {t, h}));
  Recorder r = Recorded(op, permutedOutputGrad, sortedIndices, numTopk, paddedMode, out);
  Kernel kernel = [=](const std::vector<Slot>& in, const std::vector<Slot>& outs) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, outs));
    const float* g = Floats(in[0]);
    float* dx = Floats(outs[0]);
    std::vector<double> acc(h);
    for (int64_t token = 0; token < t; ++token) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < numTopk; ++j) {
        int64_t row;
        RETURN_IF_ERROR(RowAt(op, in[1], token * numTopk + j, n, &row));
        for (int64_t c = 0; c < h; ++c) acc[c] += g[row * h + c];
      }
      for (int64_t c = 0; c < h; ++c) dx[token * h + c] = static_cast<float>(acc[c]);
    }
    return ACLNN_SUCCESS;
  };
  return MakeRecordingExecutor(op, std::move(r), std::move(kernel), workspaceSize, executor);
}

// out[t] = sum_j probs[t, j] * permutedTokens[sortedIndices[t * k + j]]
// (without probsOptional: k = 1 and weight 1): permutedTokens (T * k, H),
// sortedIndices (T * k,) int32, probsOptional (T, k), out (T, H).
EXPORT aclnnStatus aclnnMoeTokenUnpermuteGetWorkspaceSize(
    const aclTensor* permutedTokens, const aclTensor* sortedIndices,
    const aclTensor* probsOptional, bool paddedMode, const aclIntArray* restoreShapeOptional,
    aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnMoeTokenUnpermute";
  RETURN_IF_ERROR(CheckCommon(op, workspaceSize, executor));
  RETURN_IF_ERROR(CheckFloat32(op, "permutedTokens", permutedTokens, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckRank(op, "permutedTokens", permutedTokens, 2, 2));
  RETURN_IF_ERROR(CheckUnpadded(op, paddedMode));
  RETURN_IF_ERROR(CheckNoRestoreShape(op, restoreShapeOptional));
  int64_t t, k;
  RETURN_IF_ERROR(CheckRouting(op, sortedIndices, probsOptional, &t, &k));
  const int64_t n = t * k, h = permutedTokens->dims[1];
  RETURN_IF_ERROR(CheckShape(op, "permutedTokens", permutedTokens, {n, h}));
  RETURN_IF_ERROR(CheckFloat32(op, "out", out));
  RETURN_IF_ERROR(CheckShape(op, "out", out, {t, h}));
  Recorder r = Recorded(op, permutedTokens, sortedIndices, probsOptional, paddedMode,
                        restoreShapeOptional, out);
  Kernel kernel = [=](const std::vector<Slot>& in, const std::vector<Slot>& outs) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, outs));
    const Dense x(in[0]), probs(in[2]);
    float* y = Floats(outs[0]);
    std::vector<double> acc(h);
    for (int64_t token = 0; token < t; ++token) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < k; ++j) {
        int64_t row;
        RETURN_IF_ERROR(RowAt(op, in[1], token * k + j, n, &row));
        const double w = probs.get() ? probs[token * k + j] : 1.0;
        for (int64_t c = 0; c < h; ++c) acc[c] += w * x[row * h + c];
      }
      for (int64_t c = 0; c < h; ++c) y[token * h + c] = static_cast<float>(acc[c]);
    }
    return ACLNN_SUCCESS;
  };
  return MakeRecordingExecutor(op, std::move(r), std::move(kernel), workspaceSize, executor);
}

// The unpermute's gradients: permutedTokensGradOut[sortedIndices[t * k + j]]
// = unpermutedTokensGrad[t] * probs[t, j] (without probsOptional: k = 1,
// weight 1); probsGradOut[t, j] = sum_h unpermutedTokensGrad[t, h] *
// permuteTokens[sortedIndices[t * k + j], h], written when probsOptional and
// probsGradOut are given. Rows of permutedTokensGradOut that no index names
// are 0.
EXPORT aclnnStatus aclnnMoeTokenUnpermuteGradGetWorkspaceSize(
    const aclTensor* permuteTokens, const aclTensor* unpermutedTokensGrad,
    const aclTensor* sortedIndices, const aclTensor* probsOptional, bool paddedMode,
    const aclIntArray* restoreShapeOptional, aclTensor* permutedTokensGradOut,
    aclTensor* probsGradOut, uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnMoeTokenUnpermuteGrad";
  RETURN_IF_ERROR(CheckCommon(op, workspaceSize, executor));
  RETURN_IF_ERROR(CheckFloat32(op, "permuteTokens", permuteTokens, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckRank(op, "permuteTokens", permuteTokens, 2, 2));
  RETURN_IF_ERROR(CheckFloat32(op, "unpermutedTokensGrad", unpermutedTokensGrad, true));
  RETURN_IF_ERROR(CheckUnpadded(op, paddedMode));
  RETURN_IF_ERROR(CheckNoRestoreShape(op, restoreShapeOptional));
  int64_t t, k;
  RETURN_IF_ERROR(CheckRouting(op, sortedIndices, probsOptional, &t, &k));
  const int64_t n = t * k, h = permuteTokens->dims[1];
  RETURN_IF_ERROR(CheckShape(op, "permuteTokens", permuteTokens, {n, h}));
  RETURN_IF_ERROR(CheckShape(op, "unpermutedTokensGrad", unpermutedTokensGrad, {t, h}));
  RETURN_IF_ERROR(CheckFloat32(op, "permutedTokensGradOut", permutedTokensGradOut));
  RETURN_IF_ERROR(CheckShape(op, "permutedTokensGradOut", permutedTokensGradOut, {n, h}));
  const bool probs_grad = probsOptional != nullptr && probsGradOut != nullptr;
  if (probs_grad) {
    RETURN_IF_ERROR(CheckFloat32(op, "probsGradOut", probsGradOut));
    RETURN_IF_ERROR(CheckShape(op, "probsGradOut", probsGradOut, {t, k}));
  }
  Recorder r = Recorded(op, permuteTokens, unpermutedTokensGrad, sortedIndices, probsOptional,
                        paddedMode, restoreShapeOptional, permutedTokensGradOut, probsGradOut);
  Kernel kernel = [=](const std::vector<Slot>& in, const std::vector<Slot>& outs) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, outs));
    const Dense x(in[0]), g(in[1]), probs(in[3]);
    float* dx = Floats(outs[0]);
    std::fill_n(dx, n * h, 0.0f);
    for (int64_t token = 0; token < t; ++token)
      for (int64_t j = 0; j < k; ++j) {
        int64_t row;
        RETURN_IF_ERROR(RowAt(op, in[2], token * k + j, n, &row));
        const double w = probs.get() ? probs[token * k + j] : 1.0;
        double dw = 0;
        for (int64_t c = 0; c < h; ++c) {
          dx[row * h + c] = static_cast<float>(w * g[token * h + c]);
          dw += double(g[token * h + c]) * x[row * h + c];
        }
        if (probs_grad) Floats(outs[1])[token * k + j] = static_cast<float>(dw);
      }
    return ACLNN_SUCCESS;
  };
  return MakeRecordingExecutor(op, std::move(r), std::move(kernel), workspaceSize, executor);
}

JAX_ACLNN_TEST_SECOND_PHASE(MoeGatingTopKSoftmaxV2)
JAX_ACLNN_TEST_SECOND_PHASE(MoeTokenPermute)
JAX_ACLNN_TEST_SECOND_PHASE(MoeTokenPermuteGrad)
JAX_ACLNN_TEST_SECOND_PHASE(MoeTokenUnpermute)
JAX_ACLNN_TEST_SECOND_PHASE(MoeTokenUnpermuteGrad)
