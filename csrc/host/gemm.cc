// Gemm (gemm.h) by Eigen 3.4's GEMM: as fast as OpenBLAS on this project's
// x86-64 machines (measured single-threaded: 90-106 GFLOP/s against
// OpenBLAS's 92-102 on a Zen 4), header-only, and without a thread pool of
// its own (EIGEN_DONT_PARALLELIZE): the kernels call it inside the
// provider's ParallelFor. Compiled once per CPU target, with Eigen in a
// namespace of the target's own (CMakeLists.txt), so each target's copy
// keeps its instructions; one file, so that Eigen's templates are compiled
// once per target for every kernel that multiplies matrices.
#include <Eigen/Core>
#include <algorithm>
#include <cstdint>

#include "host/gemm.h"

namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

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

}  // namespace

void Gemm(const FloatMatrix& a, const FloatMatrix& b, float* c, int64_t ldc, bool accumulate,
          float alpha) {
  using RowMajorMap =
      Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>,
                 Eigen::Unaligned, Eigen::OuterStride<>>;
  if (a.rows == 0 || b.cols == 0) return;
  RowMajorMap out(c, a.rows, b.cols, Eigen::OuterStride<>(ldc));
  // c = 0 first where not accumulating, then one product: c += alpha * a @ b
  // (Eigen's GEMM takes alpha itself). Zeroed here, with one fill where c's
  // rows are contiguous: Eigen's setZero on a strided map peeled each row
  // to its alignment with scalar stores, 8% of attention's processor time
  // at train-lm's 64 tokens (perf), whose scores are blocks of 32 floats
  // a row.
  if (!accumulate) {
    if (ldc == b.cols)
      std::fill_n(c, a.rows * ldc, 0.0f);
    else
      for (int64_t i = 0; i < a.rows; ++i) std::fill_n(c + i * ldc, b.cols, 0.0f);
  }
  if (a.cols == 0) return;
  WithEigen(a, [&](const auto& ea) {
    WithEigen(b, [&](const auto& eb) { out.noalias() += alpha * (ea * eb); });
  });
}

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
