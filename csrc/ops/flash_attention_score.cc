// aclnnFlashAttentionScore and aclnnFlashAttentionScoreGrad's first phases
// on the host provider (the kernels: host/attention_kernel.cc). Prototypes
// from ops-transformer (attention/flash_attention_score/op_host/op_api/
// aclnn_flash_attention_score.h, attention/flash_attention_score_grad/
// op_host/op_api/aclnn_flash_attention_score_grad.h), semantics from their
// pages (docs/aclnnFlashAttentionScore.md, aclnnFlashAttentionScoreGrad.md,
// docs/context/sparse_mode参数说明.md) as the test provider's naive kernels
// encode them (csrc/testing/attention_operators.cc):
//  - inputLayout "BSND": query [B, T, N, D], key and value [B, S, K, D] (N
//    = headNum, a multiple of K: grouped-query attention; value's D at most
//    key's), any strides; query, key, value (and dy, attentionIn) of one
//    type, FLOAT32, FLOAT16 or BFLOAT16;
//  - realShift/pseShift: query's type, [B, N, T, S], [B, N, 1, S] or
//    [1, N, T, S];
//  - attenMask: BOOL or UINT8 (nonzero: masked), [T, S], [B|1, N|1, T, S]
//    for sparse modes 0 and 1, the compressed causal [2048, 2048] (not
//    read) for 2-4, which need it;
//  - softmaxMax/softmaxSum: FLOAT32 [B, N, T, 8]; attentionOut, dq, dk, dv
//    as their inputs; dpseOut the pse's shape and type, or empty (not
//    written);
//  - keepProb 1 without dropMask, no paddingMask; prefixOptional,
//    innerPrecise and softmaxOut/softmaxIn change nothing.
// The rest is refused with ACLNN_ERR_PARAM_INVALID naming the argument.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "host/dtype.h"
#include "host/provider.h"

namespace jax_aclnn::host {
namespace {

struct Shapes {
  int64_t b, t, n, d, s, kv, dv;
};

aclnnStatus CheckRank4(const char* op, const char* name, const aclTensor* t) {
  if (t->view.rank == 4) return ACLNN_SUCCESS;
  return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s; layout BSND takes rank 4", op, name,
              ShapeString(t->view).c_str());
}

int32_t Clamp32(int64_t v) {
  return static_cast<int32_t>(std::clamp<int64_t>(v, -2147483647, 2147483647));
}

// Everything but the outputs; fills `sh` and `p`.
aclnnStatus CheckAttention(const char* op, const aclTensor* query, const aclTensor* key,
                           const aclTensor* value, const char* pse_name, const aclTensor* pse,
                           const aclTensor* drop, const aclTensor* padding,
                           const aclTensor* mask, double scale, double keep_prob, int64_t pre,
                           int64_t next, int64_t head_num, const char* layout, int64_t sparse,
                           Shapes* sh, AttentionParams* p) {
  if (aclnnStatus st = CheckTensor(op, "query", query)) return st;
  if (aclnnStatus st = CheckTensor(op, "key", key)) return st;
  if (aclnnStatus st = CheckTensor(op, "value", value)) return st;
  if (aclnnStatus st = CheckSameType(op, "query", query, "key", key)) return st;
  if (aclnnStatus st = CheckSameType(op, "query", query, "value", value)) return st;
  if (layout == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: inputLayout is a null pointer", op);
  if (std::strcmp(layout, "BSND") != 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: inputLayout \"%s\": the host provider implements "
                "BSND", op, layout);
  if (keep_prob != 1.0 || drop != nullptr)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: keepProb %g with%s a dropMaskOptional: dropout is "
                "not implemented here (keepProb must be 1, dropMaskOptional null)", op, keep_prob,
                drop ? "" : "out");
  if (padding != nullptr)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: paddingMaskOptional is reserved; pass null", op);
  if (sparse < 0 || sparse > 4)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: sparseMode %lld is not implemented here (0-4 are)",
                op, static_cast<long long>(sparse));
  if (!std::isfinite(scale))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: scaleValue %g is not finite", op, scale);
  if (aclnnStatus st = CheckRank4(op, "query", query)) return st;
  if (aclnnStatus st = CheckRank4(op, "key", key)) return st;
  if (aclnnStatus st = CheckRank4(op, "value", value)) return st;
  const int64_t* q = query->view.dims;
  const int64_t* k = key->view.dims;
  const int64_t* v = value->view.dims;
  const std::string shapes = ShapeString(query->view) + ", key " + ShapeString(key->view) +
                             ", value " + ShapeString(value->view);
  if (q[2] != head_num)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: headNum %lld is not query's N (query %s)", op,
                static_cast<long long>(head_num), shapes.c_str());
  if (q[0] != k[0] || k[0] != v[0] || k[1] != v[1] || k[2] != v[2] || q[3] != k[3] ||
      v[3] > k[3])
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: query %s in BSND: B must be equal, key and value "
                "equal but for D, query's D equal to key's and value's at most that", op,
                shapes.c_str());
  if (k[2] <= 0 || q[2] % k[2] != 0 || q[2] > 256 || q[3] < 1 || q[3] > 768)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: query %s: N of query (1-256) must be a multiple of "
                "key's, D 1-768", op, shapes.c_str());
  *sh = {q[0], q[1], q[2], q[3], k[1], k[2], v[3]};
  *p = {static_cast<float>(scale), Clamp32(pre), Clamp32(next), static_cast<int32_t>(sparse)};
  if (mask != nullptr) {
    const char* name = "attenMaskOptional";
    if (mask->view.dtype != ACL_BOOL && mask->view.dtype != ACL_UINT8)
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has data type %s; BOOL or UINT8", op, name,
                  DataTypeName(mask->view.dtype));
    const View& m = mask->view;
    if (m.NumElements() > 0 && m.data == nullptr)
      return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s has no data", op, name);
    bool ok;
    if (sparse >= 2) {
      ok = m.rank == 2 && m.dims[0] == 2048 && m.dims[1] == 2048;
    } else {
      ok = (m.rank == 2 && m.dims[0] == sh->t && m.dims[1] == sh->s) ||
           (m.rank == 4 && (m.dims[0] == 1 || m.dims[0] == sh->b) &&
            (m.dims[1] == 1 || m.dims[1] == sh->n) && m.dims[2] == sh->t && m.dims[3] == sh->s &&
            !(m.dims[0] == 1 && m.dims[1] == sh->n && sh->n > 1 && sh->b > 1));
    }
    if (!ok)
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s; expected %s", op, name,
                  ShapeString(m).c_str(), sparse >= 2 ? "[2048,2048] (the compressed causal "
                  "mask of sparseMode 2-4)" : "[B,N,T,S], [B,1,T,S], [1,1,T,S] or [T,S]");
  } else if (sparse >= 2) {
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: attenMaskOptional is a null pointer: sparseMode "
                "%lld needs the compressed causal mask [2048,2048]", op,
                static_cast<long long>(sparse));
  }
  if (pse != nullptr) {
    if (aclnnStatus st = CheckTensor(op, pse_name, pse)) return st;
    if (aclnnStatus st = CheckSameType(op, "query", query, pse_name, pse)) return st;
    const View& x = pse->view;
    const bool ok = x.rank == 4 && x.dims[1] == sh->n && x.dims[3] == sh->s &&
                    ((x.dims[0] == sh->b && (x.dims[2] == sh->t || x.dims[2] == 1)) ||
                     (x.dims[0] == 1 && x.dims[2] == sh->t));
    if (!ok)
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s; expected [B,N,T,S], [B,N,1,S] "
                  "or [1,N,T,S] = [%lld,%lld,%lld,%lld]", op, pse_name, ShapeString(x).c_str(),
                  static_cast<long long>(sh->b), static_cast<long long>(sh->n),
                  static_cast<long long>(sh->t), static_cast<long long>(sh->s));
  }
  return ACLNN_SUCCESS;
}

// A tensor of `like`'s type and these dims.
aclnnStatus CheckLike(const char* op, const char* name, const aclTensor* t, const char* like_name,
                      const aclTensor* like, const int64_t* dims, int rank) {
  if (aclnnStatus st = CheckTensor(op, name, t)) return st;
  if (aclnnStatus st = CheckSameType(op, like_name, like, name, t)) return st;
  return CheckDims(op, name, t, dims, rank);
}

// A FLOAT32 [B, N, T, 8] statistic.
aclnnStatus CheckStats(const char* op, const char* name, const aclTensor* t, const Shapes& sh) {
  if (aclnnStatus st = CheckTensor(op, name, t)) return st;
  if (aclnnStatus st = CheckDataType(op, name, t, {ACL_FLOAT})) return st;
  const int64_t dims[] = {sh.b, sh.n, sh.t, 8};
  return CheckDims(op, name, t, dims, 4);
}

const View* Optional(const aclOpExecutor& ex, int input) {
  return ex.input_tensors[input] != nullptr ? &ex.inputs[input] : nullptr;
}

// Inputs: query, key, value, realShift, dropMask, paddingMask, attenMask;
// outputs: softmaxMax, softmaxSum, softmaxOut, attentionOut.
void RunForwardExecutor(const aclOpExecutor& ex, void*, const JaxAclnnHostStream* stream) {
  RunFlashAttention(ex.inputs[0], ex.inputs[1], ex.inputs[2], Optional(ex, 3), Optional(ex, 6),
                    ex.params.As<AttentionParams>(), ex.outputs[0], ex.outputs[1],
                    ex.outputs[3], stream);
}

// Inputs: query, key, value, dy, pseShift, dropMask, paddingMask, attenMask,
// softmaxMax, softmaxSum, softmaxIn, attentionIn; outputs: dq, dk, dv, dpse.
void RunGradExecutor(const aclOpExecutor& ex, void*, const JaxAclnnHostStream* stream) {
  const View* pse = Optional(ex, 4);
  const bool dpse = pse != nullptr && ex.has_output[3] && ex.outputs[3].NumElements() > 0;
  RunFlashAttentionGrad(ex.inputs[0], ex.inputs[1], ex.inputs[2], ex.inputs[3], pse,
                        Optional(ex, 7), ex.inputs[8], ex.inputs[9], ex.inputs[11],
                        ex.params.As<AttentionParams>(), ex.outputs[0], ex.outputs[1],
                        ex.outputs[2], dpse ? &ex.outputs[3] : nullptr, stream);
}

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the provider's common code

extern "C" aclnnStatus aclnnFlashAttentionScoreGetWorkspaceSize(
    const aclTensor* query, const aclTensor* key, const aclTensor* value,
    const aclTensor* realShiftOptional, const aclTensor* dropMaskOptional,
    const aclTensor* paddingMaskOptional, const aclTensor* attenMaskOptional,
    const aclIntArray* prefixOptional, double scaleValue, double keepProb, int64_t preTokens,
    int64_t nextTokens, int64_t headNum, char* inputLayout, int64_t innerPrecise,
    int64_t sparseMode, const aclTensor* softmaxMaxOut, const aclTensor* softmaxSumOut,
    const aclTensor* softmaxOutOut, const aclTensor* attentionOutOut, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  const char* op = "aclnnFlashAttentionScore";
  (void)prefixOptional, (void)innerPrecise;
  Shapes sh;
  AttentionParams p;
  if (aclnnStatus st = CheckAttention(op, query, key, value, "realShiftOptional",
                                      realShiftOptional, dropMaskOptional, paddingMaskOptional,
                                      attenMaskOptional, scaleValue, keepProb, preTokens,
                                      nextTokens, headNum, inputLayout, sparseMode, &sh, &p))
    return st;
  if (aclnnStatus st = CheckStats(op, "softmaxMaxOut", softmaxMaxOut, sh)) return st;
  if (aclnnStatus st = CheckStats(op, "softmaxSumOut", softmaxSumOut, sh)) return st;
  const int64_t out_dims[] = {sh.b, sh.t, sh.n, sh.dv};
  if (aclnnStatus st = CheckLike(op, "attentionOutOut", attentionOutOut, "query", query,
                                 out_dims, 4))
    return st;
  return MakeExecutor(op, RunForwardExecutor, PointwiseParams::Of(p),
                      {query, key, value, realShiftOptional, dropMaskOptional,
                       paddingMaskOptional, attenMaskOptional},
                      {softmaxMaxOut, softmaxSumOut, softmaxOutOut, attentionOutOut}, 0,
                      workspaceSize, executor);
}

extern "C" aclnnStatus aclnnFlashAttentionScoreGradGetWorkspaceSize(
    const aclTensor* query, const aclTensor* keyIn, const aclTensor* value, const aclTensor* dy,
    const aclTensor* pseShiftOptional, const aclTensor* dropMaskOptional,
    const aclTensor* paddingMaskOptional, const aclTensor* attenMaskOptional,
    const aclTensor* softmaxMaxOptional, const aclTensor* softmaxSumOptional,
    const aclTensor* softmaxInOptional, const aclTensor* attentionInOptional,
    const aclIntArray* prefixOptional, double scaleValue, double keepProb, int64_t preTokens,
    int64_t nextTokens, int64_t headNum, char* inputLayout, int64_t innerPrecise,
    int64_t sparseMode, const aclTensor* dqOut, const aclTensor* dkOut, const aclTensor* dvOut,
    const aclTensor* dpseOut, uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnFlashAttentionScoreGrad";
  (void)prefixOptional, (void)innerPrecise;
  Shapes sh;
  AttentionParams p;
  if (aclnnStatus st = CheckAttention(op, query, keyIn, value, "pseShiftOptional",
                                      pseShiftOptional, dropMaskOptional, paddingMaskOptional,
                                      attenMaskOptional, scaleValue, keepProb, preTokens,
                                      nextTokens, headNum, inputLayout, sparseMode, &sh, &p))
    return st;
  const int64_t out_dims[] = {sh.b, sh.t, sh.n, sh.dv};
  if (aclnnStatus st = CheckLike(op, "dy", dy, "query", query, out_dims, 4)) return st;
  if (aclnnStatus st = CheckLike(op, "attentionInOptional", attentionInOptional, "query", query,
                                 out_dims, 4))
    return st;
  if (aclnnStatus st = CheckStats(op, "softmaxMaxOptional", softmaxMaxOptional, sh)) return st;
  if (aclnnStatus st = CheckStats(op, "softmaxSumOptional", softmaxSumOptional, sh)) return st;
  if (aclnnStatus st = CheckLike(op, "dqOut", dqOut, "query", query, query->view.dims, 4))
    return st;
  if (aclnnStatus st = CheckLike(op, "dkOut", dkOut, "keyIn", keyIn, keyIn->view.dims, 4))
    return st;
  if (aclnnStatus st = CheckLike(op, "dvOut", dvOut, "value", value, value->view.dims, 4))
    return st;
  if (pseShiftOptional != nullptr && dpseOut != nullptr && dpseOut->view.NumElements() > 0)
    if (aclnnStatus st = CheckLike(op, "dpseOut", dpseOut, "pseShiftOptional", pseShiftOptional,
                                   pseShiftOptional->view.dims, 4))
      return st;
  return MakeExecutor(op, RunGradExecutor, PointwiseParams::Of(p),
                      {query, keyIn, value, dy, pseShiftOptional, dropMaskOptional,
                       paddingMaskOptional, attenMaskOptional, softmaxMaxOptional,
                       softmaxSumOptional, softmaxInOptional, attentionInOptional},
                      {dqOut, dkOut, dvOut, dpseOut}, 0, workspaceSize, executor);
}
