// The RMSNorm kernels: RunRmsNorm (AddRmsNorm's too) and RunRmsNormGrad.
// Contiguous rows of a type the target converts in registers are read and
// written a vector at a time (row_kernels.h: 2.5-3.5x faster on rows of
// 16-64); others are walked a chunk at a time, converted to floats where
// they are not contiguous float32. Sums in float32, as CANN's kernels keep
// them.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "host/dtype.h"
#include "host/half_runs.h"
#include "host/kernels.h"
#include "host/memory.h"
#include "host/parallel.h"
#include "host/row_kernels.h"
#include "host/rows.h"
#include "host/simd.h"

// Compiled once per CPU target (CMakeLists.txt), each copy in its own
// namespace; dispatch.cc picks one at run time.
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

// x's chunk [c, c + len) of row r as floats: x1's, or x1 + x2 (summed in
// float32, as AddRmsNorm does) written to x_out when `store`.
const float* XChunk(const Row& x1, const Row* x2, const Row* x_out, bool store, int64_t c,
                    int64_t len, float* buf1, float* buf2) {
  const float* a = x1.Load(c, len, buf1);
  if (x2 == nullptr) return a;
  const float* b = x2->Load(c, len, buf2);
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) buf1[j] = a[j] + b[j];
  if (store && x_out != nullptr) StoreFromFloat(x_out->v->dtype, buf1, len, x_out->At(c), x_out->stride);
  return buf1;
}

void RmsNormRow(const View& x1, const View* x2, const float* gamma, int lead, int64_t n,
                float epsilon, const View& y, const View* rstd, const View* x_out, int64_t r) {
  alignas(64) float buf1[kChunk], buf2[kChunk], out[kChunk];
  const Row a = RowOf(x1, lead, r), yr = RowOf(y, lead, r);
  Row b{}, xo{};
  if (x2 != nullptr) b = RowOf(*x2, lead, r);
  if (x_out != nullptr) xo = RowOf(*x_out, lead, r);
  const Row* bp = x2 != nullptr ? &b : nullptr;
  const Row* xop = x_out != nullptr ? &xo : nullptr;
  float squares = 0.0f;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t len = std::min(kChunk, n - c);
    const float* x = XChunk(a, bp, xop, true, c, len, buf1, buf2);
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < len; ++j) s += x[j] * x[j];
    squares += s;
  }
  const float rs = 1.0f / std::sqrt(squares / static_cast<float>(n) + epsilon);
  if (rstd != nullptr) *reinterpret_cast<float*>(RowOf(*rstd, lead, r).At(0)) = rs;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t len = std::min(kChunk, n - c);
    const float* x = XChunk(a, bp, xop, false, c, len, buf1, buf2);
    const float* g = gamma + c;
    float* o = yr.Out(c, out);
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) o[j] = x[j] * rs * g[j];
    yr.Store(c, len, o);
  }
}

// RmsNormRow on contiguous rows of a type in registers (row_kernels.h).
template <aclDataType D>
void RmsNormRowIn(const View& x1, const View* x2, const float* gamma, int64_t n, float epsilon,
                  const View& y, const View* rstd, const View* x_out, int64_t r) {
  const char* a = RowData<D>(x1, n, r);
  const char* b = x2 != nullptr ? RowData<D>(*x2, n, r) : nullptr;
  char* xo = x_out != nullptr ? RowData<D>(*x_out, n, r) : nullptr;
  const auto x = [&](int64_t j, auto t) {  // x1 + x2, summed in float32
    using T = decltype(t);
    const T v = At<D, T>(a, j);
    return b != nullptr ? v + At<D, T>(b, j) : v;
  };
  const float squares = SumOfLanes(n, [&](int64_t j, auto t) {
    const auto v = x(j, t);
    if (xo != nullptr) Put<D>(xo, j, v);
    return v * v;
  });
  const float rs = 1.0f / std::sqrt(squares / static_cast<float>(n) + epsilon);
  if (rstd != nullptr) static_cast<float*>(rstd->data)[r] = rs;
  char* out = RowData<D>(y, n, r);
  ForLanes(n, [&](int64_t j, auto t) {
    using T = decltype(t);
    Put<D>(out, j, x(j, t) * rs * At<ACL_FLOAT, T>(gamma, j));
  });
}

// RmsNormGrad's row blocks: fixed by the shape, never by the thread count,
// so that dgamma's partial sums and their combine order (and so its bits)
// are the same everywhere. Each block's float32 partial dgamma lives in
// the workspace, at most kGradPartialBytes for all blocks.
constexpr int64_t kGradMaxBlocks = 16;
constexpr int64_t kGradPartialBytes = int64_t{16} << 20;

int64_t GradBlocks(int64_t rows, int64_t n) {
  const int64_t by_work = (rows * n + kGrain - 1) / kGrain;
  const int64_t by_memory = kGradPartialBytes / (4 * std::max<int64_t>(n, 1));
  return std::max<int64_t>(1, std::min({rows, kGradMaxBlocks, by_work, by_memory}));
}

// Row r of the gradient: dx = (dy * g - rs * x * m) * rs with m =
// mean(dy * g * x * rs) (aclnnRmsNormGrad.md's formula), and the row's
// dy * x * rs added to `partial` (dgamma's).
void RmsNormGradRow(const View& dy, const View& x, const View& rstd, const float* gamma,
                    int lead, int64_t n, const View& dx, int64_t r, float* partial) {
  alignas(64) float dbuf[kChunk], xbuf[kChunk], out[kChunk];
  const Row d = RowOf(dy, lead, r), xr = RowOf(x, lead, r), o = RowOf(dx, lead, r);
  const float rs = *reinterpret_cast<const float*>(RowOf(rstd, lead, r).At(0));
  float sum = 0.0f;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t len = std::min(kChunk, n - c);
    const float* dp = d.Load(c, len, dbuf);
    const float* xp = xr.Load(c, len, xbuf);
    const float* g = gamma + c;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < len; ++j) s += dp[j] * g[j] * xp[j];
    sum += s;
  }
  const float m = sum * rs / static_cast<float>(n);
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t len = std::min(kChunk, n - c);
    const float* dp = d.Load(c, len, dbuf);
    const float* xp = xr.Load(c, len, xbuf);
    const float* g = gamma + c;
    float* op = o.Out(c, out);
    float* acc = partial + c;
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) {
      const float xs = xp[j] * rs;
      acc[j] += dp[j] * xs;
      op[j] = (dp[j] * g[j] - xs * m) * rs;
    }
    o.Store(c, len, op);
  }
}

// RmsNormGradRow on contiguous rows of a type in registers (row_kernels.h).
template <aclDataType D>
void RmsNormGradRowIn(const View& dy, const View& x, const View& rstd, const float* gamma,
                      int64_t n, const View& dx, int64_t r, float* partial) {
  const char* d = RowData<D>(dy, n, r);
  const char* xr = RowData<D>(x, n, r);
  char* o = RowData<D>(dx, n, r);
  const float rs = static_cast<const float*>(rstd.data)[r];
  const float sum = SumOfLanes(n, [&](int64_t j, auto t) {
    using T = decltype(t);
    return At<D, T>(d, j) * At<ACL_FLOAT, T>(gamma, j) * At<D, T>(xr, j);
  });
  const float m = sum * rs / static_cast<float>(n);
  ForLanes(n, [&](int64_t j, auto t) {
    using T = decltype(t);
    const T dv = At<D, T>(d, j), xs = At<D, T>(xr, j) * rs;
    Put<ACL_FLOAT>(partial, j, At<ACL_FLOAT, T>(partial, j) + dv * xs);
    Put<D>(o, j, (dv * At<ACL_FLOAT, T>(gamma, j) - xs * m) * rs);
  });
}

}  // namespace

uint64_t RmsNormWorkspaceSize(const View& x, int lead) {
  return static_cast<uint64_t>(DimsProduct(x, lead, x.rank)) * sizeof(float);  // gamma's floats
}

void RunRmsNorm(const View& x1, const View* x2, const View& gamma, int lead, float epsilon,
                const View& y, const View* rstd, const View* x_out, void* workspace,
                const JaxAclnnHostStream* stream) {
  const int64_t rows = DimsProduct(x1, 0, lead), n = DimsProduct(x1, lead, x1.rank);
  if (rows == 0) return;
  const float* g = ContiguousFloats(gamma, n, static_cast<float*>(workspace));
  if (AllContiguous(x1.dtype, {&x1, x2, &y, x_out}) && (rstd == nullptr || IsContiguous(*rstd)) &&
      WithRowType(x1.dtype, [&](auto type) {
        ForEachRow(rows, n, y, stream, [&](int64_t r) {
          RmsNormRowIn<type.value>(x1, x2, g, n, epsilon, y, rstd, x_out, r);
        });
      }))
    return;
  ForEachRow(rows, n, y, stream, [&](int64_t r) {
    RmsNormRow(x1, x2, g, lead, n, epsilon, y, rstd, x_out, r);
  });
}

uint64_t RmsNormGradWorkspaceSize(const View& x, int lead) {
  const int64_t rows = DimsProduct(x, 0, lead), n = DimsProduct(x, lead, x.rank);
  return static_cast<uint64_t>((1 + GradBlocks(rows, n)) * n) * sizeof(float);
}

void RunRmsNormGrad(const View& dy, const View& x, const View& rstd, const View& gamma,
                    int lead, const View& dx, const View& dgamma, void* workspace,
                    const JaxAclnnHostStream* stream) {
  const int64_t rows = DimsProduct(x, 0, lead), n = DimsProduct(x, lead, x.rank);
  if (n == 0) return;
  float* ws = static_cast<float*>(workspace);
  const float* g = ContiguousFloats(gamma, n, ws);
  const int64_t blocks = GradBlocks(rows, n);
  float* partials = ws + n;
  const int64_t piece = PieceBytes(dx);
  const auto for_blocks = [&](const auto& row) {  // row(r, partial)
    ParallelFor(stream, blocks, [&](int64_t b) {
      float* partial = partials + b * n;
      std::fill(partial, partial + n, 0.0f);
      RowsInPieces(dx, n, piece, rows * b / blocks, rows * (b + 1) / blocks,
                   [&](int64_t r) { row(r, partial); });
    });
  };
  if (!(AllContiguous(x.dtype, {&dy, &x, &dx}) && IsContiguous(rstd) &&
        WithRowType(x.dtype, [&](auto type) {
          for_blocks([&](int64_t r, float* partial) {
            RmsNormGradRowIn<type.value>(dy, x, rstd, g, n, dx, r, partial);
          });
        })))
    for_blocks([&](int64_t r, float* partial) {
      RmsNormGradRow(dy, x, rstd, g, lead, n, dx, r, partial);
    });
  // dgamma: the blocks' partial sums in block order, a chunk of columns per task.
  const Row dg = RowOf(dgamma, 0, 0);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int64_t tasks = std::min(chunks, 4 * NumThreads(stream));
  ParallelFor(stream, tasks, [&](int64_t t) {
    alignas(64) float out[kChunk];
    for (int64_t k = chunks * t / tasks; k < chunks * (t + 1) / tasks; ++k) {
      const int64_t c = k * kChunk, len = std::min(kChunk, n - c);
      float* o = dg.Out(c, out);
      std::copy(partials + c, partials + c + len, o);
      for (int64_t b = 1; b < blocks; ++b) {
        const float* p = partials + b * n + c;
#pragma omp simd
        for (int64_t j = 0; j < len; ++j) o[j] += p[j];
      }
      dg.Store(c, len, o);
    }
  });
}

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
