// What the FFI handlers did through the aclnn interface (runtime_stats()).
// Lock-free counters: the hot path only does relaxed atomic increments.
#ifndef JAX_ACLNN_FFI_STATS_H_
#define JAX_ACLNN_FFI_STATS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jax_aclnn {

struct OpCounters {
  std::atomic<int64_t> get_workspace_size{0};
  std::atomic<int64_t> execute{0};
};

struct RuntimeStats {
  std::atomic<int64_t> live_tensors{0};    // aclTensor, aclScalar, array and list descriptors
  std::atomic<int64_t> live_executors{0};  // created and not yet consumed/destroyed
};

RuntimeStats& Stats();

// The counters of aclnn operator `name` (e.g. "aclnnLogitGrad"), made on
// first use; they live as long as the process.
OpCounters& OperatorCounters(std::string_view name);
// Every operator's counters so far, in the order they were made.
std::vector<std::pair<std::string, OpCounters*>> AllOperatorCounters();

inline void Count(std::atomic<int64_t>& counter, int64_t delta = 1) {
  counter.fetch_add(delta, std::memory_order_relaxed);
}

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_FFI_STATS_H_
