// The test provider's attention operators (test_provider.h), float32 on
// host memory, naive loops accumulating in double. From CANN's documented
// semantics (hicann/ops-transformer):
//  - aclnnFlashAttentionScore: attention/flash_attention_score/docs/aclnnFlashAttentionScore.md,
//    attention/flash_attention_score/op_host/op_api/aclnn_flash_attention_score.h;
//  - aclnnFlashAttentionScoreGrad:
//    attention/flash_attention_score_grad/docs/aclnnFlashAttentionScoreGrad.md,
//    attention/flash_attention_score_grad/op_host/op_api/aclnn_flash_attention_score_grad.h;
//  - the sparse modes: docs/context/sparse_mode参数说明.md.
// S = scale * (Q K^T + pse), masked where attenMask is 1 (and outside the
// preTokens/nextTokens band or the causal triangle the sparse mode defines),
// P = softmax(S) over the keys computed, Y = P V. A row with no key computed
// (CANN's "invalid row", innerPrecise 2) has Y = 0, softmaxMax = -FLT_MAX
// (the kernel's mask value, flash_attention_score_common.h) and softmaxSum
// = 0, and no gradient. Not implemented (refused): dropout (keepProb < 1 or
// a dropMask), paddingMask (reserved by CANN), sparse modes 5-8 (prefix,
// varlen) and the compressed (alibi) pse shapes.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "testing/operator_checks.h"
#include "testing/test_provider.h"

namespace jax_aclnn::test_provider::ops {
namespace {

enum class Layout { kBSND, kBNSD, kBSH, kSBH };

// One tensor's B, S, N, D and where element (b, n, s, d) is.
struct View {
  Layout layout;
  int64_t b, s, n, d;
  int64_t At(int64_t ib, int64_t in, int64_t is, int64_t id) const {
    switch (layout) {
      case Layout::kBSND: return ((ib * s + is) * n + in) * d + id;
      case Layout::kBNSD: return ((ib * n + in) * s + is) * d + id;
      case Layout::kBSH: return (ib * s + is) * n * d + in * d + id;
      default: return (is * b + ib) * n * d + in * d + id;
    }
  }
  Dims Shape() const {
    switch (layout) {
      case Layout::kBSND: return {b, s, n, d};
      case Layout::kBNSD: return {b, n, s, d};
      case Layout::kBSH: return {b, s, n * d};
      default: return {s, b, n * d};
    }
  }
};

// B, S and either N (the 4-D layouts) or H (3-D) of a tensor.
aclnnStatus ReadView(const char* op, const char* name, const aclTensor* t, Layout layout,
                     View* v, int64_t* h) {
  const bool four = layout == Layout::kBSND || layout == Layout::kBNSD;
  RETURN_IF_ERROR(CheckRank(op, name, t, four ? 4 : 3, four ? 4 : 3));
  const Dims& x = t->dims;
  v->layout = layout;
  switch (layout) {
    case Layout::kBSND: *v = {layout, x[0], x[1], x[2], x[3]}; break;
    case Layout::kBNSD: *v = {layout, x[0], x[2], x[1], x[3]}; break;
    case Layout::kBSH: *h = x[2]; v->b = x[0]; v->s = x[1]; break;
    default: *h = x[2]; v->b = x[1]; v->s = x[0]; break;
  }
  return ACLNN_SUCCESS;
}

// N and D of a 3-D layout's H = N * D, given one of them.
aclnnStatus SplitH(const char* op, const char* name, int64_t h, int64_t n, int64_t d, View* v) {
  if (n > 0 ? h % n != 0 : d <= 0 || h % d != 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s's H = %lld is not a multiple of %s %lld", op,
                name, static_cast<long long>(h), n > 0 ? "headNum" : "the head dimension",
                static_cast<long long>(n > 0 ? n : d));
  v->n = n > 0 ? n : h / d;
  v->d = n > 0 ? h / n : d;
  return ACLNN_SUCCESS;
}

struct Attention {
  View q, k, v, o;  // o: the attention output's (and dy's) view
  int64_t group;    // query heads per key/value head
  double scale;
  int64_t pre, next, sparse;
  bool mask = false, pse = false;
  int64_t mask_b = 0, mask_n = 0;          // the mask's strides over B and N (0: broadcast)
  int64_t pse_b = 0, pse_n = 0, pse_s = 0;  // the pse's over B, N and query rows
  Dims pse_dims;

  // Whether query row i of head n in batch b attends to key j.
  bool Computed(const uint8_t* mask_data, int64_t b, int64_t n, int64_t i, int64_t j) const {
    if (!mask) return true;
    const int64_t sq = q.s, skv = k.s;
    switch (sparse) {
      case 0: return mask_data[b * mask_b + n * mask_n + i * skv + j] == 0 && j - i <= next &&
                     i - j <= pre;
      case 1: return mask_data[b * mask_b + n * mask_n + i * skv + j] == 0;
      case 2: return j <= i;
      case 3: return j <= i + skv - sq;
      default: return j - i - (skv - sq) <= next && i + (skv - sq) - j <= pre;  // 4: band
    }
  }
};

aclnnStatus CheckAttention(const char* op, const aclTensor* query, const aclTensor* key,
                           const aclTensor* value, const aclTensor* pse, const aclTensor* drop,
                           const aclTensor* padding, const aclTensor* mask, double scale,
                           double keep_prob, int64_t pre, int64_t next, int64_t head_num,
                           const char* layout_name, int64_t sparse, Attention* a) {
  RETURN_IF_ERROR(CheckFloat32(op, "query", query, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckFloat32(op, "key", key, true));
  RETURN_IF_ERROR(CheckFloat32(op, "value", value, true));
  RETURN_IF_ERROR(CheckNotNull(op, "inputLayout", layout_name));
  const std::string name = layout_name;
  Layout layout;
  if (name == "BSND") layout = Layout::kBSND;
  else if (name == "BNSD") layout = Layout::kBNSD;
  else if (name == "BSH") layout = Layout::kBSH;
  else if (name == "SBH") layout = Layout::kSBH;
  else return Fail(ACLNN_ERR_PARAM_INVALID, "%s: inputLayout \"%s\" is not BSH, SBH, BSND or BNSD "
                   "(TND is aclnnFlashAttentionVarLenScore's)", op, name.c_str());
  if (keep_prob != 1.0 || drop != nullptr)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: keepProb %g with%s a dropMask: dropout is not "
                "implemented here (keepProb must be 1, dropMaskOptional null)", op, keep_prob,
                drop ? "" : "out");
  if (padding != nullptr)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: paddingMaskOptional is reserved; pass null", op);
  if (sparse < 0 || sparse > 4)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: sparseMode %lld is not implemented here (0-4 are)",
                op, static_cast<long long>(sparse));
  int64_t hq = 0, hk = 0, hv = 0;
  RETURN_IF_ERROR(ReadView(op, "query", query, layout, &a->q, &hq));
  RETURN_IF_ERROR(ReadView(op, "key", key, layout, &a->k, &hk));
  RETURN_IF_ERROR(ReadView(op, "value", value, layout, &a->v, &hv));
  if (layout == Layout::kBSH || layout == Layout::kSBH) {
    if (head_num <= 0)
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: headNum %lld", op, static_cast<long long>(head_num));
    RETURN_IF_ERROR(SplitH(op, "query", hq, head_num, 0, &a->q));
    RETURN_IF_ERROR(SplitH(op, "key", hk, 0, a->q.d, &a->k));
    RETURN_IF_ERROR(SplitH(op, "value", hv, a->k.n, 0, &a->v));
  }
  const View &q = a->q, &k = a->k, &v = a->v;
  auto shapes = Shape(query) + ", key " + Shape(key) + ", value " + Shape(value);
  if (q.n != head_num)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: headNum %lld is not query's N (query %s)", op,
                static_cast<long long>(head_num), shapes.c_str());
  if (q.b != k.b || k.b != v.b || k.s != v.s || k.n != v.n || q.d != k.d || v.d > k.d)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: query %s in %s: B must be equal, key and value "
                "equal but for D, query's D equal to key's and value's at most that", op,
                shapes.c_str(), name.c_str());
  if (k.n <= 0 || q.n % k.n != 0 || q.n > 256 || q.d < 1 || q.d > 768)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: query %s: N of query (1-256) must be a multiple of "
                "key's, D 1-768", op, shapes.c_str());
  a->group = q.n / k.n;
  a->o = {layout, q.b, q.s, q.n, v.d};
  a->scale = scale;
  a->pre = pre;
  a->next = next;
  a->sparse = sparse;
  const int64_t b = q.b, n = q.n, sq = q.s, skv = k.s;
  if (mask != nullptr) {
    RETURN_IF_ERROR(CheckTensor(op, "attenMaskOptional", mask, {ACL_BOOL, ACL_UINT8}));
    a->mask = true;
    const Dims& m = mask->dims;
    bool ok;
    if (sparse >= 2) {
      ok = m == Dims{2048, 2048};
    } else {
      ok = (m == Dims{sq, skv}) || (m.size() == 4 && (m[0] == 1 || m[0] == b) &&
                                    (m[1] == 1 || m[1] == n) && m[2] == sq && m[3] == skv &&
                                    !(m[0] == 1 && m[1] == n && n > 1 && b > 1));
      if (m.size() == 4 && m[0] != 1) a->mask_b = m[1] * sq * skv;
      if (m.size() == 4 && m[1] != 1) a->mask_n = sq * skv;
    }
    if (!ok)
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: attenMaskOptional has shape %s; expected %s", op,
                  Shape(mask).c_str(), sparse >= 2 ? "[2048,2048] (the compressed causal mask "
                  "of sparseMode 2-4)" : "[B,N,Sq,Skv], [B,1,Sq,Skv], [1,1,Sq,Skv] or [Sq,Skv]");
  }
  if (pse != nullptr) {
    RETURN_IF_ERROR(CheckFloat32(op, "realShift/pse", pse, true));
    const Dims& p = pse->dims;
    if (!(p == Dims{b, n, sq, skv} || p == Dims{b, n, 1, skv} || p == Dims{1, n, sq, skv}))
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: the pse has shape %s; expected [B,N,Sq,Skv], "
                  "[B,N,1,Skv] or [1,N,Sq,Skv] = [%lld,%lld,%lld,%lld]", op, Shape(pse).c_str(),
                  static_cast<long long>(b), static_cast<long long>(n),
                  static_cast<long long>(sq), static_cast<long long>(skv));
    a->pse = true;
    a->pse_dims = p;
    a->pse_s = p[2] == 1 ? 0 : skv;
    a->pse_n = p[2] * skv;
    a->pse_b = p[0] == 1 ? 0 : n * p[2] * skv;
  }
  return ACLNN_SUCCESS;
}

// Row (b, n, i)'s scores for the keys computed: s[j] (valid[j]).
void Scores(const Attention& a, const float* q, const float* k, const float* pse,
            const uint8_t* mask, int64_t b, int64_t n, int64_t i, std::vector<double>* s,
            std::vector<char>* valid) {
  const int64_t g = n / a.group;
  for (int64_t j = 0; j < a.k.s; ++j) {
    (*valid)[j] = a.Computed(mask, b, n, i, j);
    if (!(*valid)[j]) continue;
    double dot = 0;
    for (int64_t d = 0; d < a.q.d; ++d)
      dot += double(q[a.q.At(b, n, i, d)]) * k[a.k.At(b, g, j, d)];
    if (a.pse) dot += pse[b * a.pse_b + n * a.pse_n + i * a.pse_s + j];
    (*s)[j] = a.scale * dot;
  }
}

const uint8_t* MaskData(const Slot& s) { return static_cast<const uint8_t*>(s.data); }

}  // namespace
}  // namespace jax_aclnn::test_provider::ops

using namespace jax_aclnn::test_provider;       // NOLINT: the C ABI's definitions below
using namespace jax_aclnn::test_provider::ops;  // NOLINT

// attentionOutOut in query's layout with value's D; softmaxMaxOut and
// softmaxSumOut [B, N, Sq, 8] float32 (each row's max of S and sum of
// exp(S - max), 8 times); softmaxOutOut is reserved (any shape, not
// written; may be null). prefixOptional and innerPrecise change nothing here.
EXPORT aclnnStatus aclnnFlashAttentionScoreGetWorkspaceSize(
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
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspaceSize));
  RETURN_IF_ERROR(CheckNotNull(op, "executor", executor));
  Attention a;
  RETURN_IF_ERROR(CheckAttention(op, query, key, value, realShiftOptional, dropMaskOptional,
                                 paddingMaskOptional, attenMaskOptional, scaleValue, keepProb,
                                 preTokens, nextTokens, headNum, inputLayout, sparseMode, &a));
  RETURN_IF_ERROR(CheckFloat32(op, "softmaxMaxOut", softmaxMaxOut));
  RETURN_IF_ERROR(CheckFloat32(op, "softmaxSumOut", softmaxSumOut));
  RETURN_IF_ERROR(CheckFloat32(op, "attentionOutOut", attentionOutOut));
  const Dims stats = {a.q.b, a.q.n, a.q.s, 8};
  RETURN_IF_ERROR(CheckShape(op, "softmaxMaxOut", softmaxMaxOut, stats));
  RETURN_IF_ERROR(CheckShape(op, "softmaxSumOut", softmaxSumOut, stats));
  RETURN_IF_ERROR(CheckShape(op, "attentionOutOut", attentionOutOut, a.o.Shape()));
  Kernel kernel = [op, a](const std::vector<Slot>& in, const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    const Dense q(in[0]), k(in[1]), v(in[2]), pse(in[3]);
    const uint8_t* mask = MaskData(in[6]);
    float *max_out = Floats(out[0]), *sum_out = Floats(out[1]), *y = Floats(out[3]);
    std::vector<double> s(a.k.s), acc(a.v.d);
    std::vector<char> valid(a.k.s);
    for (int64_t b = 0; b < a.q.b; ++b)
      for (int64_t n = 0; n < a.q.n; ++n)
        for (int64_t i = 0; i < a.q.s; ++i) {
          Scores(a, q.get(), k.get(), pse.get(), mask, b, n, i, &s, &valid);
          double max = -INFINITY, sum = 0;
          for (int64_t j = 0; j < a.k.s; ++j) if (valid[j]) max = std::max(max, s[j]);
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t j = 0; j < a.k.s; ++j) {
            if (!valid[j]) continue;
            const double p = std::exp(s[j] - max);
            sum += p;
            for (int64_t d = 0; d < a.v.d; ++d) acc[d] += p * v[a.v.At(b, n / a.group, j, d)];
          }
          for (int64_t d = 0; d < a.v.d; ++d) y[a.o.At(b, n, i, d)] = sum > 0 ? float(acc[d] / sum) : 0.0f;
          const int64_t row = ((b * a.q.n + n) * a.q.s + i) * 8;
          for (int r = 0; r < 8; ++r) {
            max_out[row + r] = sum > 0 ? float(max) : -FLT_MAX;
            sum_out[row + r] = float(sum);
          }
        }
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(query), SlotOf(key), SlotOf(value), SlotOf(realShiftOptional),
                           SlotOf(dropMaskOptional), SlotOf(paddingMaskOptional), SlotOf(attenMaskOptional)},
                      {SlotOf(softmaxMaxOut), SlotOf(softmaxSumOut), SlotOf(softmaxOutOut),
                       SlotOf(attentionOutOut)}, std::move(kernel), workspaceSize, executor);
}

// P = exp(S - softmaxMax) / softmaxSum from the forward's statistics, with
// D_i = dy_i . attentionIn_i and dS = P * (dy V^T - D): dV = P^T dY, dQ =
// scale * dS K, dK = scale * dS^T Q (key/value heads summed over their
// query heads), dpse = scale * dS summed over the pse's broadcast
// dimensions (written when pseShiftOptional is given and dpseOut has its
// shape; an empty dpseOut, as torch_npu passes without pse, is not written).
EXPORT aclnnStatus aclnnFlashAttentionScoreGradGetWorkspaceSize(
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
  (void)prefixOptional, (void)innerPrecise, (void)softmaxInOptional;
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspaceSize));
  RETURN_IF_ERROR(CheckNotNull(op, "executor", executor));
  Attention a;
  RETURN_IF_ERROR(CheckAttention(op, query, keyIn, value, pseShiftOptional, dropMaskOptional,
                                 paddingMaskOptional, attenMaskOptional, scaleValue, keepProb,
                                 preTokens, nextTokens, headNum, inputLayout, sparseMode, &a));
  const Dims stats = {a.q.b, a.q.n, a.q.s, 8};
  const char* names[] = {"dy", "softmaxMaxOptional", "softmaxSumOptional", "attentionInOptional"};
  const aclTensor* ins[] = {dy, softmaxMaxOptional, softmaxSumOptional, attentionInOptional};
  const Dims shapes[] = {a.o.Shape(), stats, stats, a.o.Shape()};
  for (int i = 0; i < 4; ++i) {
    RETURN_IF_ERROR(CheckFloat32(op, names[i], ins[i], /*strided_ok=*/true));
    RETURN_IF_ERROR(CheckShape(op, names[i], ins[i], shapes[i]));
  }
  RETURN_IF_ERROR(CheckFloat32(op, "dqOut", dqOut));
  RETURN_IF_ERROR(CheckFloat32(op, "dkOut", dkOut));
  RETURN_IF_ERROR(CheckFloat32(op, "dvOut", dvOut));
  RETURN_IF_ERROR(CheckShape(op, "dqOut", dqOut, query->dims));
  RETURN_IF_ERROR(CheckShape(op, "dkOut", dkOut, keyIn->dims));
  RETURN_IF_ERROR(CheckShape(op, "dvOut", dvOut, value->dims));
  const bool write_dpse = a.pse && Numel(dpseOut) > 0;
  if (write_dpse) {
    RETURN_IF_ERROR(CheckFloat32(op, "dpseOut", dpseOut));
    RETURN_IF_ERROR(CheckShape(op, "dpseOut", dpseOut, a.pse_dims));
  }
  Kernel kernel = [op, a, write_dpse](const std::vector<Slot>& in,
                                      const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    const Dense q(in[0]), k(in[1]), v(in[2]), dy(in[3]), pse(in[4]), max_in(in[8]),
        sum_in(in[9]), o(in[11]);
    const uint8_t* mask = MaskData(in[7]);
    std::vector<double> dq(Numel(in[0].tensor)), dk(Numel(in[1].tensor)), dv(Numel(in[2].tensor)),
        dpse(write_dpse ? Numel(in[4].tensor) : 0), s(a.k.s);
    std::vector<char> valid(a.k.s);
    for (int64_t b = 0; b < a.q.b; ++b)
      for (int64_t n = 0; n < a.q.n; ++n)
        for (int64_t i = 0; i < a.q.s; ++i) {
          const int64_t row = ((b * a.q.n + n) * a.q.s + i) * 8, g = n / a.group;
          const double max = max_in[row], sum = sum_in[row];
          if (!(sum > 0)) continue;  // no key computed: no gradient
          Scores(a, q.get(), k.get(), pse.get(), mask, b, n, i, &s, &valid);
          double di = 0;
          for (int64_t d = 0; d < a.v.d; ++d)
            di += double(dy[a.o.At(b, n, i, d)]) * o[a.o.At(b, n, i, d)];
          for (int64_t j = 0; j < a.k.s; ++j) {
            if (!valid[j]) continue;
            const double p = std::exp(s[j] - max) / sum;
            double dp = 0;
            for (int64_t d = 0; d < a.v.d; ++d) {
              const double dy_d = dy[a.o.At(b, n, i, d)];
              dp += dy_d * v[a.v.At(b, g, j, d)];
              dv[a.v.At(b, g, j, d)] += p * dy_d;
            }
            const double ds = a.scale * p * (dp - di);
            for (int64_t d = 0; d < a.q.d; ++d) {
              dq[a.q.At(b, n, i, d)] += ds * k[a.k.At(b, g, j, d)];
              dk[a.k.At(b, g, j, d)] += ds * q[a.q.At(b, n, i, d)];
            }
            if (write_dpse) dpse[b * a.pse_b + n * a.pse_n + i * a.pse_s + j] += ds;
          }
        }
    const std::vector<double>* grads[] = {&dq, &dk, &dv, &dpse};
    for (int t = 0; t < 4; ++t)
      for (size_t e = 0; e < grads[t]->size(); ++e) Floats(out[t])[e] = float((*grads[t])[e]);
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(
      op, {SlotOf(query), SlotOf(keyIn), SlotOf(value), SlotOf(dy), SlotOf(pseShiftOptional),
           SlotOf(dropMaskOptional), SlotOf(paddingMaskOptional), SlotOf(attenMaskOptional),
           SlotOf(softmaxMaxOptional), SlotOf(softmaxSumOptional), SlotOf(softmaxInOptional),
           SlotOf(attentionInOptional)},
      {SlotOf(dqOut), SlotOf(dkOut), SlotOf(dvOut), SlotOf(dpseOut)}, std::move(kernel),
      workspaceSize, executor);
}

JAX_ACLNN_TEST_SECOND_PHASE(FlashAttentionScore)
JAX_ACLNN_TEST_SECOND_PHASE(FlashAttentionScoreGrad)
