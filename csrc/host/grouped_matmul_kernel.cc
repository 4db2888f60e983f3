// The grouped matrix product: RunGroupedMatmul (kernels.h), tiles of each
// group's product computed by Eigen's GEMM (gemm.h) in float32, one tile per
// task of the provider's ParallelFor. Half-precision operands are converted
// to float32 a tile at a time, and the tile's result back: CANN's kernels
// accumulate in float32 too.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "host/dtype.h"
#include "host/gemm.h"
#include "host/kernels.h"
#include "host/memory.h"
#include "host/parallel.h"

// Compiled once per CPU target (CMakeLists.txt), each copy in its own
// namespace; dispatch.cc picks one at run time.
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

// Output rows of a tile (fewer in a group's last one), and the least output
// columns a tile takes when the columns are split as well.
constexpr int64_t kTileRows = 256;
constexpr int64_t kMinTileCols = 64;

// A 2-D slice of a view: element (i, j) at `base` + i * s0 + j * s1
// elements.
struct Matrix2 {
  const View* v;
  const char* base;
  int64_t s0, s1;
};

Matrix2 Slice(const View& v, int64_t offset, int64_t s0, int64_t s1) {
  return {&v, static_cast<const char*>(v.data) + offset * ElementSize(v.dtype), s0, s1};
}

// Rows [r0, r0 + rows) x columns [c0, c0 + cols) of `m` as floats: the
// memory itself where it is float32 with a unit stride, else converted
// into buf (row-major).
FloatMatrix Floats(const Matrix2& m, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                   std::vector<float>* buf) {
  const int64_t size = ElementSize(m.v->dtype);
  const char* first = m.base + (r0 * m.s0 + c0 * m.s1) * size;
  if (m.v->dtype == ACL_FLOAT && (m.s1 == 1 || m.s0 == 1))
    return {reinterpret_cast<const float*>(first), rows, cols, m.s0, m.s1};
  buf->resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    LoadAsFloat(m.v->dtype, first + i * m.s0 * size, m.s1, cols, buf->data() + i * cols);
  return {buf->data(), rows, cols, cols, 1};
}

// A task: output rows [r0, r1) x columns [c0, c1) of group e.
struct Tile {
  int64_t e, r0, r1, c0, c1;
};

// The groups' bounds [starts[e], starts[e + 1]) along the grouped
// dimension of `size`, from the group list (counts, or cumulative sums).
// Values CANN refuses are clamped, never followed out of bounds: a
// negative count is 0, the total stops at `size`.
std::vector<int64_t> GroupStarts(const View& group_list, bool counts, int64_t size) {
  const int64_t groups = group_list.dims[0];
  const auto* values = static_cast<const int64_t*>(group_list.data);
  std::vector<int64_t> starts(static_cast<size_t>(groups + 1), 0);
  for (int64_t e = 0; e < groups; ++e) {
    const int64_t v = values[e * group_list.strides[0]];
    const int64_t end = counts ? starts[e] + std::max<int64_t>(v, 0) : std::max(v, starts[e]);
    starts[e + 1] = std::min(end, size);
  }
  return starts;
}

// The tiles of the output: rows [lo(e), hi(e)) of each group e (along M:
// the group's rows; along K: all of out[e]'s rows), in row blocks and, when
// there are too few of those for the threads, column blocks.
template <typename Rows>
std::vector<Tile> Tiles(int64_t groups, const Rows& rows, int64_t n, int64_t threads) {
  int64_t row_tiles = 0;
  for (int64_t e = 0; e < groups; ++e) {
    const auto [lo, hi] = rows(e);
    row_tiles += (hi - lo + kTileRows - 1) / kTileRows;
  }
  const int64_t col_splits = std::clamp<int64_t>(
      (4 * threads + row_tiles - 1) / std::max<int64_t>(row_tiles, 1), 1,
      std::max<int64_t>(1, n / kMinTileCols));
  std::vector<Tile> tiles;
  tiles.reserve(static_cast<size_t>(row_tiles * col_splits));
  for (int64_t e = 0; e < groups; ++e) {
    const auto [lo, hi] = rows(e);
    for (int64_t r = lo; r < hi; r += kTileRows)
      for (int64_t c = 0; c < col_splits; ++c)
        tiles.push_back({e, r, std::min(hi, r + kTileRows), n * c / col_splits,
                         n * (c + 1) / col_splits});
  }
  return tiles;
}

// Computes a tile of `out` (row-major, row stride ldo, offset `base`
// elements) by fill(c, ldc), which writes the tile's floats at c: in place
// where out is float32, else through a buffer.
template <typename Fill>
void WriteTile(const View& out, int64_t base, int64_t ldo, const Tile& t, const Fill& fill) {
  const int64_t rows = t.r1 - t.r0, cols = t.c1 - t.c0;
  char* first = static_cast<char*>(out.data) +
                (base + t.r0 * ldo + t.c0) * ElementSize(out.dtype);
  if (out.dtype == ACL_FLOAT) return fill(reinterpret_cast<float*>(first), ldo);
  std::vector<float> buf(static_cast<size_t>(rows * cols));
  fill(buf.data(), cols);
  for (int64_t i = 0; i < rows; ++i)
    StoreFromFloat(out.dtype, buf.data() + i * cols, cols,
                   first + i * ldo * ElementSize(out.dtype), 1);
}

}  // namespace

void RunGroupedMatmul(const View& x, const View& weight, const View* bias, const View& group_list,
                      bool counts, bool along_k, const View& out,
                      const JaxAclnnHostStream* stream) {
  if (out.NumElements() == 0) return;
  PrepareOutput(out.data, out.NumElements() * ElementSize(out.dtype));
  const int64_t groups = group_list.dims[0], m = x.dims[0], k = x.dims[1];
  const int64_t n = out.dims[out.rank - 1];
  const Matrix2 xs = Slice(x, 0, x.strides[0], x.strides[1]);
  const std::vector<int64_t> starts = GroupStarts(group_list, counts, along_k ? k : m);
  std::vector<Tile> tiles;
  if (along_k)  // out[e] (m, n) = x[:, ks of e] @ weight[ks of e]
    tiles = Tiles(groups, [&](int64_t) { return std::pair<int64_t, int64_t>(0, m); }, n,
                  NumThreads(stream));
  else  // out[rows of e] = x[rows of e] @ weight[e] (+ bias[e])
    tiles = Tiles(groups, [&](int64_t e) { return std::pair(starts[e], starts[e + 1]); }, n,
                  NumThreads(stream));
  if (!along_k)  // rows past the groups' total: CANN leaves them unspecified, zeros here
    std::memset(static_cast<char*>(out.data) + starts[groups] * n * ElementSize(out.dtype), 0,
                static_cast<size_t>((m - starts[groups]) * n * ElementSize(out.dtype)));
  ParallelFor(stream, static_cast<int64_t>(tiles.size()), [&](int64_t i) {
    const Tile& t = tiles[static_cast<size_t>(i)];
    const int64_t rows = t.r1 - t.r0, cols = t.c1 - t.c0;
    std::vector<float> abuf, bbuf;
    if (along_k) {
      const int64_t k0 = starts[t.e], kk = starts[t.e + 1] - k0;
      const FloatMatrix a = Floats(xs, t.r0, rows, k0, kk, &abuf);
      const Matrix2 w = Slice(weight, 0, weight.strides[0], weight.strides[1]);
      const FloatMatrix b = Floats(w, k0, kk, t.c0, cols, &bbuf);
      WriteTile(out, t.e * m * n, n, t, [&](float* c, int64_t ldc) { Gemm(a, b, c, ldc, false); });
      return;
    }
    const FloatMatrix a = Floats(xs, t.r0, rows, 0, k, &abuf);
    const Matrix2 w = Slice(weight, t.e * weight.strides[0], weight.strides[1], weight.strides[2]);
    const FloatMatrix b = Floats(w, 0, k, t.c0, cols, &bbuf);
    WriteTile(out, 0, n, t, [&](float* c, int64_t ldc) {
      if (bias != nullptr) {
        const Matrix2 bs = Slice(*bias, t.e * bias->strides[0], 0, bias->strides[1]);
        for (int64_t r = 0; r < rows; ++r)
          LoadAsFloat(bias->dtype, bs.base + t.c0 * bs.s1 * ElementSize(bias->dtype), bs.s1, cols,
                      c + r * ldc);
      }
      Gemm(a, b, c, ldc, bias != nullptr);
    });
  });
}

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
