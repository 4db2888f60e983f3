// The mixture-of-experts routing operators' first phases on the host
// provider (the kernels: host/moe_kernel.cc). CANN's prototypes and
// semantics, from hicann/ops-transformer's pages (as csrc/testing/
// moe_operators.cc cites them):
//  - aclnnMoeGatingTopKSoftmaxV2 (moe/moe_gating_top_k_softmax_v2/docs/
//    aclnnMoeGatingTopKSoftmaxV2.md): x (..., E) 2-D or 3-D; renorm 0:
//    (yOut, expertIdxOut) = topK(softmax(x), k); renorm 1: softmax over the
//    values of topK(x, k). yOut of x's type, expertIdxOut INT32; a row that
//    finishedOptional (BOOL, x's leading shape) marks gets the ids E.
//    outputSoftmaxResultFlag true is refused (jax_aclnn.nn never asks for
//    the softmax): softmaxResultOutOptional is not written.
//  - aclnnMoeTokenPermute (moe/moe_token_permute/docs/aclnnMoeTokenPermute.md):
//    tokens (T, H), indices (T, topK) or (T,) INT32 or INT64; the choices
//    t * topK + j sorted by expert, stably; sortedIndicesOut (T * topK,)
//    INT32 the row of permuteTokensOut each choice went to;
//    permuteTokensOut the first min(T * topK, numOutTokens) rows (0: all;
//    negative: T * topK + numOutTokens).
//  - aclnnMoeTokenPermuteGrad (moe/moe_token_permute_grad/docs/
//    aclnnMoeTokenPermuteGrad.md): out[t] = sum_j permutedOutputGrad[
//    sortedIndices[t * numTopk + j]].
//  - aclnnMoeTokenUnpermute (moe/moe_token_unpermute/docs/
//    aclnnMoeTokenUnpermute.md): out[t] = sum_j probs[t, j] *
//    permutedTokens[sortedIndices[t * k + j]] (no probsOptional: k = 1,
//    weight 1).
//  - aclnnMoeTokenUnpermuteGrad (moe/moe_token_unpermute_grad/docs/
//    aclnnMoeTokenUnpermuteGrad.md): permutedTokensGradOut[sortedIndices[t *
//    k + j]] = unpermutedTokensGrad[t] * probs[t, j] (rows no index names:
//    zeros), probsGradOut[t, j] = the dot product of unpermutedTokensGrad[t]
//    and permuteTokens[sortedIndices[t * k + j]].
// Data FLOAT32, FLOAT16 or BFLOAT16, one type per operator; indices as
// above; every tensor contiguous (the kernels walk rows). paddedMode must
// be false and restoreShapeOptional null (the pages: the only modes
// supported). topK 1 to 512, T * topK below 16777215 (the permute pages'
// limits). The second phase cannot fail: an index out of range is skipped
// (its row contributes nothing, or stays zero), never followed.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "host/provider.h"

namespace jax_aclnn::host {
namespace {

constexpr int64_t kMaxTopK = 512;         // the permute pages' topK limit
constexpr int64_t kMaxGatingK = 1024;     // aclnnMoeGatingTopKSoftmaxV2's
constexpr int64_t kIndexLimit = 16777215;  // T * topK below it

struct GatingParams {
  int32_t k, renorm;
};
struct TopKParams {
  int32_t top_k;
};

// A tensor of one of `allowed` types, with data, the shape `dims` (rank
// `rank`; null: any) and contiguous.
aclnnStatus CheckOperand(const char* op, const char* name, const aclTensor* t,
                         std::initializer_list<aclDataType> allowed, const int64_t* dims = nullptr,
                         int rank = 0) {
  if (t == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is a null pointer", op, name);
  if (aclnnStatus st = CheckDataType(op, name, t, allowed)) return st;
  if (t->view.NumElements() > 0 && t->view.data == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s has no data", op, name);
  if (dims != nullptr)
    if (aclnnStatus st = CheckDims(op, name, t, dims, rank)) return st;
  return CheckContiguous(op, name, t);
}

// A float tensor (FLOAT, FLOAT16, BFLOAT16) of `like`'s type.
aclnnStatus CheckLike(const char* op, const char* name, const aclTensor* t,
                      const char* like_name, const aclTensor* like, const int64_t* dims,
                      int rank) {
  if (aclnnStatus st = CheckTensor(op, name, t)) return st;
  if (aclnnStatus st = CheckSameType(op, like_name, like, name, t)) return st;
  return CheckOperand(op, name, t, {t->view.dtype}, dims, rank);
}

aclnnStatus CheckRank(const char* op, const char* name, const aclTensor* t, int lo, int hi) {
  if (t->view.rank >= lo && t->view.rank <= hi) return ACLNN_SUCCESS;
  return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s; its rank must be %d to %d", op, name,
              ShapeString(t->view).c_str(), lo, hi);
}

aclnnStatus CheckUnpadded(const char* op, bool padded_mode, const aclIntArray* restore_shape,
                          bool has_restore_shape) {
  if (padded_mode)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: paddedMode true is not supported (CANN's page: "
                "only false)", op);
  if (has_restore_shape && restore_shape != nullptr)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: restoreShapeOptional must be null (CANN's page: "
                "only nullptr is supported)", op);
  return ACLNN_SUCCESS;
}

aclnnStatus CheckTopK(const char* op, const char* what, int64_t k) {
  if (k >= 1 && k <= kMaxTopK) return ACLNN_SUCCESS;
  return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s = %lld must be 1 to %lld", op, what,
              static_cast<long long>(k), static_cast<long long>(kMaxTopK));
}

// data (n, H) of a float type, sortedIndices (n,) INT32 and probsOptional
// (T, k) of data's type or null (k = 1): T and k, an error unless n = T * k.
aclnnStatus CheckRouting(const char* op, const char* data_name, const aclTensor* data,
                         const aclTensor* sorted_indices, const aclTensor* probs, int64_t* tokens,
                         int64_t* k) {
  if (aclnnStatus st = CheckTensor(op, data_name, data)) return st;
  if (aclnnStatus st = CheckRank(op, data_name, data, 2, 2)) return st;
  if (aclnnStatus st = CheckOperand(op, data_name, data, {data->view.dtype})) return st;
  const int64_t n = data->view.dims[0];
  const int64_t n_dims[] = {n};
  if (aclnnStatus st = CheckOperand(op, "sortedIndices", sorted_indices, {ACL_INT32}, n_dims, 1))
    return st;
  *k = 1;
  *tokens = n;
  if (probs != nullptr) {
    if (aclnnStatus st = CheckTensor(op, "probsOptional", probs)) return st;
    if (aclnnStatus st = CheckRank(op, "probsOptional", probs, 2, 2)) return st;
    if (aclnnStatus st = CheckLike(op, "probsOptional", probs, data_name, data, probs->view.dims, 2))
      return st;
    *tokens = probs->view.dims[0];
    *k = probs->view.dims[1];
    if (aclnnStatus st = CheckTopK(op, "topK_num (probsOptional's second dimension)", *k))
      return st;
    if (*tokens * *k != n)
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has %lld rows; probsOptional %s gives "
                  "tokens_num * topK_num = %lld", op, data_name, static_cast<long long>(n),
                  ShapeString(probs->view).c_str(), static_cast<long long>(*tokens * *k));
  }
  return ACLNN_SUCCESS;
}

void RunGatingExecutor(const aclOpExecutor& ex, void*, const JaxAclnnHostStream* stream) {
  const auto p = ex.params.As<GatingParams>();
  RunMoeGating(ex.inputs[0], ex.input_tensors[1] ? &ex.inputs[1] : nullptr, p.k, p.renorm != 0,
               ex.outputs[0], ex.outputs[1], stream);
}

void RunPermuteExecutor(const aclOpExecutor& ex, void* workspace,
                        const JaxAclnnHostStream* stream) {
  RunMoePermute(ex.inputs[0], ex.inputs[1], ex.outputs[0], ex.outputs[1], workspace, stream);
}

void RunPermuteGradExecutor(const aclOpExecutor& ex, void*, const JaxAclnnHostStream* stream) {
  RunMoeGatherSum(ex.inputs[0], ex.inputs[1], nullptr, ex.params.As<TopKParams>().top_k,
                  ex.outputs[0], stream);
}

void RunUnpermuteExecutor(const aclOpExecutor& ex, void*, const JaxAclnnHostStream* stream) {
  const bool probs = ex.input_tensors[2] != nullptr;
  RunMoeGatherSum(ex.inputs[0], ex.inputs[1], probs ? &ex.inputs[2] : nullptr,
                  probs ? ex.inputs[2].dims[1] : 1, ex.outputs[0], stream);
}

void RunUnpermuteGradExecutor(const aclOpExecutor& ex, void* workspace,
                              const JaxAclnnHostStream* stream) {
  const bool probs = ex.input_tensors[3] != nullptr;
  RunMoeUnpermuteGrad(ex.inputs[0], ex.inputs[1], ex.inputs[2], probs ? &ex.inputs[3] : nullptr,
                      ex.outputs[0], probs && ex.has_output[1] ? &ex.outputs[1] : nullptr,
                      workspace, stream);
}

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the provider's common code

extern "C" aclnnStatus aclnnMoeGatingTopKSoftmaxV2GetWorkspaceSize(
    const aclTensor* x, const aclTensor* finishedOptional, int64_t k, int64_t renorm,
    bool outputSoftmaxResultFlag, const aclTensor* yOut, const aclTensor* expertIdxOut,
    const aclTensor* softmaxResultOutOptional, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  const char* op = "aclnnMoeGatingTopKSoftmaxV2";
  if (aclnnStatus st = CheckTensor(op, "x", x)) return st;
  if (aclnnStatus st = CheckRank(op, "x", x, 2, 3)) return st;
  if (aclnnStatus st = CheckOperand(op, "x", x, {x->view.dtype})) return st;
  const View& xv = x->view;
  const int64_t e = xv.dims[xv.rank - 1];
  if (finishedOptional != nullptr)
    if (aclnnStatus st = CheckOperand(op, "finishedOptional", finishedOptional, {ACL_BOOL},
                                      xv.dims, xv.rank - 1))
      return st;
  if (k < 0 || k > e || k > kMaxGatingK)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: k = %lld must be 0 to min(x's last dimension, "
                "%lld) (x %s)", op, static_cast<long long>(k),
                static_cast<long long>(kMaxGatingK), ShapeString(xv).c_str());
  if (renorm != 0 && renorm != 1)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: renorm = %lld is not 0 (softmax, then top k) or "
                "1 (top k, then softmax)", op, static_cast<long long>(renorm));
  if (outputSoftmaxResultFlag)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: outputSoftmaxResultFlag true is not supported by "
                "the host provider (pass false)", op);
  int64_t out_dims[kMaxRank];
  for (int d = 0; d < xv.rank; ++d) out_dims[d] = xv.dims[d];
  out_dims[xv.rank - 1] = k;
  if (aclnnStatus st = CheckLike(op, "yOut", yOut, "x", x, out_dims, xv.rank)) return st;
  if (aclnnStatus st = CheckOperand(op, "expertIdxOut", expertIdxOut, {ACL_INT32}, out_dims,
                                    xv.rank))
    return st;
  const GatingParams p{static_cast<int32_t>(k), static_cast<int32_t>(renorm)};
  return MakeExecutor(op, RunGatingExecutor, PointwiseParams::Of(p), {x, finishedOptional},
                      {yOut, expertIdxOut, softmaxResultOutOptional}, 0, workspaceSize,
                      executor);
}

extern "C" aclnnStatus aclnnMoeTokenPermuteGetWorkspaceSize(
    const aclTensor* tokens, const aclTensor* indices, int64_t numOutTokens, bool paddedMode,
    const aclTensor* permuteTokensOut, const aclTensor* sortedIndicesOut,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnMoeTokenPermute";
  if (aclnnStatus st = CheckTensor(op, "tokens", tokens)) return st;
  if (aclnnStatus st = CheckRank(op, "tokens", tokens, 2, 2)) return st;
  if (aclnnStatus st = CheckOperand(op, "tokens", tokens, {tokens->view.dtype})) return st;
  if (aclnnStatus st = CheckOperand(op, "indices", indices, {ACL_INT32, ACL_INT64})) return st;
  if (aclnnStatus st = CheckRank(op, "indices", indices, 1, 2)) return st;
  if (aclnnStatus st = CheckUnpadded(op, paddedMode, nullptr, false)) return st;
  const int64_t t = tokens->view.dims[0], h = tokens->view.dims[1];
  const int64_t top_k = indices->view.rank == 2 ? indices->view.dims[1] : 1;
  if (indices->view.dims[0] != t)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: indices %s must have num_tokens = %lld rows "
                "(tokens %s)", op, ShapeString(indices->view).c_str(), static_cast<long long>(t),
                ShapeString(tokens->view).c_str());
  if (aclnnStatus st = CheckTopK(op, "topK (indices' second dimension)", top_k)) return st;
  const int64_t n = t * top_k;
  if (n >= kIndexLimit)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: indices has %lld elements; fewer than %lld", op,
                static_cast<long long>(n), static_cast<long long>(kIndexLimit));
  const int64_t rows = numOutTokens == 0 ? n
                       : numOutTokens > 0 ? std::min(n, numOutTokens)
                                          : std::max<int64_t>(0, n + numOutTokens);
  const int64_t permuted_dims[] = {rows, h};
  if (aclnnStatus st = CheckLike(op, "permuteTokensOut", permuteTokensOut, "tokens", tokens,
                                 permuted_dims, 2))
    return st;
  const int64_t n_dims[] = {n};
  if (aclnnStatus st = CheckOperand(op, "sortedIndicesOut", sortedIndicesOut, {ACL_INT32}, n_dims,
                                    1))
    return st;
  return MakeExecutor(op, RunPermuteExecutor, PointwiseParams{}, {tokens, indices},
                      {permuteTokensOut, sortedIndicesOut}, MoePermuteWorkspaceSize(n),
                      workspaceSize, executor);
}

extern "C" aclnnStatus aclnnMoeTokenPermuteGradGetWorkspaceSize(
    const aclTensor* permutedOutputGrad, const aclTensor* sortedIndices, int64_t numTopk,
    bool paddedMode, aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnMoeTokenPermuteGrad";
  int64_t t, k;
  if (aclnnStatus st = CheckRouting(op, "permutedOutputGrad", permutedOutputGrad, sortedIndices,
                                    nullptr, &t, &k))
    return st;
  if (aclnnStatus st = CheckTopK(op, "numTopk", numTopk)) return st;
  if (aclnnStatus st = CheckUnpadded(op, paddedMode, nullptr, false)) return st;
  const int64_t n = permutedOutputGrad->view.dims[0], h = permutedOutputGrad->view.dims[1];
  if (n % numTopk != 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: permutedOutputGrad %s: its %lld rows are not "
                "tokens_num * numTopk (numTopk %lld)", op,
                ShapeString(permutedOutputGrad->view).c_str(), static_cast<long long>(n),
                static_cast<long long>(numTopk));
  const int64_t out_dims[] = {n / numTopk, h};
  if (aclnnStatus st = CheckLike(op, "out", out, "permutedOutputGrad", permutedOutputGrad,
                                 out_dims, 2))
    return st;
  return MakeExecutor(op, RunPermuteGradExecutor,
                      PointwiseParams::Of(TopKParams{static_cast<int32_t>(numTopk)}),
                      {permutedOutputGrad, sortedIndices}, {out}, 0, workspaceSize, executor);
}

extern "C" aclnnStatus aclnnMoeTokenUnpermuteGetWorkspaceSize(
    const aclTensor* permutedTokens, const aclTensor* sortedIndices,
    const aclTensor* probsOptional, bool paddedMode, const aclIntArray* restoreShapeOptional,
    aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnMoeTokenUnpermute";
  if (aclnnStatus st = CheckUnpadded(op, paddedMode, restoreShapeOptional, true)) return st;
  int64_t t, k;
  if (aclnnStatus st = CheckRouting(op, "permutedTokens", permutedTokens, sortedIndices,
                                    probsOptional, &t, &k))
    return st;
  const int64_t out_dims[] = {t, permutedTokens->view.dims[1]};
  if (aclnnStatus st = CheckLike(op, "out", out, "permutedTokens", permutedTokens, out_dims, 2))
    return st;
  return MakeExecutor(op, RunUnpermuteExecutor, PointwiseParams{},
                      {permutedTokens, sortedIndices, probsOptional}, {out}, 0, workspaceSize,
                      executor);
}

// probsGradOut is written when probsOptional and it are given.
extern "C" aclnnStatus aclnnMoeTokenUnpermuteGradGetWorkspaceSize(
    const aclTensor* permuteTokens, const aclTensor* unpermutedTokensGrad,
    const aclTensor* sortedIndices, const aclTensor* probsOptional, bool paddedMode,
    const aclIntArray* restoreShapeOptional, aclTensor* permutedTokensGradOut,
    aclTensor* probsGradOut, uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnMoeTokenUnpermuteGrad";
  if (aclnnStatus st = CheckUnpadded(op, paddedMode, restoreShapeOptional, true)) return st;
  int64_t t, k;
  if (aclnnStatus st = CheckRouting(op, "permuteTokens", permuteTokens, sortedIndices,
                                    probsOptional, &t, &k))
    return st;
  const int64_t n = permuteTokens->view.dims[0], h = permuteTokens->view.dims[1];
  const int64_t dy_dims[] = {t, h};
  if (aclnnStatus st = CheckLike(op, "unpermutedTokensGrad", unpermutedTokensGrad,
                                 "permuteTokens", permuteTokens, dy_dims, 2))
    return st;
  const int64_t dx_dims[] = {n, h};
  if (aclnnStatus st = CheckLike(op, "permutedTokensGradOut", permutedTokensGradOut,
                                 "permuteTokens", permuteTokens, dx_dims, 2))
    return st;
  const bool probs_grad = probsOptional != nullptr && probsGradOut != nullptr;
  if (probs_grad)
    if (aclnnStatus st = CheckLike(op, "probsGradOut", probsGradOut, "probsOptional",
                                   probsOptional, probsOptional->view.dims, 2))
      return st;
  return MakeExecutor(op, RunUnpermuteGradExecutor, PointwiseParams{},
                      {permuteTokens, unpermutedTokensGrad, sortedIndices, probsOptional},
                      {permutedTokensGradOut, probs_grad ? probsGradOut : nullptr},
                      MoeUnpermuteGradWorkspaceSize(n), workspaceSize, executor);
}
