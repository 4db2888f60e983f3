// Chunks of elements, the grain of tasks and the conversion of contiguous
// float16/bfloat16 runs to floats, shared by the kernels (kernels.cc,
// batch_norm_kernel.cc, rms_norm_kernel.cc, swiglu_kernel.cc,
// rope_kernel.cc, cross_entropy_kernel.cc).
// Compiled once per kernel target (kernels.h), in its namespace, with
// internal linkage: each kernel file keeps its own copy.
#ifndef JAX_ACLNN_HOST_HALF_RUNS_H_
#define JAX_ACLNN_HOST_HALF_RUNS_H_

#include <algorithm>
#include <cstdint>

#include "aclnn_abi.h"
#include "host/dtype.h"

#ifdef JAX_ACLNN_KERNEL_TARGET
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

// Elements converted at a time: four float buffers of this size stay in L1.
constexpr int64_t kChunk = 1024;

// Smallest amount of work (elements) worth a task of its own.
constexpr int64_t kGrain = 1 << 15;

// A contiguous run of float16/bfloat16 elements to convert to floats.
struct HalfRun {
  aclDataType type;
  const char* src;
  float* dst;
};

// Converts `len` elements of each run, all runs together a cache line at a
// time, each prefetched kPrefetchBytes ahead. Converted one run after
// another, the loads waited on each run's memory in turn (the runs lie in
// different pages, where the hardware prefetcher starts over): `perf` put
// the time on the conversion loop's stores, and float16 batch-norm reduce
// took 1.8x as long as float32, element-wise operators at 1M elements up to
// 1.4x as long as XLA's fused code. (Float32 inputs are read in place, all
// together by the operator's loop; prefetching them made it slower.) Used
// where half-precision operands cannot stay in registers (simd.h): next to
// a strided operand or output, float16 on a target without vector
// conversions, batch-norm's last rows of a block.
constexpr int64_t kHalfsPerStep = 64;  // two cache lines
constexpr int64_t kPrefetchBytes = 1024;

inline void ConvertTogether(const HalfRun* runs, int count, int64_t len) {
  for (int64_t j = 0; j < len; j += kHalfsPerStep) {
    const int64_t n = std::min(kHalfsPerStep, len - j);
    for (int r = 0; r < count; ++r) {
      const auto* src = reinterpret_cast<const uint16_t*>(runs[r].src) + j;
      __builtin_prefetch(reinterpret_cast<const char*>(src) + kPrefetchBytes);
      __builtin_prefetch(reinterpret_cast<const char*>(src) + kPrefetchBytes + 64);
      if (runs[r].type == ACL_FLOAT16)
        HalvesToFloats(src, n, runs[r].dst + j);
      else
        Bf16sToFloats(src, n, runs[r].dst + j);
    }
  }
}

}  // namespace
}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_HOST_HALF_RUNS_H_
