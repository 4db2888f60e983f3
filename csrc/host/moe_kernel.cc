// The mixture-of-experts routing kernels (kernels.h; first phases in
// csrc/ops/moe.cc): the gating's softmax and top k per row, the
// permutation's stable counting sort by expert (O(T * k + E), no
// comparisons) and its rows copied in parallel, and the gathers and
// scatters of the unpermute and the gradients, each a row of H at a time
// in float32 (half-precision rows converted as row_kernels.h does). Each
// parallel loop is the provider's ParallelFor; each task writes its own
// rows. Indices out of range are skipped, never followed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "host/dtype.h"
#include "host/kernels.h"
#include "host/parallel.h"
#include "host/row_kernels.h"

// Compiled once per CPU target (CMakeLists.txt), each copy in its own
// namespace; dispatch.cc picks one at run time.
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

// Element i of a contiguous int32 or int64 view, clamped to int32.
inline int64_t IndexAt(const View& v, int64_t i) {
  const int64_t value = v.dtype == ACL_INT64 ? static_cast<const int64_t*>(v.data)[i]
                                             : static_cast<const int32_t*>(v.data)[i];
  return std::clamp<int64_t>(value, std::numeric_limits<int32_t>::min(),
                             std::numeric_limits<int32_t>::max());
}

// Whether element a of v comes before element b in a top k: the larger
// first, NaN above every number, equal values in index order (as
// jax.lax.top_k orders them). A strict weak order even with NaNs.
inline bool Before(const float* v, int32_t a, int32_t b) {
  const bool na = std::isnan(v[a]), nb = std::isnan(v[b]);
  if (na != nb) return na;
  if (!na && v[a] != v[b]) return v[a] > v[b];
  return a < b;
}

// softmax of v[0, n) in place, in float32, the largest value subtracted
// (jax.nn.softmax's formula).
void Softmax(float* v, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, v[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += v[i] = std::exp(v[i] - m);
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) v[i] *= inv;
}

// One stable counting-sort pass: the choices (in[0, n), or 0..n-1 where in
// is null) into out, ordered by digit(choice) < buckets; count holds
// buckets + 1 counters.
template <typename Digit>
void CountingPass(int64_t n, const Digit& digit, int64_t buckets, const int32_t* in,
                  int32_t* out, int32_t* count) {
  std::fill_n(count, buckets + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++count[digit(in ? in[i] : i) + 1];
  for (int64_t b = 0; b < buckets; ++b) count[b + 1] += count[b];
  for (int64_t i = 0; i < n; ++i) {
    const int32_t c = in ? in[i] : static_cast<int32_t>(i);
    out[count[digit(c)]++] = c;
  }
}

// The rows [0, rows) of a contiguous output of rows of n elements, split
// into tasks (RowTasks; `work` elements read per row), each with its own
// float buffers (`buffers` of `size` floats) and walking its rows in
// prefaulted pieces (RowsInPieces): body(r, buffers).
template <typename Body>
void ForEachRowWithBuffers(int64_t rows, int64_t n, int64_t work, const View& out, int buffers,
                           int64_t size, const JaxAclnnHostStream* stream, const Body& body) {
  if (rows == 0) return;
  const int64_t piece = PieceBytes(out);
  const int64_t tasks = RowTasks(rows, work, stream);
  ParallelFor(stream, tasks, [&](int64_t t) {
    std::vector<float> storage(static_cast<size_t>(buffers * std::max<int64_t>(size, 1)));
    float* bufs = storage.data();
    RowsInPieces(out, n, piece, rows * t / tasks, rows * (t + 1) / tasks,
                 [&](int64_t r) { body(r, bufs); });
  });
}

// Whether sortedIndices' value `row` names a row of `rows`.
inline bool InRange(int64_t row, int64_t rows) { return row >= 0 && row < rows; }

}  // namespace

void RunMoeGating(const View& x, const View* finished, int64_t k, bool renorm, const View& y,
                  const View& ids, const JaxAclnnHostStream* stream) {
  const int64_t e = x.dims[x.rank - 1];
  const int64_t rows = e == 0 ? 0 : x.NumElements() / e;
  if (rows == 0 || k == 0) return;
  const auto* done = finished ? static_cast<const uint8_t*>(finished->data) : nullptr;
  auto* out_ids = static_cast<int32_t*>(ids.data);
  const int64_t tasks = RowTasks(rows, e, stream);
  ParallelFor(stream, tasks, [&](int64_t t) {
    std::vector<float> v(static_cast<size_t>(e)), top(static_cast<size_t>(k));
    std::vector<int32_t> order(static_cast<size_t>(e));
    for (int64_t r = rows * t / tasks; r < rows * (t + 1) / tasks; ++r) {
      const float* row = RowOf(x, x.rank - 1, r).Load(0, e, v.data());
      if (row != v.data()) std::copy_n(row, e, v.data());
      if (!renorm) Softmax(v.data(), e);  // top k of the softmax
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return Before(v.data(), a, b); });
      for (int64_t j = 0; j < k; ++j) top[j] = v[order[j]];
      if (renorm) Softmax(top.data(), k);  // softmax of the top k
      const Row out = RowOf(y, y.rank - 1, r);
      StoreFromFloat(y.dtype, top.data(), k, out.At(0), 1);
      const bool finished_row = done != nullptr && done[r] != 0;
      for (int64_t j = 0; j < k; ++j)
        out_ids[r * k + j] = finished_row ? static_cast<int32_t>(e) : order[j];
    }
  });
}

void RunMoePermute(const View& tokens, const View& indices, const View& permuted,
                   const View& sorted, void* workspace, const JaxAclnnHostStream* stream) {
  const int64_t n = indices.NumElements();
  if (n == 0) return;
  const int64_t k = n / tokens.dims[0], h = tokens.dims[1];
  auto* order = static_cast<int32_t*>(workspace);
  int32_t* scratch = order + n;
  int32_t* count = scratch + n;
  // The experts' range [lo, hi]: one pass over it when it has at most
  // kMoeSortBuckets values (any realistic number of experts), else two, a
  // 16-bit digit each (a radix sort: ids CANN refuses, sorted by value all
  // the same).
  int64_t lo = std::numeric_limits<int32_t>::max(), hi = std::numeric_limits<int32_t>::min();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = IndexAt(indices, i);
    lo = std::min(lo, id);
    hi = std::max(hi, id);
  }
  const auto key = [&](int64_t i) { return static_cast<uint32_t>(IndexAt(indices, i) - lo); };
  if (hi - lo < kMoeSortBuckets) {
    CountingPass(n, key, hi - lo + 1, nullptr, order, count);
  } else {
    CountingPass(n, [&](int64_t i) { return key(i) & 0xffffu; }, kMoeSortBuckets, nullptr,
                 scratch, count);
    CountingPass(n, [&](int64_t i) { return key(i) >> 16; }, kMoeSortBuckets, scratch, order,
                 count);
  }
  auto* sorted_out = static_cast<int32_t*>(sorted.data);
  const int64_t rows = permuted.dims[0];  // the first numOutTokens of the n
  const int64_t bytes = h * ElementSize(tokens.dtype);
  const char* src = static_cast<const char*>(tokens.data);
  char* dst = static_cast<char*>(permuted.data);
  ForEachRow(rows, h, permuted, stream, [&](int64_t r) {
    sorted_out[order[r]] = static_cast<int32_t>(r);
    if (bytes > 0) std::memcpy(dst + r * bytes, src + order[r] / k * bytes, bytes);
  });
  for (int64_t r = rows; r < n; ++r) sorted_out[order[r]] = static_cast<int32_t>(r);
}

void RunMoeGatherSum(const View& data, const View& sorted, const View* probs, int64_t k,
                     const View& out, const JaxAclnnHostStream* stream) {
  const int64_t t = out.dims[0], h = out.dims[1], n = data.dims[0];
  if (h == 0) return;
  const auto* idx = static_cast<const int32_t*>(sorted.data);
  // buffers: the sum, a row of data, the row's k weights
  const int64_t size = std::max(h, k);
  ForEachRowWithBuffers(t, h, h * k, out, 3, size, stream, [&](int64_t r, float* bufs) {
    float* acc = bufs;
    float* row_buf = bufs + size;
    float* w = bufs + 2 * size;
    if (probs != nullptr) {
      const float* p = RowOf(*probs, 1, r).Load(0, k, w);
      if (p != w) std::copy_n(p, k, w);
    } else {
      std::fill_n(w, k, 1.0f);
    }
    std::fill_n(acc, h, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = idx[r * k + j];
      if (!InRange(row, n)) continue;
      const float* x = RowOf(data, 1, row).Load(0, h, row_buf);
      const float wj = w[j];
#pragma omp simd
      for (int64_t c = 0; c < h; ++c) acc[c] += wj * x[c];
    }
    StoreFromFloat(out.dtype, acc, h, RowOf(out, 1, r).At(0), 1);
  });
}

void RunMoeUnpermuteGrad(const View& x, const View& dy, const View& sorted, const View* probs,
                         const View& dx, const View* dprobs, void* workspace,
                         const JaxAclnnHostStream* stream) {
  const int64_t n = dx.dims[0], h = dx.dims[1];
  const int64_t k = probs != nullptr ? probs->dims[1] : 1, t = n / k;
  if (n == 0) return;
  const auto* idx = static_cast<const int32_t*>(sorted.data);
  // The choice each row of dx receives (-1: none), so that each task
  // writes its own rows, whatever sortedIndices holds.
  auto* inverse = static_cast<int32_t*>(workspace);
  std::fill_n(inverse, n, -1);
  for (int64_t c = 0; c < n; ++c)
    if (InRange(idx[c], n)) inverse[idx[c]] = static_cast<int32_t>(c);
  // dx[row] = dy[c / k] * probs[c]; buffers: the result, a row of dy
  if (h > 0)
    ForEachRowWithBuffers(n, h, h, dx, 2, h, stream, [&](int64_t r, float* bufs) {
      const Row out = RowOf(dx, 1, r);
      const int32_t c = inverse[r];
      if (c < 0) {
        std::memset(out.At(0), 0, static_cast<size_t>(h * ElementSize(dx.dtype)));
        return;
      }
      float w = 1.0f;
      if (probs != nullptr) LoadAsFloat(probs->dtype, RowOf(*probs, 1, c / k).At(c % k), 1, 1, &w);
      const float* g = RowOf(dy, 1, c / k).Load(0, h, bufs + h);
      float* res = out.Out(0, bufs);
#pragma omp simd
      for (int64_t j = 0; j < h; ++j) res[j] = g[j] * w;
      out.Store(0, h, res);
    });
  if (dprobs == nullptr || t == 0) return;
  // dprobs[r, j] = dy[r] . x[sorted[r * k + j]]; buffers: a row of dy, of
  // x, the k results
  const int64_t size = std::max(h, k);
  ForEachRowWithBuffers(t, k, h * k, *dprobs, 3, size, stream, [&](int64_t r, float* bufs) {
    const float* g = RowOf(dy, 1, r).Load(0, h, bufs);
    float* d = bufs + 2 * size;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = idx[r * k + j];
      d[j] = 0.0f;
      if (!InRange(row, n)) continue;
      const float* xs = RowOf(x, 1, row).Load(0, h, bufs + size);
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < h; ++c) s += g[c] * xs[c];
      d[j] = s;
    }
    StoreFromFloat(dprobs->dtype, d, k, RowOf(*dprobs, 1, r).At(0), 1);
  });
}

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
