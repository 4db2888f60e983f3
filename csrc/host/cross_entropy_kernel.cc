// The cross-entropy kernels: RunCrossEntropyLoss and RunCrossEntropyLossGrad
// (kernels.h), a row of input (N, C) at a time, a chunk of it at a time
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

float MaxOf(const float* x, int64_t n, float m) {
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// sum exp(x[j] - m) (exp(-inf) = 0; NaN where an x is NaN or, m being
// +inf, +inf: the row's logProb all NaN, as log_softmax gives). Meanwhile
// it prefetches the cache lines of `next`, n elements of `size` bytes
// that the row's logProb pass writes after the sum (null: none; a plain
// prefetch where the target lacks PREFETCHW, as x86-64-v3/v4 do: a line
// no other core holds still arrives writable): the exponentials'
// arithmetic then hides their reads, which stalled that pass's stores
// (float32 at (32, 32000): half of LossRow's time, perf).
float SumExp(const float* x, int64_t n, float m, const char* next, int64_t size) {
  return SumOfLanes(n, [&](int64_t j, auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, Vec>) {
      if (next != nullptr) __builtin_prefetch(next + j * size, 1, 3);
    }
    return ExpOrZero(At<ACL_FLOAT, T>(x, j) - m);
  });
}

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
float LossRow(const View& input, const View& target, const float* weight,
              const CrossEntropyAttrs& a, const View& log_prob, int64_t c, int64_t r,
              float* w) {
  alignas(64) float buf[kChunk], out[kChunk];
  const Row x = RowOf(input, 1, r), lp = RowOf(log_prob, 1, r);
  float m = -kInf;
  for (int64_t k = 0; k < c; k += kChunk) {
    const int64_t len = std::min(kChunk, c - k);
    m = MaxOf(x.Load(k, len, buf), len, m);
  }
  float sum = 0.0f;
  if (m != -kInf && m == m) {
    for (int64_t k = 0; k < c; k += kChunk) {
      const int64_t len = std::min(kChunk, c - k);
      const char* next = lp.stride == 1 ? lp.At(k) : nullptr;
      sum += SumExp(x.Load(k, len, buf), len, m, next, ElementSize(log_prob.dtype));
    }
  }
  // a row of -inf (or with +inf or NaN): NaN, as log_softmax gives
  const float log_sum = m == -kInf ? std::numeric_limits<float>::quiet_NaN() : std::log(sum);
  const float ls = a.label_smoothing;
  float smooth = 0.0f;
  for (int64_t k = 0; k < c; k += kChunk) {
    const int64_t len = std::min(kChunk, c - k);
    const float* xp = x.Load(k, len, buf);
    float* o = lp.Out(k, out);
    float s = 0.0f;
    if (ls > 0.0f && weight != nullptr) {
      const float* wk = weight + k;
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
  int64_t t;
  *w = ClassWeight(target, weight, c, a.ignore_index, r, &t);
  if (t == a.ignore_index) return 0.0f;
  if (*w != *w) return *w;
  float loss = 0.0f;
  if (ls < 1.0f) {
    float picked;
    LoadAsFloat(input.dtype, x.At(t), 1, 1, &picked);
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
  ForEachRow(n, c, log_prob, stream, [&](int64_t r) {
    float wr;
    const float l = LossRow(input, target, w, a, log_prob, c, r, &wr);
    if (none) {
      StoreFromFloat(loss.dtype, &l, 1, out.At(r), 1);
    } else {
      losses[r] = l;
      weights[r] = wr;
    }
  });
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
