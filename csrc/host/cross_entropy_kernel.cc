// The cross-entropy kernels: RunCrossEntropyLoss and RunCrossEntropyLossGrad
// (kernels.h), a row of input (N, C) at a time: the forward's in registers
// where its rows are contiguous float32, float16 or bfloat16, else (and the
// gradient's) a chunk of it at a time through float buffers
// (row_kernels.h). Every sum over the classes and over the rows is kept in
// float32, as CANN's kernels keep them (cross_entropy_loss_fp32.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "host/dtype.h"
#include "host/half_runs.h"
#include "host/kernels.h"
#include "host/parallel.h"
#include "host/pointwise_kernel.h"
#include "host/row_kernels.h"
#include "host/simd.h"

// Compiled once per CPU target (CMakeLists.txt), each copy in its own
// namespace; dispatch.cc picks one at run time.
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Memory a row's loop touches ahead of its reads or writes: elements of
// `size` bytes from `at` (null: none).
struct Ahead {
  const char* at;
  int64_t size;
};

// sum exp(term(j) - m) over a row of n elements (SumOfLanes), m finite and
// the largest term, none NaN (LossRow: else the row's logProb is all NaN,
// as log_softmax's is, without this sum): each term - m is in [-inf, 0],
// ExpOfNonPositive's domain. Meanwhile it prefetches the cache lines of
// `out`, that the row's logProb pass writes after the sum (a plain
// prefetch where the target lacks PREFETCHW, as x86-64-v3/v4 do: a line
// no other core holds still arrives writable), and of `in`, the next row's
// input, which the next row's max pass reads: the exponentials'
// arithmetic then hides reads that stalled that pass's stores (float32 at
// (32, 32000): half of LossRow's time, perf) and the next max pass's
// loads (7-14% of the forward's time on x86-64-v3).
template <typename Term>
float SumOfExponentials(int64_t n, float m, Ahead out, Ahead in, const Term& term) {
  return SumOfLanes(n, [&](int64_t j, auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, Vec>) {
      if (out.at != nullptr) __builtin_prefetch(out.at + j * out.size, 1, 3);
      if (in.at != nullptr) __builtin_prefetch(in.at + j * in.size, 0, 2);
    }
    return ExpOfNonPositive(term(j, t) - m);
  });
}

// The largest of a contiguous row of n elements of type D at x; NaN where
// one is NaN.
template <aclDataType D>
float MaxOf(const void* x, int64_t n) {
  Vec mv = Splat<Vec>(-kInf);
  VecI nan_lanes{};
  float m = -kInf;
  bool nan = false;
  ForLanes(n, [&](int64_t j, auto t) {
    using T = decltype(t);
    const T v = At<D, T>(x, j);
    if constexpr (std::is_same_v<T, Vec>) {
      mv = v > mv ? v : mv;
      nan_lanes |= v != v;
    } else {
      m = v > m ? v : m;
      nan = nan || v != v;
    }
  });
  for (int i = 0; i < kLanes; ++i) {
    m = mv[i] > m ? mv[i] : m;
    nan = nan || nan_lanes[i] != 0;
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

// A row's passes for LossRow, through float buffers a chunk at a time (any
// dtype and stride): its max (NaN where an element is NaN), its sum of
// exponentials, and its logProb written, returning the sum of logProb
// (weighted by w where w is not null) for label smoothing.
struct BufferedRow {
  Row x, lp;
  int64_t c;
  Ahead next;  // the next row's input, where contiguous

  float Max() const {
    alignas(64) float buf[kChunk];
    float m = -kInf;
    for (int64_t k = 0; k < c; k += kChunk) {
      const int64_t len = std::min(kChunk, c - k);
      const float chunk = MaxOf<ACL_FLOAT>(x.Load(k, len, buf), len);
      if (chunk != chunk) return chunk;
      m = chunk > m ? chunk : m;
    }
    return m;
  }
  float SumExp(float m) const {
    alignas(64) float buf[kChunk];
    float sum = 0.0f;
    for (int64_t k = 0; k < c; k += kChunk) {
      const int64_t len = std::min(kChunk, c - k);
      const float* xp = x.Load(k, len, buf);
      const Ahead out{lp.stride == 1 ? lp.At(k) : nullptr, ElementSize(lp.v->dtype)};
      const Ahead in{next.at != nullptr ? next.at + k * next.size : nullptr, next.size};
      sum += SumOfExponentials(
          len, m, out, in, [&](int64_t j, auto t) { return At<ACL_FLOAT, decltype(t)>(xp, j); });
    }
    return sum;
  }
  float LogProb(float m, float log_sum, const float* w) const {
    alignas(64) float buf[kChunk], out[kChunk];
    float smooth = 0.0f;
    for (int64_t k = 0; k < c; k += kChunk) {
      const int64_t len = std::min(kChunk, c - k);
      const float* xp = x.Load(k, len, buf);
      float* o = lp.Out(k, out);
      float s = 0.0f;
      if (w != nullptr) {
        const float* wk = w + k;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < len; ++j) {
          o[j] = (xp[j] - m) - log_sum;
          s += wk[j] * o[j];
        }
      } else {
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < len; ++j) {
          o[j] = (xp[j] - m) - log_sum;
          s += o[j];
        }
      }
      smooth += s;
      lp.Store(k, len, o);
    }
    return smooth;
  }
};

// BufferedRow's passes on contiguous rows of a type in registers
// (row_kernels.h): float16 and bfloat16 read and written a vector at a
// time, where the buffers' conversions took a third of the bfloat16
// forward's time at (32, 32000) (perf).
template <aclDataType D>
struct RowInRegisters {
  const char* x;
  char* lp;
  int64_t c;
  Ahead next;

  float Max() const { return MaxOf<D>(x, c); }
  float SumExp(float m) const {
    return SumOfExponentials(
        c, m, Ahead{lp, ElementSize(D)}, next,
        [&](int64_t j, auto t) { return At<D, decltype(t)>(x, j); });
  }
  float LogProb(float m, float log_sum, const float* w) const {
    return SumOfLanes(c, [&](int64_t j, auto t) {
      using T = decltype(t);
      const T o = (At<D, T>(x, j) - m) - log_sum;
      Put<D>(lp, j, o);
      return w != nullptr ? At<ACL_FLOAT, T>(w, j) * o : o;
    });
  }
};

// Row r's class (int32 or int64 target).
int64_t TargetAt(const View& target, int64_t r) {
  const char* p = static_cast<const char*>(target.data) +
                  r * target.strides[0] * ElementSize(target.dtype);
  return target.dtype == ACL_INT64 ? *reinterpret_cast<const int64_t*>(p)
                                   : *reinterpret_cast<const int32_t*>(p);
}

// Row r's class weight: 0 where its target is ignoreIndex; NaN for a class
// outside [0, C) that is not (CANN's page: undefined; its loss NaN, its
// gradient 0).
float ClassWeight(const View& target, const float* weight, int64_t c, int64_t ignore_index,
                  int64_t r, int64_t* t) {
  *t = TargetAt(target, r);
  if (*t == ignore_index) return 0.0f;
  if (*t < 0 || *t >= c) return std::numeric_limits<float>::quiet_NaN();
  return weight != nullptr ? weight[*t] : 1.0f;
}

// Row r: logProb = (x - max) - log(sum exp(x - max)) (not x - lse: max +
// log(sum) rounds the log away where |max| is large), and its loss
// (1 - ls) * -w[t] * logProb[t] + ls / C * -sum_c w[c] * logProb[c], 0 where
// ignored. A term whose factor is 0 is left out (never 0 * -inf: a -inf
// logit's logProb is -inf). Returns the loss and sets *w to w[t].
template <typename Walk>
float LossRow(const Walk& row, const View& input, const View& target, const float* weight,
              const CrossEntropyAttrs& a, int64_t c, int64_t r, float* w) {
  const float m = row.Max();
  // m NaN or +inf: sum 0, log_sum -inf, and logProb (x - m) + inf NaN
  const float sum = std::isfinite(m) ? row.SumExp(m) : 0.0f;
  // a row of -inf: NaN, as log_softmax gives
  const float log_sum = m == -kInf ? std::numeric_limits<float>::quiet_NaN() : std::log(sum);
  const float ls = a.label_smoothing;
  const float smooth = row.LogProb(m, log_sum, ls > 0.0f ? weight : nullptr);
  int64_t t;
  *w = ClassWeight(target, weight, c, a.ignore_index, r, &t);
  if (t == a.ignore_index) return 0.0f;
  if (*w != *w) return *w;
  float loss = 0.0f;
  if (ls < 1.0f) {
    float picked;
    LoadAsFloat(input.dtype, RowOf(input, 1, r).At(t), 1, 1, &picked);
    loss -= (1.0f - ls) * *w * ((picked - m) - log_sum);
  }
  if (ls > 0.0f) loss -= ls / static_cast<float>(c) * smooth;
  return loss;
}

}  // namespace

uint64_t CrossEntropyWorkspaceSize(const View& input, bool forward) {
  // the weight's floats, and the forward's losses and weights per row
  const int64_t n = input.dims[0], c = input.dims[1];
  return static_cast<uint64_t>(c + (forward ? 2 * n : 0)) * sizeof(float);
}

void RunCrossEntropyLoss(const View& input, const View& target, const View* weight,
                         const CrossEntropyAttrs& a, const View& loss, const View& log_prob,
                         void* workspace, const JaxAclnnHostStream* stream) {
  const int64_t n = input.dims[0], c = input.dims[1];
  float* ws = static_cast<float*>(workspace);
  const float* w = weight != nullptr ? ContiguousFloats(*weight, c, ws) : nullptr;
  float* losses = ws + c;
  float* weights = losses + n;
  const bool none = a.reduction == Reduction::kNone;
  const Row out = RowOf(loss, 0, 0);
  // row r's loss through the walk row_at(r) gives
  const auto rows = [&](const auto& row_at) {
    ForEachRow(n, c, log_prob, stream, [&](int64_t r) {
      float wr;
      const float l = LossRow(row_at(r), input, target, w, a, c, r, &wr);
      if (none) {
        StoreFromFloat(loss.dtype, &l, 1, out.At(r), 1);
      } else {
        losses[r] = l;
        weights[r] = wr;
      }
    });
  };
  const int64_t size = ElementSize(input.dtype);
  if (!(AllContiguous(input.dtype, {&input, &log_prob}) &&
        WithRowType(input.dtype, [&](auto type) {
          rows([&](int64_t r) {
            constexpr aclDataType D = type.value;
            return RowInRegisters<D>{
                RowData<D>(input, c, r), RowData<D>(log_prob, c, r), c,
                Ahead{r + 1 < n ? RowData<D>(input, c, r + 1) : nullptr, size}};
          });
        }))) {
    rows([&](int64_t r) {
      const Row x = RowOf(input, 1, r);
      const bool next = x.stride == 1 && r + 1 < n;
      return BufferedRow{x, RowOf(log_prob, 1, r), c,
                         Ahead{next ? RowOf(input, 1, r + 1).At(0) : nullptr, size}};
    });
  }
  if (none) return;
  // in row order, float32: the same bits for any thread count
  float total = 0.0f, weight_total = 0.0f;
  for (int64_t r = 0; r < n; ++r) {
    total += losses[r];
    weight_total += weights[r];
  }
  const float result = a.reduction == Reduction::kSum ? total : total / weight_total;
  StoreFromFloat(loss.dtype, &result, 1, out.At(0), 1);
}

namespace {

// A row of the gradient: its class t, whether it counts (not ignored, its
// class in range) and the formula's factors (RunCrossEntropyLossGrad).
struct GradRow {
  int64_t t;
  bool kept;
  float scale, smooth, nll;
};

// Element (T = float) or vector (T = Vec) of a kept row's gradient from its
// logProb lp and class weight wc: exp(lp) * scale - smooth * wc (NaN kept: a
// row of NaN logits has a NaN gradient, as exp(logProb) gives on CANN).
template <typename T>
inline T GradOf(T lp, T wc, const GradRow& g) {
  return ExpOrZero(lp) * g.scale - g.smooth * wc;
}

// Row r of the gradient through float buffers, a chunk at a time (any
// dtype and stride). dx may be log_prob's own memory, in its layout
// (jax_aclnn.nn aliases them on the CPU): each chunk is read before that
// chunk is written.
void CrossEntropyGradRow(const View& log_prob, const float* w, const GradRow& g, int64_t c,
                         const View& dx, int64_t r) {
  alignas(64) float buf[kChunk], out[kChunk];
  const Row lp = RowOf(log_prob, 1, r), o = RowOf(dx, 1, r);
  for (int64_t k = 0; k < c; k += kChunk) {
    const int64_t len = std::min(kChunk, c - k);
    const float* lpp = lp.Load(k, len, buf);
    float* op = o.Out(k, out);
    if (!g.kept) {
      std::fill(op, op + len, 0.0f);
    } else {
      ForLanes(len, [&](int64_t j, auto x) {
        using T = decltype(x);
        const T wc = w != nullptr ? At<ACL_FLOAT, T>(w + k, j) : Splat<T>(1.0f);
        Put<ACL_FLOAT>(op, j, GradOf(At<ACL_FLOAT, T>(lpp, j), wc, g));
      });
      if (g.t >= k && g.t < k + len) op[g.t - k] -= g.nll;
    }
    o.Store(k, len, op);
  }
}

}  // namespace

// out[n, c] = p * (nll + smooth * sum(w)) - smooth * w[c] - (c == t) * nll,
// p = exp(logProb), nll = g * (1 - ls) / d * w[t], smooth = g * ls / (d * C),
// d = sum of the kept rows' w[t] for "mean" (else 1); an ignored row's 0.
void RunCrossEntropyLossGrad(const View& grad_loss, const View& log_prob, const View& target,
                             const View* weight, const CrossEntropyAttrs& a, const View& dx,
                             void* workspace, const JaxAclnnHostStream* stream) {
  const int64_t n = log_prob.dims[0], c = log_prob.dims[1];
  const float* w = weight != nullptr
                       ? ContiguousFloats(*weight, c, static_cast<float*>(workspace))
                       : nullptr;
  float d = 1.0f, weight_sum = static_cast<float>(c);
  if (a.reduction == Reduction::kMean) {
    d = 0.0f;
    for (int64_t r = 0; r < n; ++r) {
      int64_t t;
      d += ClassWeight(target, w, c, a.ignore_index, r, &t);
    }
  }
  if (w != nullptr) {
    weight_sum = 0.0f;
    for (int64_t k = 0; k < c; ++k) weight_sum += w[k];
  }
  const float ls = a.label_smoothing;
  const bool none = a.reduction == Reduction::kNone;
  const Row g_row = RowOf(grad_loss, 0, 0);
  const auto grad_row = [&](int64_t r) {
    GradRow g;
    const float wt = ClassWeight(target, w, c, a.ignore_index, r, &g.t);
    float gl;
    LoadAsFloat(grad_loss.dtype, g_row.At(none ? r : 0), 1, 1, &gl);
    g.kept = g.t != a.ignore_index && wt == wt;
    g.nll = g.kept ? gl * (1.0f - ls) / d * wt : 0.0f;
    g.smooth = g.kept ? gl * ls / (d * static_cast<float>(c)) : 0.0f;
    g.scale = g.nll + g.smooth * weight_sum;
    return g;
  };
  ForEachRow(n, c, dx, stream,
             [&](int64_t r) { CrossEntropyGradRow(log_prob, w, grad_row(r), c, dx, r); });
}

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
