// What the FFI handlers did through the aclnn interface (runtime_stats()).
// Lock-free counters: the hot path only does relaxed atomic increments.
#ifndef JAX_ACLNN_FFI_STATS_H_
#define JAX_ACLNN_FFI_STATS_H_

#include <atomic>
#include <cstdint>

#include "operators.h"

namespace jax_aclnn {

struct OpCounters {
  std::atomic<int64_t> get_workspace_size{0};
  std::atomic<int64_t> execute{0};
};

struct RuntimeStats {
  OpCounters calls[kNumOps];
  std::atomic<int64_t> live_tensors{0};    // aclTensor and aclScalar descriptors
  std::atomic<int64_t> live_executors{0};  // created and not yet consumed/destroyed
};

RuntimeStats& Stats();

inline void Count(std::atomic<int64_t>& counter, int64_t delta = 1) {
  counter.fetch_add(delta, std::memory_order_relaxed);
}

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_FFI_STATS_H_
