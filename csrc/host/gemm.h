// Single-threaded float32 matrix products for the kernels (attention, the
// grouped matmul), by Eigen 3.4's GEMM: as fast as OpenBLAS on this
// project's x86-64 machines, header-only, and without a thread pool of its
// own (EIGEN_DONT_PARALLELIZE); the kernels run it inside the provider's
// ParallelFor. Included only by kernel sources: each CPU target compiles
// Eigen in a namespace of its own (CMakeLists.txt), with its instructions.
#ifndef JAX_ACLNN_HOST_GEMM_H_
#define JAX_ACLNN_HOST_GEMM_H_

#include <Eigen/Core>
#include <cstdint>

namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

// A float32 matrix in memory: element (i, j) at data[i * row_stride +
// j * col_stride], one of the two strides 1 (row- or column-major).
struct FloatMatrix {
  const float* data;
  int64_t rows, cols, row_stride, col_stride;
  // Its transpose (a view of the same memory).
  FloatMatrix T() const { return {data, cols, rows, col_stride, row_stride}; }
};

template <int Order>
using ConstMap = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Order>,
                            Eigen::Unaligned, Eigen::OuterStride<>>;

// Calls fn with `m` as an Eigen expression.
template <typename Fn>
void WithEigen(const FloatMatrix& m, const Fn& fn) {
  if (m.col_stride == 1)
    fn(ConstMap<Eigen::RowMajor>(m.data, m.rows, m.cols, Eigen::OuterStride<>(m.row_stride)));
  else
    fn(ConstMap<Eigen::ColMajor>(m.data, m.rows, m.cols, Eigen::OuterStride<>(m.col_stride)));
}

// c = a @ b, or c += a @ b when `accumulate`: c is a.rows x b.cols,
// row-major with row stride ldc. a.cols == b.rows.
inline void Gemm(const FloatMatrix& a, const FloatMatrix& b, float* c, int64_t ldc,
                 bool accumulate) {
  using RowMajorMap =
      Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>,
                 Eigen::Unaligned, Eigen::OuterStride<>>;
  RowMajorMap out(c, a.rows, b.cols, Eigen::OuterStride<>(ldc));
  if (a.rows == 0 || b.cols == 0) return;
  if (a.cols == 0) {
    if (!accumulate) out.setZero();
    return;
  }
  WithEigen(a, [&](const auto& ea) {
    WithEigen(b, [&](const auto& eb) {
      if (accumulate)
        out.noalias() += ea * eb;
      else
        out.noalias() = ea * eb;
    });
  });
}

}  // namespace
}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_HOST_GEMM_H_
