// FlashAttention on the host: RunFlashAttention and RunFlashAttentionGrad
// (kernels.h), blocked with an online softmax (FlashAttention-2): no score
// matrix larger than a block of queries by a block of keys is ever held,
// so the memory is linear in the sequence lengths. The products of a block
// (S^T = K Q^T, O += P V, and the backward's) are Eigen's single-threaded
// float32 GEMMs (gemm.h), one block task per iteration of the provider's
// ParallelFor; half-precision operands are converted to float32 a block at
// a time, and the softmax is computed in float32, as CANN's kernels do.
// A block's scores are held transposed, a key per row (S^T = K Q^T), so
// that the softmax runs a vector of query rows at a time: each row's max
// and sum are a lane of a vector, with no sum or max across a vector's
// lanes (on the 64-key rows of attention at 64 tokens, those reductions
// and the per-row bookkeeping around them were half the forward's time).
//
// Semantics (the test provider's naive kernels, csrc/testing/
// attention_operators.cc, and CANN's pages): S = scale * (Q K^T + pse),
// keys masked where attenMask is nonzero (sparse modes 0 and 1) or outside
// the band or causal triangle the sparse mode defines (0: preTokens/
// nextTokens when a mask is given, 2: j <= i, 3: j <= i + S - T, 4: the
// band about that diagonal), P = softmax(S), Y = P V. A row with no key
// computed has Y = 0, softmaxMax = -FLT_MAX and softmaxSum = 0, and no
// gradient.
#include <Eigen/Core>
#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "host/dtype.h"
#include "host/gemm.h"
#include "host/kernels.h"
#include "host/parallel.h"
#include "host/pointwise_kernel.h"
#include "host/row_kernels.h"

// Compiled once per CPU target (CMakeLists.txt), each copy in its own
// namespace; dispatch.cc picks one at run time.
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

// Queries and keys per block: the forward's, the backward's. (Measured at
// T = S = 4096, H = 64: the CPU time is within noise from 64 to 128
// queries and 128 to 512 keys, the products dominate it; blocks of 32
// queries took the forward 17% longer.)
constexpr int64_t kForwardQueries = 64;
constexpr int64_t kForwardKeys = 256;
constexpr int64_t kBackwardQueries = 64;
constexpr int64_t kBackwardKeys = 128;

// The queries of a block for a sequence of t: half a block where the
// sequence is at most two (a causal block's products stop at its last row's
// key, so the halves skip a quarter of them: at T = 64 with D = 16 the
// forward took 0.9x the time, the backward 0.8x).
int64_t QueryRows(int64_t t, int64_t block) { return t <= 2 * block ? block / 2 : block; }
constexpr float kInf = std::numeric_limits<float>::infinity();

using ArrayMap = Eigen::Map<Eigen::ArrayXf>;

char* Address(const View& v, int64_t offset) {
  return static_cast<char*>(v.data) + offset * ElementSize(v.dtype);
}

// A task's float buffer, left uninitialized (each product writes its block
// before it is read, but for the padding lanes past a block's query rows,
// which the softmax reads and nothing uses after it; zeroing a
// vector of every block's size was a tenth of a small layer's time).
struct Floats {
  explicit Floats(int64_t n) : data(new float[static_cast<size_t>(n)]) {}
  float* get() const { return data.get(); }
  std::unique_ptr<float[]> data;
};

// Rows [r0, r0 + rows) of head h in batch b of a BSND tensor, as floats:
// the memory itself where it is float32 with unit stride along D, else
// converted into buf.
FloatMatrix Rows(const View& t, int64_t b, int64_t h, int64_t r0, int64_t rows,
                 std::vector<float>* buf) {
  const int64_t d = t.dims[3];
  const int64_t first = b * t.strides[0] + r0 * t.strides[1] + h * t.strides[2];
  if (t.dtype == ACL_FLOAT && t.strides[3] == 1)
    return {reinterpret_cast<const float*>(Address(t, first)), rows, d, t.strides[1], 1};
  buf->resize(static_cast<size_t>(rows * d));
  float* to = buf->data();
  const auto in_registers = [&](auto type) {  // a vector at a time (row_kernels.h)
    constexpr aclDataType D = decltype(type)::value;
    for (int64_t r = 0; r < rows; ++r) {
      const char* row = Address(t, first + r * t.strides[1]);
      ForLanes(d, [&](int64_t j, auto x) {
        Put<ACL_FLOAT>(to + r * d, j, At<D, decltype(x)>(row, j));
      });
    }
  };
  if (!(t.strides[3] == 1 && WithRowType(t.dtype, in_registers)))
    for (int64_t r = 0; r < rows; ++r)
      LoadAsFloat(t.dtype, Address(t, first + r * t.strides[1]), t.strides[3], d, to + r * d);
  return {to, rows, d, d, 1};
}

// Writes rows x d floats (row-major) to rows [r0, r0 + rows) of head h in
// batch b of a BSND tensor.
void StoreRows(const View& t, int64_t b, int64_t h, int64_t r0, int64_t rows, const float* src) {
  const int64_t d = t.dims[3];
  const int64_t first = b * t.strides[0] + r0 * t.strides[1] + h * t.strides[2];
  const auto in_registers = [&](auto type) {  // a vector at a time (row_kernels.h)
    constexpr aclDataType D = decltype(type)::value;
    for (int64_t r = 0; r < rows; ++r) {
      char* row = Address(t, first + r * t.strides[1]);
      ForLanes(d, [&](int64_t j, auto x) {
        Put<D>(row, j, At<ACL_FLOAT, decltype(x)>(src + r * d, j));
      });
    }
  };
  if (!(t.strides[3] == 1 && WithRowType(t.dtype, in_registers)))
    for (int64_t r = 0; r < rows; ++r)
      StoreFromFloat(t.dtype, src + r * d, d, Address(t, first + r * t.strides[1]), t.strides[3]);
}

// The row stride of a transposed block of `rows` query rows: whole vectors.
int64_t Padded(int64_t rows) { return (rows + kLanes - 1) / kLanes * kLanes; }

// The shapes, the optional pse and mask, and which keys each query sees.
struct Problem {
  int64_t b, t, n, d, s, kv, dv, group;
  const View* pse;
  const View* mask;
  AttentionParams p;
  // Element strides of the pse and the mask over (B, N, T, S): 0 where
  // broadcast.
  int64_t ps[4] = {}, ms[4] = {};

  Problem(const View& q, const View& k, const View& v, const View* pse_in, const View* mask_in,
          const AttentionParams& params)
      : b(q.dims[0]), t(q.dims[1]), n(q.dims[2]), d(q.dims[3]), s(k.dims[1]), kv(k.dims[2]),
        dv(v.dims[3]), group(q.dims[2] / k.dims[2]), pse(pse_in), mask(mask_in), p(params) {
    if (params.sparse >= 2) mask = nullptr;  // the compressed causal mask: not read
    if (pse != nullptr)
      for (int i = 0; i < 4; ++i) ps[i] = pse->dims[i] == 1 ? 0 : pse->strides[i];
    if (mask != nullptr) {
      const int shift = 4 - mask->rank;  // [T, S] as [1, 1, T, S]
      for (int i = shift; i < 4; ++i)
        ms[i] = mask->dims[i - shift] == 1 ? 0 : mask->strides[i - shift];
    }
  }

  // Keys [*lo, *hi] row i may see (before the explicit mask).
  void Band(int64_t i, int64_t* lo, int64_t* hi) const {
    int64_t a = 0, e = s - 1;
    const int64_t diag = i + s - t;
    switch (p.sparse) {
      case 0:
        if (mask != nullptr) a = i - p.pre, e = i + p.next;
        break;
      case 2: e = i; break;
      case 3: e = diag; break;
      case 4: a = diag - p.pre, e = diag + p.next; break;
      default: break;
    }
    *lo = std::max<int64_t>(a, 0);
    *hi = std::min<int64_t>(e, s - 1);
  }

  // The keys [*first, *last] that rows [i0, i0 + rows) see between them
  // (*last < *first: none).
  void Seen(int64_t i0, int64_t rows, int64_t* first, int64_t* last) const {
    *first = s, *last = -1;
    for (int64_t i = i0; i < i0 + rows; ++i) {
      int64_t lo, hi;
      Band(i, &lo, &hi);
      if (lo <= hi) *first = std::min(*first, lo), *last = std::max(*last, hi);
    }
  }

  // Whether a block of rows [i0, i0 + rows) sees any key in [j0, j1).
  bool Sees(int64_t i0, int64_t rows, int64_t j0, int64_t j1) const {
    for (int64_t i = i0; i < i0 + rows; ++i) {
      int64_t lo, hi;
      Band(i, &lo, &hi);
      if (lo <= hi && lo < j1 && hi >= j0) return true;
    }
    return false;
  }

  // The keys [lo[r], hi[r]] rows i0 + r see, r < ld, as int32 lanes: none
  // (lo 1, hi 0) for the lanes past `rows` and the rows `valid` rejects, and
  // where the band is empty (its bounds, 64-bit, may lie past int32's range:
  // preTokens of -2^31 + 1).
  template <typename Valid>
  void Bands(int64_t i0, int64_t rows, int64_t ld, int32_t* lo, int32_t* hi,
             const Valid& valid) const {
    for (int64_t r = 0; r < ld; ++r) {
      int64_t l = 1, h = 0;
      if (r < rows && valid(r)) Band(i0 + r, &l, &h);
      if (l > h) l = 1, h = 0;
      lo[r] = static_cast<int32_t>(l), hi[r] = static_cast<int32_t>(h);
    }
  }

  // Over a transposed block of scores (key j0 + jj, query row i0 + r at
  // st[jj * ld + r]: scale * K Q^T, the product's own scale), the scaled pse
  // added and the masked keys set to -inf, where each row sees the key.
  void AddPseAndMask(int64_t bi, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                     float* st, int64_t ld, float* buf) const {
    if (pse == nullptr && mask == nullptr) return;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      int64_t lo, hi;
      Band(i, &lo, &hi);
      const int64_t first = std::clamp<int64_t>(lo - j0, 0, cols);
      const int64_t len = std::clamp<int64_t>(hi - j0 + 1, first, cols) - first, j1 = j0 + first;
      if (len == 0) continue;
      float* a = st + first * ld + r;
      if (pse != nullptr) {
        LoadAsFloat(pse->dtype, Address(*pse, bi * ps[0] + h * ps[1] + i * ps[2] + j1 * ps[3]),
                    ps[3], len, buf);
        for (int64_t j = 0; j < len; ++j) a[j * ld] += buf[j] * p.scale;
      }
      if (mask != nullptr) {
        const auto* m = reinterpret_cast<const uint8_t*>(
            Address(*mask, bi * ms[0] + h * ms[1] + i * ms[2] + j1 * ms[3]));
        for (int64_t j = 0; j < len; ++j)
          if (m[j * ms[3]] != 0) a[j * ld] = -kInf;
      }
    }
  }
};

// A statistic of row (b, h, i): element 0 of its 8.
float* Stat(const View& v, int64_t b, int64_t h, int64_t i) {
  return reinterpret_cast<float*>(
      Address(v, b * v.strides[0] + h * v.strides[1] + i * v.strides[2]));
}

// A row's statistic x into its 8 elements, `stride` apart (one store where
// they are contiguous).
void StoreStat(float* to, int64_t stride, float x) {
  if (stride == 1)
    std::fill_n(to, 8, x);
  else
    for (int e = 0; e < 8; ++e) to[e * stride] = x;
}

// The lanes of vector v of a block's key bounds (Problem::Bands).
VecI BandLanes(const int32_t* a, int64_t v) {
  VecI x;
  std::memcpy(&x, a + v * kLanes, sizeof x);
  return x;
}

// The keys jj of a block of `cols` from j0 that some lane of vector v sees
// (lanes see keys [lo, hi], none where lo > hi), as [*first, *last]
// (*last < *first: none), with the weights of the transposed block st (ld
// floats per key) outside them set to 0 in the vector's lanes: no
// exponential is computed for those keys, a causal block's keys past a
// vector's last row, a sixth of the forward's exponentials at 64 tokens
// (32-query blocks) with AVX-512's 16 lanes, a quarter with AVX2's 8.
void SeenKeys(float* st, int64_t ld, const int32_t* lo, const int32_t* hi, int64_t v, int64_t j0,
              int64_t cols, int64_t* first, int64_t* last) {
  int64_t a = j0 + cols, e = j0 - 1;
  for (int64_t r = v * kLanes; r < (v + 1) * kLanes; ++r)
    if (lo[r] <= hi[r]) a = std::min<int64_t>(a, lo[r]), e = std::max<int64_t>(e, hi[r]);
  *first = std::clamp<int64_t>(a - j0, 0, cols);
  *last = std::min<int64_t>(e - j0, cols - 1);
  const auto zero = [&](int64_t from, int64_t to) {
    for (int64_t jj = from; jj < to; ++jj) Put<ACL_FLOAT>(st + jj * ld, v * kLanes, Vec{});
  };
  zero(0, *first);
  zero(std::max(*first, *last + 1), cols);
}

// One key block of the forward's online softmax, over a transposed block
// of `cols` keys from j0 (st, ld floats per key; rows see keys [lo, hi]),
// a vector of query rows at a time: each row's max is raised to the
// block's (NaN kept), st becomes the weights exp(s - max) where the row
// sees the key and 0 elsewhere (a masked key's exp(-inf) included, and a
// row whose every key so far is masked), and
// sum = sum * alpha + the weights' sum, with alpha = exp(the old max - the
// new), 0 where no key was seen before. Returns whether a row saw a key
// here (not every one masked).
bool OnlineSoftmax(float* st, int64_t ld, int64_t j0, int64_t cols, const int32_t* lo,
                   const int32_t* hi, float* max, float* sum, float* alpha) {
  // x raises m where the lane sees key j (NaN kept)
  const auto raise = [](Vec m, Vec x, VecI l, VecI h, int32_t j) {
    return l <= j && j <= h && (m < x || x != x) ? x : m;
  };
  bool any = false;
  for (int64_t v = 0; v < ld / kLanes; ++v) {
    const VecI l = BandLanes(lo, v), h = BandLanes(hi, v);
    const int64_t lane0 = v * kLanes;
    int64_t first, last;  // the keys some row of the vector sees
    SeenKeys(st, ld, lo, hi, v, j0, cols, &first, &last);
    // two maxima, of the even and the odd keys (with one, each key's compare
    // waited on the one before); a row with NaN scores at several keys keeps
    // one of them, whose payload may differ from a sequential max's
    Vec m = Splat<Vec>(-kInf), odd = m;
    int64_t jj = first;
    for (; jj < last; jj += 2) {
      const auto j = static_cast<int32_t>(j0 + jj);
      m = raise(m, At<ACL_FLOAT, Vec>(st + jj * ld, lane0), l, h, j);
      odd = raise(odd, At<ACL_FLOAT, Vec>(st + (jj + 1) * ld, lane0), l, h, j + 1);
    }
    if (jj == last)
      m = raise(m, At<ACL_FLOAT, Vec>(st + jj * ld, lane0), l, h, static_cast<int32_t>(j0 + jj));
    m = m < odd || odd != odd ? odd : m;
    const Vec old = At<ACL_FLOAT, Vec>(max, lane0);
    const Vec next = old < m || m != m ? m : old;
    Vec total{};
    for (jj = first; jj <= last; ++jj) {
      const auto j = static_cast<int32_t>(j0 + jj);
      const Vec w = ExpOrZero(At<ACL_FLOAT, Vec>(st + jj * ld, lane0) - next);
      const Vec seen = l <= j && j <= h && next != -kInf ? w : Vec{};
      Put<ACL_FLOAT>(st + jj * ld, lane0, seen);
      total += seen;
    }
    const Vec rescale = old == -kInf ? Vec{} : ExpOrZero(old - next);
    Put<ACL_FLOAT>(sum, lane0, At<ACL_FLOAT, Vec>(sum, lane0) * rescale + total);
    Put<ACL_FLOAT>(max, lane0, next);
    Put<ACL_FLOAT>(alpha, lane0, rescale);
    for (int k = 0; k < kLanes; ++k) any = any || m[k] != -kInf;
  }
  return any;
}

// The backward's weights over a transposed block (as OnlineSoftmax's), in
// place: exp(s - max) * inv_sum where the row sees the key, else 0.
void Weights(float* st, int64_t ld, int64_t j0, int64_t cols, const int32_t* lo,
             const int32_t* hi, const float* max, const float* inv_sum) {
  for (int64_t v = 0; v < ld / kLanes; ++v) {
    const VecI l = BandLanes(lo, v), h = BandLanes(hi, v);
    const int64_t lane0 = v * kLanes;
    const Vec m = At<ACL_FLOAT, Vec>(max, lane0), inv = At<ACL_FLOAT, Vec>(inv_sum, lane0);
    int64_t first, last;  // the keys some row of the vector sees
    SeenKeys(st, ld, lo, hi, v, j0, cols, &first, &last);
    for (int64_t jj = first; jj <= last; ++jj) {
      const auto j = static_cast<int32_t>(j0 + jj);
      const Vec w = ExpOrZero(At<ACL_FLOAT, Vec>(st + jj * ld, lane0) - m) * inv;
      Put<ACL_FLOAT>(st + jj * ld, lane0, l <= j && j <= h ? w : Vec{});
    }
  }
}

}  // namespace

void RunFlashAttention(const View& q, const View& k, const View& v, const View* pse,
                       const View* mask, const AttentionParams& params, const View& max_out,
                       const View& sum_out, const View& out, const JaxAclnnHostStream* stream) {
  const Problem pr(q, k, v, pse, mask, params);
  const int64_t query_rows = QueryRows(pr.t, kForwardQueries);
  const int64_t blocks = (pr.t + query_rows - 1) / query_rows;
  ParallelFor(stream, pr.b * pr.n * blocks, [&](int64_t task) {
    const int64_t qb = task % blocks, h = (task / blocks) % pr.n, b = task / (blocks * pr.n);
    const int64_t g = h / pr.group, i0 = qb * query_rows;
    const int64_t rows = std::min(query_rows, pr.t - i0), ld = Padded(rows);
    std::vector<float> qbuf, kbuf, vbuf, pbuf(static_cast<size_t>(kForwardKeys));
    const Floats scores(std::min(kForwardKeys, pr.s) * ld);  // transposed: a key per row
    std::vector<float> acc(static_cast<size_t>(rows * pr.dv), 0.0f);
    std::vector<float> row_max(static_cast<size_t>(ld), -kInf), row_sum(ld, 0.0f), alpha(ld);
    std::vector<int32_t> lo(static_cast<size_t>(ld)), hi(ld);
    pr.Bands(i0, rows, ld, lo.data(), hi.data(), [](int64_t) { return true; });
    const FloatMatrix qm = Rows(q, b, h, i0, rows, &qbuf);
    int64_t first, last;  // the keys any row sees: no product past them
    pr.Seen(i0, rows, &first, &last);
    for (int64_t j0 = first / kForwardKeys * kForwardKeys; j0 <= last; j0 += kForwardKeys) {
      const int64_t cols = std::min(kForwardKeys, last + 1 - j0);
      const FloatMatrix km = Rows(k, b, g, j0, cols, &kbuf);
      Gemm(km, qm.T(), scores.get(), ld, false, pr.p.scale);  // S^T = scale K Q^T
      pr.AddPseAndMask(b, h, i0, rows, j0, cols, scores.get(), ld, pbuf.data());
      if (!OnlineSoftmax(scores.get(), ld, j0, cols, lo.data(), hi.data(), row_max.data(),
                         row_sum.data(), alpha.data()))
        continue;  // no key seen here
      for (int64_t r = 0; r < rows; ++r)  // the earlier keys' weights rescaled
        if (alpha[r] != 1.0f) ArrayMap(acc.data() + r * pr.dv, pr.dv) *= alpha[r];
      const FloatMatrix vm = Rows(v, b, g, j0, cols, &vbuf);
      const FloatMatrix pt{scores.get(), cols, rows, ld, 1};
      Gemm(pt.T(), vm, acc.data(), pr.dv, true);  // O += P V
    }
    for (int64_t r = 0; r < rows; ++r) {
      const bool computed = row_sum[r] > 0;
      ArrayMap(acc.data() + r * pr.dv, pr.dv) *= computed ? 1.0f / row_sum[r] : 0.0f;
      float* m = Stat(max_out, b, h, i0 + r);
      float* l = Stat(sum_out, b, h, i0 + r);
      const float mr = computed ? row_max[r] : -FLT_MAX, lr = computed ? row_sum[r] : 0.0f;
      StoreStat(m, max_out.strides[3], mr);
      StoreStat(l, sum_out.strides[3], lr);
    }
    StoreRows(out, b, h, i0, rows, acc.data());
  });
}

void RunFlashAttentionGrad(const View& q, const View& k, const View& v, const View& dy,
                           const View* pse, const View* mask, const View& max_in,
                           const View& sum_in, const View& out_in, const AttentionParams& params,
                           const View& dq, const View& dk, const View& dv, const View* dpse,
                           const JaxAclnnHostStream* stream) {
  const Problem pr(q, k, v, pse, mask, params);
  const int64_t threads = NumThreads(stream);
  // D_i = dy_i . y_i, per (b, h, i).
  std::vector<float> di(static_cast<size_t>(pr.b * pr.n * pr.t));
  ParallelFor(stream, pr.b * pr.n, [&](int64_t bh) {
    const int64_t b = bh / pr.n, h = bh % pr.n;
    std::vector<float> ybuf, dybuf;
    for (int64_t i0 = 0; i0 < pr.t; i0 += kBackwardQueries) {
      const int64_t rows = std::min(kBackwardQueries, pr.t - i0);
      const FloatMatrix y = Rows(out_in, b, h, i0, rows, &ybuf);
      const FloatMatrix g = Rows(dy, b, h, i0, rows, &dybuf);
      for (int64_t r = 0; r < rows; ++r) {
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t e = 0; e < pr.dv; ++e)
          sum += y.data[r * y.row_stride + e] * g.data[r * g.row_stride + e];
        di[static_cast<size_t>(bh * pr.t + i0 + r)] = sum;
      }
    }
  });
  // Tasks: (batch, key/value head, chunk of key blocks); each owns its key
  // blocks' dk and dv. With a pse broadcast over the batch (its gradient
  // summed over it), a task walks every batch. dq: written in place when
  // one chunk holds every key block (and dq is float32 with a unit stride),
  // else each chunk sums into a float32 copy of its own, added after.
  const int64_t query_rows = QueryRows(pr.t, kBackwardQueries);
  const bool dpse_wanted = pse != nullptr && dpse != nullptr;
  const bool batch_inside = dpse_wanted && pse->dims[0] == 1 && pr.b > 1;
  const int64_t key_blocks = (pr.s + kBackwardKeys - 1) / kBackwardKeys;
  const int64_t base = (batch_inside ? 1 : pr.b) * pr.kv;
  const int64_t chunks =
      std::clamp<int64_t>((2 * threads + base - 1) / base, 1, std::max<int64_t>(key_blocks, 1));
  const bool dq_in_place = chunks == 1 && dq.dtype == ACL_FLOAT && dq.strides[3] == 1;
  const int64_t dq_size = pr.b * pr.t * pr.n * pr.d;
  std::vector<float> dq_parts(dq_in_place ? 0 : static_cast<size_t>(chunks * dq_size), 0.0f);
  // dpse in float32, contiguous in pse's shape.
  int64_t pse_dims[4] = {}, pse_strides[4] = {};
  if (dpse_wanted) {
    int64_t stride = 1;
    for (int i = 3; i >= 0; --i) {
      pse_dims[i] = pse->dims[i];
      pse_strides[i] = pse->dims[i] == 1 ? 0 : stride;
      stride *= pse->dims[i];
    }
  }
  std::vector<float> dpse_acc(dpse_wanted ? static_cast<size_t>(pse->NumElements()) : 0, 0.0f);
  ParallelFor(stream, base * chunks, [&](int64_t task) {
    const int64_t c = task % chunks, g = (task / chunks) % pr.kv, bb = task / (chunks * pr.kv);
    const int64_t b_first = batch_inside ? 0 : bb, b_end = batch_inside ? pr.b : bb + 1;
    std::vector<float> kbuf, vbuf, qbuf, dybuf, pbuf(static_cast<size_t>(kBackwardKeys));
    const int64_t block_size = std::min(kBackwardKeys, pr.s) * Padded(kBackwardQueries);
    const Floats p(block_size), dp(block_size);  // transposed: a key per row
    const auto lanes = static_cast<size_t>(Padded(kBackwardQueries));
    std::vector<float> row_max(lanes), inv_sum(lanes), d_rows(lanes);
    std::vector<int32_t> lo(lanes), hi(lanes);
    std::vector<float> dk_acc(static_cast<size_t>(kBackwardKeys * pr.d));
    std::vector<float> dv_acc(static_cast<size_t>(kBackwardKeys * pr.dv));
    for (int64_t b = b_first; b < b_end; ++b) {
      float* dq_base;
      int64_t ldq;
      if (dq_in_place) {
        dq_base = reinterpret_cast<float*>(Address(dq, b * dq.strides[0]));
        ldq = dq.strides[1];
        for (int64_t h = g * pr.group; h < (g + 1) * pr.group; ++h)
          for (int64_t i = 0; i < pr.t; ++i)
            std::memset(dq_base + i * ldq + h * dq.strides[2], 0, sizeof(float) * pr.d);
      } else {
        dq_base = dq_parts.data() + c * dq_size + b * pr.t * pr.n * pr.d;
        ldq = pr.n * pr.d;
      }
      const int64_t dq_head = dq_in_place ? dq.strides[2] : pr.d;
      for (int64_t kb = c; kb < key_blocks; kb += chunks) {
        const int64_t j0 = kb * kBackwardKeys, block_cols = std::min(kBackwardKeys, pr.s - j0);
        const FloatMatrix k_block = Rows(k, b, g, j0, block_cols, &kbuf);
        const FloatMatrix v_block = Rows(v, b, g, j0, block_cols, &vbuf);
        std::fill(dk_acc.begin(), dk_acc.end(), 0.0f);
        std::fill(dv_acc.begin(), dv_acc.end(), 0.0f);
        for (int64_t h = g * pr.group; h < (g + 1) * pr.group; ++h) {
          for (int64_t i0 = 0; i0 < pr.t; i0 += query_rows) {
            const int64_t rows = std::min(query_rows, pr.t - i0);
            if (!pr.Sees(i0, rows, j0, j0 + block_cols)) continue;
            int64_t first, last;  // the block's keys [j0, j0 + cols) up to the last one seen
            pr.Seen(i0, rows, &first, &last);
            const int64_t cols = std::min(block_cols, last + 1 - j0);
            const FloatMatrix km{k_block.data, cols, k_block.cols, k_block.row_stride, 1};
            const FloatMatrix vm{v_block.data, cols, v_block.cols, v_block.row_stride, 1};
            // each row's softmax from the forward; rows without one see no key
            const int64_t ld = Padded(rows);
            const float* d_head = di.data() + (b * pr.n + h) * pr.t + i0;
            for (int64_t r = 0; r < ld; ++r) {
              const float l = r < rows ? *Stat(sum_in, b, h, i0 + r) : 0.0f;
              row_max[r] = r < rows ? *Stat(max_in, b, h, i0 + r) : 0.0f;
              inv_sum[r] = l > 0 ? 1.0f / l : 0.0f;
              d_rows[r] = r < rows ? d_head[r] : 0.0f;
            }
            pr.Bands(i0, rows, ld, lo.data(), hi.data(),
                     [&](int64_t r) { return *Stat(sum_in, b, h, i0 + r) > 0; });
            bool any = false;
            for (int64_t r = 0; r < rows; ++r)
              any = any || (lo[r] <= hi[r] && lo[r] < j0 + cols && hi[r] >= j0);
            if (!any) continue;
            const FloatMatrix qm = Rows(q, b, h, i0, rows, &qbuf);
            Gemm(km, qm.T(), p.get(), ld, false, pr.p.scale);  // S^T = scale K Q^T
            pr.AddPseAndMask(b, h, i0, rows, j0, cols, p.get(), ld, pbuf.data());
            Weights(p.get(), ld, j0, cols, lo.data(), hi.data(), row_max.data(), inv_sum.data());
            const FloatMatrix dym = Rows(dy, b, h, i0, rows, &dybuf);
            const FloatMatrix pt{p.get(), cols, rows, ld, 1};
            Gemm(pt, dym, dv_acc.data(), pr.dv, true);  // dV += P^T dY
            Gemm(vm, dym.T(), dp.get(), ld, false);     // dP^T = V dY^T
            for (int64_t jj = 0; jj < cols; ++jj) {     // dS^T = scale P^T (dP^T - D)
              float* p_key = p.get() + jj * ld;
              const float* dp_key = dp.get() + jj * ld;
              for (int64_t r = 0; r < ld; r += kLanes)
                Put<ACL_FLOAT>(p_key, r,
                               At<ACL_FLOAT, Vec>(p_key, r) *
                                   (At<ACL_FLOAT, Vec>(dp_key, r) -
                                    At<ACL_FLOAT, Vec>(d_rows.data(), r)) *
                                   pr.p.scale);
            }
            if (dpse_wanted)
              for (int64_t r = 0; r < rows; ++r) {
                float* to = dpse_acc.data() + b * pse_strides[0] + h * pse_strides[1] +
                            (i0 + r) * pse_strides[2] + j0;
                for (int64_t jj = 0; jj < cols; ++jj) to[jj] += p.get()[jj * ld + r];
              }
            Gemm(pt.T(), km, dq_base + i0 * ldq + h * dq_head, ldq, true);  // dQ += dS K
            Gemm(pt, qm, dk_acc.data(), pr.d, true);                        // dK += dS^T Q
          }
        }
        StoreRows(dk, b, g, j0, block_cols, dk_acc.data());
        StoreRows(dv, b, g, j0, block_cols, dv_acc.data());
      }
    }
  });
  if (!dq_in_place) {  // dq = the chunks' sum
    ParallelFor(stream, pr.b * pr.t, [&](int64_t bi) {
      const int64_t b = bi / pr.t, i = bi % pr.t, row = pr.n * pr.d;
      float* first = dq_parts.data() + bi * row;
      for (int64_t c = 1; c < chunks; ++c)
        ArrayMap(first, row) += ArrayMap(first + c * dq_size, row);
      for (int64_t h = 0; h < pr.n; ++h)
        StoreFromFloat(dq.dtype, first + h * pr.d, pr.d,
                       Address(dq, b * dq.strides[0] + i * dq.strides[1] + h * dq.strides[2]),
                       dq.strides[3]);
    });
  }
  if (dpse_wanted) {  // to dpse's type and strides
    const float* src = dpse_acc.data();
    const int64_t rows = pse_dims[0] * pse_dims[1] * pse_dims[2];
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r % pse_dims[2], h = (r / pse_dims[2]) % pse_dims[1],
                    b = r / (pse_dims[2] * pse_dims[1]);
      StoreFromFloat(dpse->dtype, src + r * pse_dims[3], pse_dims[3],
                     Address(*dpse, b * dpse->strides[0] + h * dpse->strides[1] +
                                        i * dpse->strides[2]),
                     dpse->strides[3]);
    }
  }
}

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
