// The row kernels' common walk (rms_norm_kernel.cc, cross_entropy_kernel.cc,
// rope_kernel.cc): a row of a view as floats a chunk at a time, contiguous
// float parameters, the split of rows into tasks and the prefaulting of a
// fresh output. Compiled once per kernel target (kernels.h), in its
// namespace, with internal linkage: each kernel file keeps its own copy.
#ifndef JAX_ACLNN_HOST_ROW_KERNELS_H_
#define JAX_ACLNN_HOST_ROW_KERNELS_H_

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "host/dtype.h"
#include "host/half_runs.h"
#include "host/kernels.h"
#include "host/memory.h"
#include "host/parallel.h"
#include "host/rows.h"
#include "host/simd.h"

#ifdef JAX_ACLNN_KERNEL_TARGET
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

// One row of a view (rows.h): its first element and the stride between
// its elements.
struct Row {
  const View* v;
  int64_t offset, stride;
  char* At(int64_t j) const {
    return static_cast<char*>(v->data) + (offset + j * stride) * ElementSize(v->dtype);
  }
  // Elements [c, c + len) as floats: the memory itself where it is
  // contiguous float32, else converted into buf.
  const float* Load(int64_t c, int64_t len, float* buf) const {
    if (v->dtype == ACL_FLOAT && stride == 1) return reinterpret_cast<const float*>(At(c));
    LoadAsFloat(v->dtype, At(c), stride, len, buf);
    return buf;
  }
  // Where to compute elements [c, c + len): the memory itself where it is
  // contiguous float32 (Store is then a no-op), else buf.
  float* Out(int64_t c, float* buf) const {
    return v->dtype == ACL_FLOAT && stride == 1 ? reinterpret_cast<float*>(At(c)) : buf;
  }
  void Store(int64_t c, int64_t len, const float* values) const {
    if (!(v->dtype == ACL_FLOAT && stride == 1)) StoreFromFloat(v->dtype, values, len, At(c), stride);
  }
};

// Row r of a view whose first `lead` dimensions index the rows.
inline Row RowOf(const View& v, int lead, int64_t r) {
  int64_t stride = 1;
  RowElementStride(v, lead, &stride);  // checked by the first phase
  return {&v, RowOffset(v, lead, r), stride};
}

// A parameter (gamma, a class weight) as n floats: in place where it is
// contiguous float32, else converted into `workspace`.
inline const float* ContiguousFloats(const View& v, int64_t n, float* workspace) {
  return RowOf(v, 0, 0).Load(0, n, workspace);
}

// --- Rows in registers --------------------------------------------------
// Contiguous rows of one type D the target loads into float vectors itself
// (float32, bfloat16, float16 with vector conversions: simd.h): a row's
// formula reads and writes memory a vector at a time, with no float buffer
// and no per-row dispatch on the type. On narrow rows (16-64 elements) the
// buffered walk above (a Row per operand, Load/Out/Store a chunk at a time)
// took 2.5-3.5x as long.

template <aclDataType D>
using RowType = std::integral_constant<aclDataType, D>;

// f(RowType<D>{}) for views of type t where the target converts t in
// registers, and true; false (f not called) for the others.
template <typename F>
bool WithRowType(aclDataType t, const F& f) {
  switch (t) {
    case ACL_FLOAT: f(RowType<ACL_FLOAT>{}); return true;
    case ACL_BF16: f(RowType<ACL_BF16>{}); return true;
    case ACL_FLOAT16:
      if constexpr (kVectorFloat16) {
        f(RowType<ACL_FLOAT16>{});
        return true;
      }
      return false;
    default: return false;
  }
}

// Whether every view given (null: absent) is contiguous and of type t.
inline bool AllContiguous(aclDataType t, std::initializer_list<const View*> views) {
  for (const View* v : views)
    if (v != nullptr && (v->dtype != t || !IsContiguous(*v))) return false;
  return true;
}

// Element j of a contiguous row of type D at p, as T (float or Vec), and back.
template <aclDataType D, typename T>
inline T At(const void* p, int64_t j) {
  return LoadFloats<D, T>(static_cast<const char*>(p) + j * ElementSize(D));
}
template <aclDataType D, typename T>
inline void Put(void* p, int64_t j, T v) {
  StoreFloats<D>(static_cast<char*>(p) + j * ElementSize(D), v);
}

// Row r of a contiguous view of type D whose rows hold n elements.
template <aclDataType D>
inline char* RowData(const View& v, int64_t n, int64_t r) {
  return static_cast<char*>(v.data) + r * n * ElementSize(D);
}

// f(j, T{}) over a row of n elements: T = Vec at each whole vector's
// first element j, then T = float at each element left.
template <typename F>
inline void ForLanes(int64_t n, const F& f) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) f(j, Vec{});
  for (; j < n; ++j) f(j, 0.0f);
}

// The sum of term(j, T{}) over a row of n elements, walked as ForLanes
// walks it (term may also store: RMSNorm's writes AddRmsNorm's x1 + x2),
// in four vector partial sums, so that each add does not wait on the last
// (with one, that wait was 44% of RMSNorm's time on rows of 1024 in L2,
// perf; four: 14.6 -> 12.2 us at (64, 1024) float32 on one thread). They
// are locals of this function, so they stay in registers whatever term
// writes (a sum the walk's lambda captured by reference was kept on the
// stack in one variant, each add then waiting on the last one's store).
template <typename Term>
inline float SumOfLanes(int64_t n, const Term& term) {
  Vec a0{}, a1{}, a2{}, a3{};
  int64_t j = 0;
  for (; j + 4 * kLanes <= n; j += 4 * kLanes) {
    a0 += term(j, Vec{});
    a1 += term(j + kLanes, Vec{});
    a2 += term(j + 2 * kLanes, Vec{});
    a3 += term(j + 3 * kLanes, Vec{});
  }
  for (; j + kLanes <= n; j += kLanes) a0 += term(j, Vec{});
  float tail = 0.0f;
  for (; j < n; ++j) tail += term(j, 0.0f);
  return SumLanes((a0 + a1) + (a2 + a3)) + tail;
}

// Splits `rows` rows of n elements into tasks of about kGrain elements or
// more, at most 4 per thread.
inline int64_t RowTasks(int64_t rows, int64_t n, const JaxAclnnHostStream* stream) {
  const int64_t work = std::max<int64_t>(1, rows * std::max<int64_t>(n, 1));
  return std::max<int64_t>(
      1, std::min({rows, (work + kGrain - 1) / kGrain, 4 * NumThreads(stream)}));
}

// Rows [r0, r1) of a contiguous output of rows of n elements, a piece at a
// time, each piece prefaulted where it is new memory (memory.h):
// body(p, q) for each piece [p, q).
template <typename Body>
void PiecesOfRows(const View& out, int64_t n, int64_t piece_bytes, int64_t r0, int64_t r1,
                  const Body& body) {
  const int64_t row_bytes = std::max<int64_t>(1, n * ElementSize(out.dtype));
  const int64_t rows_per_piece =
      piece_bytes > 0 ? std::max<int64_t>(1, piece_bytes / row_bytes) : r1 - r0;
  for (int64_t p = r0; p < r1; p += rows_per_piece) {
    const int64_t q = std::min(r1, p + rows_per_piece);
    if (piece_bytes > 0) Prefault(static_cast<char*>(out.data) + p * row_bytes, (q - p) * row_bytes);
    body(p, q);
  }
}

// The same, body(r) for each row.
template <typename Body>
void RowsInPieces(const View& out, int64_t n, int64_t piece_bytes, int64_t r0, int64_t r1,
                  const Body& body) {
  PiecesOfRows(out, n, piece_bytes, r0, r1, [&](int64_t p, int64_t q) {
    for (int64_t r = p; r < q; ++r) body(r);
  });
}

// The prefault piece of an output RowsInPieces writes (0: nothing to do).
inline int64_t PieceBytes(const View& out) {
  return IsContiguous(out) ? PrepareOutput(out.data, out.NumElements() * ElementSize(out.dtype))
                           : 0;
}

// Rows [0, rows) of n elements each, split into tasks (RowTasks), each
// walking its rows in prefaulted pieces of `out` (PiecesOfRows):
// body(p, q) for each piece [p, q) (a walk that keeps its own row index).
template <typename Body>
void ForEachPieceOfRows(int64_t rows, int64_t n, const View& out,
                        const JaxAclnnHostStream* stream, const Body& body) {
  if (rows == 0) return;
  const int64_t piece = PieceBytes(out);
  const int64_t tasks = RowTasks(rows, n, stream);
  ParallelFor(stream, tasks, [&](int64_t t) {
    PiecesOfRows(out, n, piece, rows * t / tasks, rows * (t + 1) / tasks, body);
  });
}

// The same, body(r) for each row.
template <typename Body>
void ForEachRow(int64_t rows, int64_t n, const View& out, const JaxAclnnHostStream* stream,
                const Body& body) {
  ForEachPieceOfRows(rows, n, out, stream, [&](int64_t p, int64_t q) {
    for (int64_t r = p; r < q; ++r) body(r);
  });
}

}  // namespace
}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_HOST_ROW_KERNELS_H_
