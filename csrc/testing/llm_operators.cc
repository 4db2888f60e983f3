// The test provider's language-model operators (test_provider.h), float32
// on host memory. From CANN's documented semantics:
//  - aclnnRotaryPositionEmbedding(Grad): hicann/ops-transformer
//    posembedding/rotary_position_embedding/docs/aclnnRotaryPositionEmbedding.md,
//    posembedding/rotary_position_embedding/op_host/op_api/aclnn_rotary_position_embedding.h,
//    posembedding/rotary_position_embedding_grad/docs/aclnnRotaryPositionEmbeddingGrad.md;
//  - aclnnCrossEntropyLoss(Grad): hicann/ops-nn
//    loss/cross_entropy_loss/docs/aclnnCrossEntropyLoss.md (label smoothing as
//    loss/cross_entropy_loss/op_kernel/cross_entropy_loss_fp32.h computes it),
//    loss/cross_entropy_loss_grad/docs/aclnnCrossEntropyLossGrad.md;
// Sums are accumulated in double; outputs are written contiguously.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "testing/operator_checks.h"
#include "testing/test_provider.h"

namespace jax_aclnn::test_provider::ops {
namespace {

// y[j] = x[a[j]] * cos[j] + sign[j] * x[b[j]] * sin[j] along D, one table
// per mode (y = x * cos + x_rotate * sin in CANN's formulas, mode 3 reading
// x de-interleaved): 0 half, rotate = cat(-x2, x1) of the halves;
// 1 interleave, pairs (x[2i], x[2i+1]) -> (-x[2i+1], x[2i]); 2 quarter,
// rotate = cat(-x2, x1, -x4, x3) of the quarters; 3 interleave-half,
// y = cat(x[::2], x[1::2]) * cos + cat(-x[1::2], x[::2]) * sin.
struct Rotation {
  std::vector<int64_t> a, b;
  std::vector<double> sign;
};

Rotation MakeRotation(int64_t mode, int64_t d) {
  Rotation r{std::vector<int64_t>(d), std::vector<int64_t>(d), std::vector<double>(d)};
  const int64_t h = d / 2, q = d / 4;
  auto de = [h](int64_t j) { return j < h ? 2 * j : 2 * (j - h) + 1; };
  for (int64_t j = 0; j < d; ++j) {
    bool first;  // of its pair: the rotated element is negated
    switch (mode) {
      case 0: first = j < h; r.a[j] = j; r.b[j] = first ? j + h : j - h; break;
      case 1: first = j % 2 == 0; r.a[j] = j; r.b[j] = j ^ 1; break;
      case 2: first = (j / q) % 2 == 0; r.a[j] = j; r.b[j] = first ? j + q : j - q; break;
      default: first = j < h; r.a[j] = de(j); r.b[j] = de(first ? j + h : j - h); break;
    }
    r.sign[j] = first ? -1.0 : 1.0;
  }
  return r;
}

// x (B, S, N, D) and cos/sin of one of the shapes CANN lists: each of the
// first three dimensions 1 or x's, D equal, but not (1, S, N, D) with
// B, S, N > 1 (the pages list 111D, BSND, B1ND, BS1D, 11ND, 1S1D, B11D).
struct RopeShape {
  int64_t rows, d;             // rows = B * S * N of x
  Dims x_dims, cos_strides;    // cos's strides over x's first three dims (0: broadcast)
  int64_t cos_numel;
};

aclnnStatus CheckRope(const char* op, const char* x_name, const aclTensor* x,
                      const aclTensor* cos, const aclTensor* sin, int64_t mode, RopeShape* s) {
  if (mode < 0 || mode > 3)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: mode %lld is not 0 (half), 1 (interleave), "
                "2 (quarter) or 3 (interleave-half)", op, static_cast<long long>(mode));
  RETURN_IF_ERROR(CheckRank(op, x_name, x, 4, 4));
  RETURN_IF_ERROR(CheckRank(op, "cos", cos, 4, 4));
  RETURN_IF_ERROR(CheckShape(op, "sin", sin, cos->dims));
  s->x_dims = x->dims;
  s->rows = Product(x->dims, 0, 3);
  s->d = x->dims[3];
  s->cos_numel = Numel(cos);
  s->cos_strides.assign(3, 0);
  if (Numel(x) == 0) return ACLNN_SUCCESS;  // an empty x: no shape constraint (the pages)
  const Dims& c = cos->dims;
  bool ok = c[3] == s->d;
  for (int k = 0; k < 3; ++k) ok = ok && (c[k] == 1 || c[k] == x->dims[k]);
  if (ok && c[0] == 1 && x->dims[0] > 1 && x->dims[1] > 1 && c[1] > 1 && x->dims[2] > 1 && c[2] > 1)
    ok = false;  // (1, S, N, D)
  if (!ok)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: cos and sin have shape %s; with %s %s (B, S, N, D) "
                "expected one of (1,1,1,D), (B,S,N,D), (B,1,N,D), (B,S,1,D), (1,1,N,D), "
                "(1,S,1,D), (B,1,1,D)", op, Shape(cos).c_str(), x_name, Shape(x).c_str());
  const int64_t d = s->d;
  if (d > 1024 || d % (mode == 2 ? 4 : 2) != 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: D = %lld must be at most 1024 and a multiple of %d "
                "in this mode", op, static_cast<long long>(d), mode == 2 ? 4 : 2);
  const Dims strides = ContiguousStrides(c);
  for (int k = 0; k < 3; ++k) s->cos_strides[k] = c[k] == 1 ? 0 : strides[k];
  return ACLNN_SUCCESS;
}

// Calls f(row, cos_offset) for every (b, s, n) row of x.
template <typename F>
void ForEachRow(const RopeShape& s, F f) {
  int64_t row = 0;
  for (int64_t i0 = 0; i0 < s.x_dims[0]; ++i0)
    for (int64_t i1 = 0; i1 < s.x_dims[1]; ++i1)
      for (int64_t i2 = 0; i2 < s.x_dims[2]; ++i2)
        f(row++, i0 * s.cos_strides[0] + i1 * s.cos_strides[1] + i2 * s.cos_strides[2]);
}


enum class Reduction { kNone, kMean, kSum };

aclnnStatus ParseReduction(const char* op, const char* s, Reduction* r) {
  const std::string v = s == nullptr ? "mean" : s;  // reductionOptional: null is "mean"
  if (v == "none") *r = Reduction::kNone;
  else if (v == "mean") *r = Reduction::kMean;
  else if (v == "sum") *r = Reduction::kSum;
  else return Fail(ACLNN_ERR_PARAM_INVALID, "%s: reductionOptional \"%s\" is not \"mean\", "
                   "\"sum\" or \"none\"", op, v.c_str());
  return ACLNN_SUCCESS;
}

// logits (N, C), C > 0; target (N) of int64 or int32 (the grad's page
// lists int64 only: JAX without x64 has int32 class indices); weight (C).
aclnnStatus CheckClasses(const char* op, const char* name, const aclTensor* logits,
                         const aclTensor* target, const aclTensor* weight) {
  RETURN_IF_ERROR(CheckRank(op, name, logits, 2, 2));
  if (logits->dims[1] == 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s %s has no classes", op, name, Shape(logits).c_str());
  RETURN_IF_ERROR(CheckTensor(op, "target", target, {ACL_INT64, ACL_INT32}));
  RETURN_IF_ERROR(CheckShape(op, "target", target, {logits->dims[0]}));
  if (weight != nullptr) {
    RETURN_IF_ERROR(CheckFloat32(op, "weightOptional", weight, /*strided_ok=*/true));
    RETURN_IF_ERROR(CheckShape(op, "weightOptional", weight, {logits->dims[1]}));
  }
  return ACLNN_SUCCESS;
}

// Row n's class and its weight (0 when ignored); an error for a class
// outside [0, C) that is not ignoreIndex.
aclnnStatus RowClass(const char* op, const Slot& target, const Dense& weight, int64_t n,
                     int64_t c, int64_t ignore_index, int64_t* t, double* w) {
  *t = IntAt(target, n);
  if (*t == ignore_index) return *w = 0, ACLNN_SUCCESS;
  if (*t < 0 || *t >= c)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: target[%lld] = %lld is outside [0, %lld) and not "
                "ignoreIndex %lld", op, static_cast<long long>(n), static_cast<long long>(*t),
                static_cast<long long>(c), static_cast<long long>(ignore_index));
  *w = weight.get() ? weight[*t] : 1.0;
  return ACLNN_SUCCESS;
}

}  // namespace
}  // namespace jax_aclnn::test_provider::ops

using namespace jax_aclnn::test_provider;       // NOLINT: the C ABI's definitions below
using namespace jax_aclnn::test_provider::ops;  // NOLINT

// out = x * cos + rotate(x) * sin (Rotation above); x, cos, sin, out 4-D,
// cos and sin broadcast over x's first three dimensions.
EXPORT aclnnStatus aclnnRotaryPositionEmbeddingGetWorkspaceSize(
    const aclTensor* x, const aclTensor* cos, const aclTensor* sin, int64_t mode, aclTensor* out,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnRotaryPositionEmbedding";
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspaceSize));
  RETURN_IF_ERROR(CheckNotNull(op, "executor", executor));
  RETURN_IF_ERROR(CheckFloat32(op, "x", x, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckFloat32(op, "cos", cos, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckFloat32(op, "sin", sin, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckFloat32(op, "out", out));
  RopeShape s;
  RETURN_IF_ERROR(CheckRope(op, "x", x, cos, sin, mode, &s));
  RETURN_IF_ERROR(CheckShape(op, "out", out, x->dims));
  Kernel kernel = [op, s, mode](const std::vector<Slot>& in,
                                const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    if (s.rows * s.d == 0) return ACLNN_SUCCESS;
    const Dense x(in[0]), cos(in[1]), sin(in[2]);
    const Rotation r = MakeRotation(mode, s.d);
    float* y = Floats(out[0]);
    ForEachRow(s, [&](int64_t row, int64_t c) {
      const float* x_r = x.get() + row * s.d;
      for (int64_t j = 0; j < s.d; ++j)
        y[row * s.d + j] = float(double(x_r[r.a[j]]) * cos[c + j] +
                                 r.sign[j] * x_r[r.b[j]] * sin[c + j]);
    });
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(x), SlotOf(cos), SlotOf(sin)}, {SlotOf(out)},
                      std::move(kernel), workspaceSize, executor);
}

// The forward's transpose: dx[a[j]] += dy[j] * cos[j], dx[b[j]] += sign[j]
// * dy[j] * sin[j]; with xOptional, dcos = sum(dy * x[a]) and dsin =
// sum(dy * sign * x[b]) over cos's broadcast dimensions. Without it dcosOut
// and dsinOut are not computed (left as they are, as CANN's page says), but
// they must be given.
EXPORT aclnnStatus aclnnRotaryPositionEmbeddingGradGetWorkspaceSize(
    const aclTensor* dy, const aclTensor* cos, const aclTensor* sin, const aclTensor* xOptional,
    int64_t mode, const aclTensor* dxOut, const aclTensor* dcosOut, const aclTensor* dsinOut,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnRotaryPositionEmbeddingGrad";
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspaceSize));
  RETURN_IF_ERROR(CheckNotNull(op, "executor", executor));
  RETURN_IF_ERROR(CheckFloat32(op, "dy", dy, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckFloat32(op, "cos", cos, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckFloat32(op, "sin", sin, /*strided_ok=*/true));
  if (xOptional != nullptr) RETURN_IF_ERROR(CheckFloat32(op, "xOptional", xOptional, true));
  RETURN_IF_ERROR(CheckFloat32(op, "dxOut", dxOut));
  RETURN_IF_ERROR(CheckFloat32(op, "dcosOut", dcosOut));
  RETURN_IF_ERROR(CheckFloat32(op, "dsinOut", dsinOut));
  RopeShape s;
  RETURN_IF_ERROR(CheckRope(op, "dy", dy, cos, sin, mode, &s));
  if (xOptional != nullptr) RETURN_IF_ERROR(CheckShape(op, "xOptional", xOptional, dy->dims));
  RETURN_IF_ERROR(CheckShape(op, "dxOut", dxOut, dy->dims));
  RETURN_IF_ERROR(CheckShape(op, "dcosOut", dcosOut, cos->dims));
  RETURN_IF_ERROR(CheckShape(op, "dsinOut", dsinOut, cos->dims));
  Kernel kernel = [op, s, mode](const std::vector<Slot>& in,
                                const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    if (s.rows * s.d == 0) {
      if (in[3].tensor != nullptr && s.cos_numel > 0) {  // sums over nothing
        std::memset(out[1].data, 0, sizeof(float) * s.cos_numel);
        std::memset(out[2].data, 0, sizeof(float) * s.cos_numel);
      }
      return ACLNN_SUCCESS;
    }
    const Dense dy(in[0]), cos(in[1]), sin(in[2]), x(in[3]);
    const bool with_x = in[3].tensor != nullptr;
    const Rotation r = MakeRotation(mode, s.d);
    std::vector<double> dx(s.d), dcos(with_x ? s.cos_numel : 0), dsin(dcos.size());
    ForEachRow(s, [&](int64_t row, int64_t c) {
      const float* dy_r = dy.get() + row * s.d;
      std::fill(dx.begin(), dx.end(), 0.0);
      for (int64_t j = 0; j < s.d; ++j) {
        dx[r.a[j]] += double(dy_r[j]) * cos[c + j];
        dx[r.b[j]] += r.sign[j] * dy_r[j] * sin[c + j];
      }
      for (int64_t j = 0; j < s.d; ++j) Floats(out[0])[row * s.d + j] = float(dx[j]);
      if (!with_x) return;
      const float* x_r = x.get() + row * s.d;
      for (int64_t j = 0; j < s.d; ++j) {
        dcos[c + j] += double(dy_r[j]) * x_r[r.a[j]];
        dsin[c + j] += r.sign[j] * dy_r[j] * x_r[r.b[j]];
      }
    });
    for (size_t i = 0; i < dcos.size(); ++i) {
      Floats(out[1])[i] = float(dcos[i]);
      Floats(out[2])[i] = float(dsin[i]);
    }
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(dy), SlotOf(cos), SlotOf(sin), SlotOf(xOptional)},
                      {SlotOf(dxOut), SlotOf(dcosOut), SlotOf(dsinOut)}, std::move(kernel),
                      workspaceSize, executor);
}


// l_n = (1 - labelSmoothing) * -weight[y_n] * logProb[n, y_n] + labelSmoothing
// / C * -sum_c weight[c] * logProb[n, c], 0 where y_n == ignoreIndex;
// lossOut = l ("none", [N]), sum(l) ("sum", [1]) or sum(l) / sum_n
// weight[y_n] * (y_n != ignoreIndex) ("mean", [1]); logProbOut = log_softmax.
// The zloss outputs must be given ([0] or the documented shape) and are not
// computed (the page: "not supported yet"), nor does lseSquareScaleForZloss
// or returnZloss change anything.
EXPORT aclnnStatus aclnnCrossEntropyLossGetWorkspaceSize(
    const aclTensor* input, const aclTensor* target, const aclTensor* weightOptional,
    char* reductionOptional, int64_t ignoreIndex, double labelSmoothing,
    double lseSquareScaleForZloss, bool returnZloss, const aclTensor* lossOut,
    const aclTensor* logProbOut, const aclTensor* zlossOut, const aclTensor* lseForZlossOut,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnCrossEntropyLoss";
  (void)returnZloss;
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspaceSize));
  RETURN_IF_ERROR(CheckNotNull(op, "executor", executor));
  RETURN_IF_ERROR(CheckFloat32(op, "input", input, /*strided_ok=*/true));
  RETURN_IF_ERROR(CheckNotNull(op, "target", target));
  const char* outs[] = {"lossOut", "logProbOut", "zlossOut", "lseForZlossOut"};
  const aclTensor* out_tensors[] = {lossOut, logProbOut, zlossOut, lseForZlossOut};
  for (int i = 0; i < 4; ++i) RETURN_IF_ERROR(CheckFloat32(op, outs[i], out_tensors[i]));
  RETURN_IF_ERROR(CheckClasses(op, "input", input, target, weightOptional));
  Reduction reduction;
  RETURN_IF_ERROR(ParseReduction(op, reductionOptional, &reduction));
  if (!(labelSmoothing >= 0 && labelSmoothing <= 1))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: labelSmoothing %g is outside [0, 1]", op, labelSmoothing);
  if (!(lseSquareScaleForZloss >= 0 && lseSquareScaleForZloss < 1))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: lseSquareScaleForZloss %g is outside [0, 1)", op,
                lseSquareScaleForZloss);
  const int64_t n = input->dims[0], c = input->dims[1];
  const Dims loss_dims = reduction == Reduction::kNone ? Dims{n} : Dims{1};
  RETURN_IF_ERROR(CheckShape(op, "lossOut", lossOut, loss_dims));
  RETURN_IF_ERROR(CheckShape(op, "logProbOut", logProbOut, input->dims));
  if (Numel(zlossOut) != 0) RETURN_IF_ERROR(CheckShape(op, "zlossOut", zlossOut, loss_dims));
  if (Numel(lseForZlossOut) != 0)
    RETURN_IF_ERROR(CheckShape(op, "lseForZlossOut", lseForZlossOut, {n}));
  Kernel kernel = [=](const std::vector<Slot>& in, const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    const Dense x(in[0]), weight(in[2]);
    float *loss = Floats(out[0]), *log_prob = Floats(out[1]);
    double total = 0, weight_total = 0;
    for (int64_t r = 0; r < n; ++r) {
      const float* x_r = x.get() + r * c;
      double max = x_r[0], sum = 0;
      for (int64_t j = 1; j < c; ++j) max = std::max(max, double(x_r[j]));
      for (int64_t j = 0; j < c; ++j) sum += std::exp(x_r[j] - max);
      const double lse = max + std::log(sum);
      double smooth = 0;
      for (int64_t j = 0; j < c; ++j) {
        log_prob[r * c + j] = float(x_r[j] - lse);
        smooth -= (weight.get() ? weight[j] : 1.0) * (x_r[j] - lse);
      }
      int64_t t;
      double w;
      RETURN_IF_ERROR(RowClass(op, in[1], weight, r, c, ignoreIndex, &t, &w));
      const double l = t == ignoreIndex ? 0.0
                       : (1 - labelSmoothing) * -w * (x_r[t] - lse) + labelSmoothing / c * smooth;
      if (reduction == Reduction::kNone) loss[r] = float(l);
      total += l;
      weight_total += w;
    }
    if (reduction == Reduction::kSum) loss[0] = float(total);
    if (reduction == Reduction::kMean) loss[0] = float(total / weight_total);
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(input), SlotOf(target), SlotOf(weightOptional)},
                      {SlotOf(lossOut), SlotOf(logProbOut), SlotOf(zlossOut), SlotOf(lseForZlossOut)},
                      std::move(kernel), workspaceSize, executor);
}

// The gradient of the loss with respect to input, from the forward's
// logProb (the grad page's formula): with mask = (y_n != ignoreIndex) and
// d = sum_n weight[y_n] * mask for "mean" (else 1), g = gradLoss (per row
// for "none"), nll = g * (1 - ls) / d * mask * weight[y_n] and smooth = g /
// d * ls / C * mask: out[n, c] = p * nll - (c == y_n) * nll + p * smooth *
// sum(weight) - smooth * weight[c], p = exp(logProb[n, c]). gradLoss is 0-D
// (the page) or [1] (torch_npu's loss) for "mean"/"sum", [N] for "none". The
// zloss inputs are checked and have no effect (the page: not supported yet).
EXPORT aclnnStatus aclnnCrossEntropyLossGradGetWorkspaceSize(
    const aclTensor* gradLoss, const aclTensor* logProb, const aclTensor* target,
    const aclTensor* weightOptional, const aclTensor* gradZlossOptional,
    const aclTensor* lseForZlossOptional, char* reductionOptional, int64_t ignoreIndex,
    double labelSmoothing, double lseSquareScaleForZloss, const aclTensor* out,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnCrossEntropyLossGrad";
  (void)lseSquareScaleForZloss;
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspaceSize));
  RETURN_IF_ERROR(CheckNotNull(op, "executor", executor));
  RETURN_IF_ERROR(CheckFloat32(op, "gradLoss", gradLoss));
  RETURN_IF_ERROR(CheckFloat32(op, "logProb", logProb));
  RETURN_IF_ERROR(CheckNotNull(op, "target", target));
  RETURN_IF_ERROR(CheckFloat32(op, "out", out));
  if (gradZlossOptional) RETURN_IF_ERROR(CheckFloat32(op, "gradZlossOptional", gradZlossOptional));
  if (lseForZlossOptional)
    RETURN_IF_ERROR(CheckFloat32(op, "lseForZlossOptional", lseForZlossOptional));
  RETURN_IF_ERROR(CheckClasses(op, "logProb", logProb, target, weightOptional));
  Reduction reduction;
  RETURN_IF_ERROR(ParseReduction(op, reductionOptional, &reduction));
  if (!(labelSmoothing >= 0 && labelSmoothing <= 1))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: labelSmoothing %g is outside [0, 1]", op, labelSmoothing);
  const int64_t n = logProb->dims[0], c = logProb->dims[1];
  if (reduction == Reduction::kNone) {
    RETURN_IF_ERROR(CheckShape(op, "gradLoss", gradLoss, {n}));
  } else if (gradLoss->dims != Dims{1}) {
    RETURN_IF_ERROR(CheckShape(op, "gradLoss", gradLoss, {}));
  }
  RETURN_IF_ERROR(CheckShape(op, "out", out, logProb->dims));
  Kernel kernel = [=](const std::vector<Slot>& in, const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, out));
    const float *grad = Floats(in[0]), *log_prob = Floats(in[1]);
    const Dense weight(in[3]);
    double d = 1, weight_sum = 0;
    std::vector<int64_t> t(n);
    std::vector<double> w(n);
    for (int64_t r = 0; r < n; ++r)
      RETURN_IF_ERROR(RowClass(op, in[2], weight, r, c, ignoreIndex, &t[r], &w[r]));
    if (reduction == Reduction::kMean) {
      d = 0;
      for (int64_t r = 0; r < n; ++r) d += w[r];
    }
    for (int64_t j = 0; j < c; ++j) weight_sum += weight.get() ? weight[j] : 1.0;
    float* dx = Floats(out[0]);
    for (int64_t r = 0; r < n; ++r) {
      const double g = grad[reduction == Reduction::kNone ? r : 0];
      const bool kept = t[r] != ignoreIndex;
      const double nll = kept ? g * (1 - labelSmoothing) / d * w[r] : 0.0;
      const double smooth = kept ? g / d * labelSmoothing / c : 0.0;
      for (int64_t j = 0; j < c; ++j) {
        const double p = std::exp(double(log_prob[r * c + j]));
        const double wj = weight.get() ? weight[j] : 1.0;
        dx[r * c + j] = float(p * nll - (kept && j == t[r] ? nll : 0.0) + p * smooth * weight_sum -
                              smooth * wj);
      }
    }
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(gradLoss), SlotOf(logProb), SlotOf(target), SlotOf(weightOptional),
                           SlotOf(gradZlossOptional), SlotOf(lseForZlossOptional)},
                      {SlotOf(out)}, std::move(kernel), workspaceSize, executor);
}

JAX_ACLNN_TEST_SECOND_PHASE(RotaryPositionEmbedding)
JAX_ACLNN_TEST_SECOND_PHASE(RotaryPositionEmbeddingGrad)
JAX_ACLNN_TEST_SECOND_PHASE(CrossEntropyLoss)
JAX_ACLNN_TEST_SECOND_PHASE(CrossEntropyLossGrad)
