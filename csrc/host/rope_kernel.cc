// The rotary position embedding kernels: RunRope and RunRopeGrad
// (kernels.h), a (b, s, n) row of D elements at a time: in vectors where
// the type and D allow (RopeRowIn), else in float buffers (row_kernels.h;
// the gradient with dcos and dsin always). dcos and dsin are summed over
// cos's broadcast dimensions in float32, in blocks fixed by the shape
// (never by the thread count), so that their bits are the same everywhere.
#include <algorithm>
#include <cstdint>

#include "host/dtype.h"
#include "host/half_runs.h"
#include "host/kernels.h"
#include "host/memory.h"
#include "host/parallel.h"
#include "host/row_kernels.h"
#include "host/simd.h"

// Compiled once per CPU target (CMakeLists.txt), each copy in its own
// namespace; dispatch.cc picks one at run time.
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

// r = rotate(v) over D elements: mode 0 (half) cat(-v2, v1) of v's halves;
// 2 (quarter) the same on each half; 1 (interleave) pairs (a, b) -> (-b, a).
void Rotate(const float* v, int64_t d, int mode, float* r) {
  if (mode == 1) {
#pragma omp simd
    for (int64_t i = 0; i < d; i += 2) {
      r[i] = -v[i + 1];
      r[i + 1] = v[i];
    }
    return;
  }
  const int64_t block = mode == 0 ? d : d / 2, h = block / 2;
  for (int64_t b0 = 0; b0 < d; b0 += block) {
#pragma omp simd
    for (int64_t j = 0; j < h; ++j) {
      r[b0 + j] = -v[b0 + j + h];
      r[b0 + j + h] = v[b0 + j];
    }
  }
}

// --- Rows in registers (row_kernels.h) -------------------------------------
// rotate() pairs element lo of each block (D long for "half", D / 2 for
// "quarter", 2 for "interleave") with hi = lo + h, h half the block:
// rotate(v)[lo] = -v[hi], rotate(v)[hi] = v[lo]. Two ways to keep a row in
// vectors:
// * by lanes, where each vector of the row holds whole blocks (D a multiple
//   of the vector, the block dividing it: "interleave" at any such D, "half"
//   at D = kLanes): rotate(v) = sign * Permute(v, from) per vector;
// * by halves, where a half-block spans a vector or more ("half" and
//   "quarter" with h >= kLanes): lo and hi read as two vectors h apart.
struct LaneRotation {
  VecI from;
  Vec sign;
};

int64_t RotationBlock(int64_t d, int mode) { return mode == 1 ? 2 : mode == 0 ? d : d / 2; }

bool ByLanes(int64_t d, int mode, LaneRotation* lr) {
  const int64_t block = RotationBlock(d, mode), h = block / 2;
  if (d % kLanes != 0 || kLanes % block != 0) return false;
  for (int k = 0; k < kLanes; ++k) {
    const int64_t j = k % block;
    lr->from[k] = static_cast<int32_t>(k - j + (j + h) % block);
    lr->sign[k] = j < h ? -1.0f : 1.0f;
  }
  return true;
}

bool ByHalves(int64_t d, int mode) { return mode != 1 && RotationBlock(d, mode) / 2 >= kLanes; }

// A row of out = v * c + rotate(v) * s (kGrad false: the forward, v = x), or
// of dx = v * c - rotate(v * s) (kGrad true: v = dy; rotate's transpose is
// -rotate), all of type D; lr: ByLanes's rotation, or null to go ByHalves.
// Each pair (lo, hi) is read before it is written.
template <aclDataType D, bool kGrad>
void RopeRowIn(const char* v, const char* c, const char* s, int64_t d, int mode,
               const LaneRotation* lr, char* out) {
  if (lr != nullptr) {
    for (int64_t j = 0; j < d; j += kLanes) {
      const Vec a = At<D, Vec>(v, j), cj = At<D, Vec>(c, j), sj = At<D, Vec>(s, j);
      Put<D>(out, j, kGrad ? a * cj - lr->sign * Permute(a * sj, lr->from)
                           : a * cj + lr->sign * Permute(a, lr->from) * sj);
    }
    return;
  }
  const int64_t block = RotationBlock(d, mode), h = block / 2;
  for (int64_t b0 = 0; b0 < d; b0 += block)
    ForLanes(h, [&](int64_t j, auto t) {
      using T = decltype(t);
      const int64_t lo = b0 + j, hi = lo + h;
      const T a = At<D, T>(v, lo), b = At<D, T>(v, hi);
      if constexpr (kGrad) {
        Put<D>(out, lo, a * At<D, T>(c, lo) + b * At<D, T>(s, hi));
        Put<D>(out, hi, b * At<D, T>(c, hi) - a * At<D, T>(s, lo));
      } else {
        Put<D>(out, lo, a * At<D, T>(c, lo) - b * At<D, T>(s, lo));
        Put<D>(out, hi, b * At<D, T>(c, hi) + a * At<D, T>(s, hi));
      }
    });
}

// x's (B, S, N) rows and cos's: the rows of cos are x's with its broadcast
// dimensions dropped (cos is contiguous: its row index is row-major over
// the others).
struct RopeRows {
  int64_t dims[3];
  bool broadcast[3];
  int64_t d, rows, cos_rows, per_cos_row;  // per_cos_row: x rows on one cos row

  RopeRows(const View& x, const View& cos) : d(x.dims[3]) {
    rows = cos_rows = per_cos_row = 1;
    for (int k = 0; k < 3; ++k) {
      dims[k] = x.dims[k];
      broadcast[k] = cos.dims[k] == 1;
      rows *= dims[k];
      (broadcast[k] ? per_cos_row : cos_rows) *= dims[k];
    }
  }
  // body(r, the cos row of r) for x's rows [p, q): the row's (b, s, n)
  // counted along, not divided out of r for every row (in registers, three
  // divisions a row took a third of the time on rows of 16).
  template <typename Body>
  void Walk(int64_t p, int64_t q, const Body& body) const {
    int64_t idx[3];
    for (int64_t k = 2, r = p; k >= 0; --k) {
      idx[k] = r % dims[k];
      r /= dims[k];
    }
    for (int64_t r = p; r < q; ++r) {
      body(r, Combine(idx, false));
      for (int k = 2; k >= 0 && ++idx[k] == dims[k]; --k) idx[k] = 0;
    }
  }
  // The x row of the k-th of cos row c's x rows.
  int64_t XRow(int64_t c, int64_t k) const {
    int64_t idx[3];
    for (int j = 2; j >= 0; --j) {
      int64_t& from = broadcast[j] ? k : c;
      idx[j] = from % dims[j];
      from /= dims[j];
    }
    return Combine(idx, true);
  }
  // Row-major over every dimension (all) or cos's kept ones.
  int64_t Combine(const int64_t* idx, bool all) const {
    int64_t r = 0;
    for (int k = 0; k < 3; ++k)
      if (all || !broadcast[k]) r = r * dims[k] + idx[k];
    return r;
  }
};

// Row r of a contiguous view of rows of d elements.
Row ContiguousRow(const View& v, int64_t d, int64_t r) { return {&v, r * d, 1}; }

// out = v * c + rotate(v) * s (or the gradient's dx, kGrad) over every row
// in registers where the type and D allow (true), else false.
template <bool kGrad>
bool RopeRowsIn(const RopeRows& rr, const View& v, const View& cos, const View& sin, int mode,
                const View& out, const JaxAclnnHostStream* stream) {
  const int64_t d = rr.d;
  LaneRotation rotation;
  const LaneRotation* lr = ByLanes(d, mode, &rotation) ? &rotation : nullptr;
  if (lr == nullptr && !ByHalves(d, mode)) return false;
  if (!AllContiguous(v.dtype, {&v, &cos, &sin, &out})) return false;
  return WithRowType(v.dtype, [&](auto type) {
    constexpr aclDataType D = decltype(type)::value;
    ForEachPieceOfRows(rr.rows, d, out, stream, [&](int64_t p, int64_t q) {
      rr.Walk(p, q, [&](int64_t r, int64_t cr) {
        RopeRowIn<D, kGrad>(RowData<D>(v, d, r), RowData<D>(cos, d, cr),
                            RowData<D>(sin, d, cr), d, mode, lr, RowData<D>(out, d, r));
      });
    });
  });
}

// dcos/dsin's blocks of x rows per cos row, and their float32 partial sums
// in the workspace (at most kPartialBytes): only as many as make about
// kMinUnits (cos row, block) units, the work's parallelism (16 blocks for
// cos of 1024 rows: their 16 MiB workspace, fresh memory every call, took
// the float32 gradient of x, cos and sin at (4, 1024, 8, 128) 10-12 ms
// instead of 3.6).
constexpr int64_t kMaxBlocks = 16;
constexpr int64_t kMinUnits = 64;
constexpr int64_t kPartialBytes = int64_t{16} << 20;

int64_t GradBlocks(const RopeRows& rr) {
  const int64_t by_work = (rr.rows * rr.d + kGrain - 1) / kGrain;
  const int64_t by_memory = kPartialBytes / (8 * std::max<int64_t>(1, rr.cos_rows * rr.d));
  const int64_t by_units = (kMinUnits + rr.cos_rows - 1) / std::max<int64_t>(1, rr.cos_rows);
  return std::max<int64_t>(
      1, std::min({rr.per_cos_row, kMaxBlocks, by_work, by_memory, by_units}));
}

// dx of one row: dy * cos - rotate(dy * sin) (rotate's transpose is -rotate).
void DxRow(const float* dy, const float* c, const float* s, int64_t d, int mode, float* dx) {
  alignas(64) float u[kChunk], r[kChunk];
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) u[j] = dy[j] * s[j];
  Rotate(u, d, mode, r);
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) dx[j] = dy[j] * c[j] - r[j];
}

}  // namespace

void RunRope(const View& x, const View& cos, const View& sin, int mode, const View& out,
             const JaxAclnnHostStream* stream) {
  const RopeRows rr(x, cos);
  if (RopeRowsIn<false>(rr, x, cos, sin, mode, out, stream)) return;
  const int64_t d = rr.d;
  ForEachPieceOfRows(rr.rows, d, out, stream, [&](int64_t p, int64_t q) {
    rr.Walk(p, q, [&](int64_t r, int64_t cr) {
    alignas(64) float xb[kChunk], cb[kChunk], sb[kChunk], rot[kChunk], ob[kChunk];
    const float* xp = ContiguousRow(x, d, r).Load(0, d, xb);
    const float* c = ContiguousRow(cos, d, cr).Load(0, d, cb);
    const float* s = ContiguousRow(sin, d, cr).Load(0, d, sb);
    const Row o = ContiguousRow(out, d, r);
    float* op = o.Out(0, ob);
    Rotate(xp, d, mode, rot);
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) op[j] = xp[j] * c[j] + rot[j] * s[j];
    o.Store(0, d, op);
    });
  });
}

uint64_t RopeGradWorkspaceSize(const View& dy, const View& cos) {
  const RopeRows rr(dy, cos);
  const int64_t blocks = GradBlocks(rr);
  return blocks > 1 ? static_cast<uint64_t>(2 * blocks * rr.cos_rows * rr.d) * sizeof(float) : 0;
}

void RunRopeGrad(const View& dy, const View& cos, const View& sin, const View* x, int mode,
                 const View& dx, const View* dcos, const View* dsin, void* workspace,
                 const JaxAclnnHostStream* stream) {
  const RopeRows rr(dy, cos);
  const int64_t d = rr.d;
  if (x == nullptr) {  // dx alone, in row order
    if (RopeRowsIn<true>(rr, dy, cos, sin, mode, dx, stream)) return;
    ForEachPieceOfRows(rr.rows, d, dx, stream, [&](int64_t p, int64_t q) {
      rr.Walk(p, q, [&](int64_t r, int64_t cr) {
      alignas(64) float gb[kChunk], cb[kChunk], sb[kChunk], ob[kChunk];
      const Row o = ContiguousRow(dx, d, r);
      float* op = o.Out(0, ob);
      DxRow(ContiguousRow(dy, d, r).Load(0, d, gb), ContiguousRow(cos, d, cr).Load(0, d, cb),
            ContiguousRow(sin, d, cr).Load(0, d, sb), d, mode, op);
      o.Store(0, d, op);
      });
    });
    return;
  }
  // Units (cos row, block): each block's x rows of one cos row, their dx
  // and their sums of dy * x and dy * rotate(x).
  const int64_t blocks = GradBlocks(rr);
  const int64_t units = rr.cos_rows * blocks;
  auto* partials = static_cast<float*>(workspace);  // [2][blocks][cos_rows][d]
  const int64_t plane = blocks * rr.cos_rows * d;
  PrepareOutput(dx.data, dx.NumElements() * ElementSize(dx.dtype));
  const int64_t tasks = RowTasks(units, rr.rows * d / std::max<int64_t>(1, units), stream);
  ParallelFor(stream, tasks, [&](int64_t t) {
    alignas(64) float gb[kChunk], xb[kChunk], cb[kChunk], sb[kChunk], ob[kChunk], rot[kChunk];
    alignas(64) float acc_c[kChunk], acc_s[kChunk];
    for (int64_t u = units * t / tasks; u < units * (t + 1) / tasks; ++u) {
      const int64_t cr = u / blocks, b = u % blocks;
      const float* c = ContiguousRow(cos, d, cr).Load(0, d, cb);
      const float* s = ContiguousRow(sin, d, cr).Load(0, d, sb);
      std::fill(acc_c, acc_c + d, 0.0f);
      std::fill(acc_s, acc_s + d, 0.0f);
      const int64_t k1 = rr.per_cos_row * (b + 1) / blocks;
      for (int64_t k = rr.per_cos_row * b / blocks; k < k1; ++k) {
        const int64_t r = rr.XRow(cr, k);
        const float* g = ContiguousRow(dy, d, r).Load(0, d, gb);
        const float* xp = ContiguousRow(*x, d, r).Load(0, d, xb);
        const Row o = ContiguousRow(dx, d, r);
        float* op = o.Out(0, ob);
        DxRow(g, c, s, d, mode, op);
        o.Store(0, d, op);
        Rotate(xp, d, mode, rot);
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) {
          acc_c[j] += g[j] * xp[j];
          acc_s[j] += g[j] * rot[j];
        }
      }
      if (blocks == 1) {
        StoreFromFloat(dcos->dtype, acc_c, d, ContiguousRow(*dcos, d, cr).At(0), 1);
        StoreFromFloat(dsin->dtype, acc_s, d, ContiguousRow(*dsin, d, cr).At(0), 1);
      } else {
        std::copy(acc_c, acc_c + d, partials + (b * rr.cos_rows + cr) * d);
        std::copy(acc_s, acc_s + d, partials + plane + (b * rr.cos_rows + cr) * d);
      }
    }
  });
  if (blocks == 1) return;
  // the blocks' partial sums in block order, a cos row per step
  const int64_t combine_tasks = RowTasks(rr.cos_rows, d * blocks, stream);
  ParallelFor(stream, combine_tasks, [&](int64_t t) {
    alignas(64) float sum[kChunk];
    for (int64_t cr = rr.cos_rows * t / combine_tasks;
         cr < rr.cos_rows * (t + 1) / combine_tasks; ++cr) {
      for (int which = 0; which < 2; ++which) {
        const float* p = partials + which * plane + cr * d;
        std::copy(p, p + d, sum);
        for (int64_t b = 1; b < blocks; ++b) {
          const float* q = p + b * rr.cos_rows * d;
#pragma omp simd
          for (int64_t j = 0; j < d; ++j) sum[j] += q[j];
        }
        const View& out = which == 0 ? *dcos : *dsin;
        StoreFromFloat(out.dtype, sum, d, ContiguousRow(out, d, cr).At(0), 1);
      }
    }
  });
}

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
