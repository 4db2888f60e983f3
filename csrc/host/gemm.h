// Single-threaded float32 matrix products for the kernels (the grouped
// matmul, attention): Gemm (gemm.cc, by Eigen 3.4's GEMM). Declared in each
// CPU target's namespace: kernel sources only.
#ifndef JAX_ACLNN_HOST_GEMM_H_
#define JAX_ACLNN_HOST_GEMM_H_

#include <cstdint>

namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {

// A float32 matrix in memory: element (i, j) at data[i * row_stride +
// j * col_stride], one of the two strides 1 (row- or column-major).
struct FloatMatrix {
  const float* data;
  int64_t rows, cols, row_stride, col_stride;
  // Its transpose (a view of the same memory).
  FloatMatrix T() const { return {data, cols, rows, col_stride, row_stride}; }
};

// c = alpha * a @ b, or c += alpha * a @ b when `accumulate`: c is a.rows
// x b.cols, row-major with row stride ldc; a.cols == b.rows. On the
// calling thread.
void Gemm(const FloatMatrix& a, const FloatMatrix& b, float* c, int64_t ldc, bool accumulate,
          float alpha = 1.0f);

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_HOST_GEMM_H_
