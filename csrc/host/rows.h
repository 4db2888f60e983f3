// The rows of a view, as a normalization walks them. Its first `lead`
// dimensions index the rows, the others hold each row's elements (the
// normalized dimensions), walked with one stride. Used by the first phases
// (their layout checks) and the row kernels alike.
#ifndef JAX_ACLNN_HOST_ROWS_H_
#define JAX_ACLNN_HOST_ROWS_H_

#include <cstdint>

#include "host/kernels.h"

namespace jax_aclnn::host {
namespace {  // internal linkage: each kernel target (kernels.h) keeps its own copy

// The product of the view's dimensions [begin, end).
inline int64_t DimsProduct(const View& v, int begin, int end) {
  int64_t p = 1;
  for (int d = begin; d < end; ++d) p *= v.dims[d];
  return p;
}

// The stride that walks dimensions [lead, rank) as one (size-1 dimensions
// ignored; 1 when there are none), or false when they do not collapse.
inline bool RowElementStride(const View& v, int lead, int64_t* stride) {
  int64_t s = 0, next = 0;  // next: the stride the dimension before must have
  for (int d = v.rank - 1; d >= lead; --d) {
    if (v.dims[d] == 1) continue;
    if (s == 0) s = v.strides[d];
    else if (v.strides[d] != next) return false;
    next = v.strides[d] * v.dims[d];
  }
  *stride = s == 0 ? 1 : s;
  return true;
}

// Whether the view's elements lie in row-major order without gaps.
inline bool IsContiguous(const View& v) {
  int64_t s;
  return RowElementStride(v, 0, &s) && s == 1;
}

// The element offset of row r (row-major over dimensions [0, lead)).
inline int64_t RowOffset(const View& v, int lead, int64_t r) {
  int64_t offset = 0;
  for (int d = lead - 1; d >= 0 && r > 0; --d) {
    offset += (r % v.dims[d]) * v.strides[d];
    r /= v.dims[d];
  }
  return offset;
}

}  // namespace
}  // namespace jax_aclnn::host

#endif  // JAX_ACLNN_HOST_ROWS_H_
