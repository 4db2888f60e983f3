// The test provider's language-model operators (test_provider.h), float32
// on host memory, from CANN's documented semantics:
//  - aclnnRotaryPositionEmbedding(Grad): hicann/ops-transformer
//    posembedding/rotary_position_embedding/docs/aclnnRotaryPositionEmbedding.md,
//    posembedding/rotary_position_embedding/op_host/op_api/aclnn_rotary_position_embedding.h,
//    posembedding/rotary_position_embedding_grad/docs/aclnnRotaryPositionEmbeddingGrad.md.
// Sums are accumulated in double; outputs are written contiguously.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "testing/operator_checks.h"
#include "testing/test_provider.h"

namespace jax_aclnn::test_provider::ops {
namespace {

// ---- Rotary position embedding.

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

JAX_ACLNN_TEST_SECOND_PHASE(RotaryPositionEmbedding)
JAX_ACLNN_TEST_SECOND_PHASE(RotaryPositionEmbeddingGrad)
