// Fresh output memory. XLA allocates each large output anew (its own mmap),
// so at 16M elements the first touch of 4 KiB pages (a fault and a page
// clearing for every 4 KiB) costs as much as the kernel's own traffic.
// Asking for transparent huge pages on the output's range turns 16384
// faults per 64 MiB into 32. Advice only: it changes no data and is ignored
// where THP is off or unsupported.
//
// Only on memory new to the process: where the range's first page is
// already resident (a buffer that malloc reuses from its heap, as it does
// for buffers of up to 32 MiB once a process has freed some, or the
// incoming gradient's buffer that the result aliases), there is no fault
// to save, and the advice would stay on memory XLA owns after the call
// (in the training loop of bench's realistic mode,
// jax_aclnn/cli/training_state.py, all 32 outputs advised before this
// check were such memory, and the process took 100 more huge-page faults
// than without them). A fresh mapping's advice ends with the buffer.
#ifndef JAX_ACLNN_HOST_MEMORY_H_
#define JAX_ACLNN_HOST_MEMORY_H_

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace jax_aclnn::host {
namespace {  // internal linkage: each kernel target (kernels.h) keeps its own copy

// Outputs smaller than this are left alone (they sit in malloc's heap and
// are reused without faults).
constexpr int64_t kHugePageAdviceBytes = int64_t{8} << 20;

inline void AdviseHugePages(void* data, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < kHugePageAdviceBytes) return;
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  unsigned char resident = 0;
  if (end <= begin || (mincore(reinterpret_cast<void*>(begin), 1, &resident) == 0 && (resident & 1)))
    return;
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace
}  // namespace jax_aclnn::host

#endif  // JAX_ACLNN_HOST_MEMORY_H_
