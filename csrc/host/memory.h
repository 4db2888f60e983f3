// Fresh output memory. XLA allocates each large output anew (its own mmap),
// so at 16M elements the first touch of 4 KiB pages (a fault and a page
// clearing for every 4 KiB) costs more than the kernel's own traffic. For
// such an output (contiguous, of an element-wise kernel; batch-norm
// reduce's per-channel outputs get the advice only) the kernels do two
// things (measured with bench's
// smooth_l1_loss_backward at 16M float32, 64 MiB out, on a 2-core VM whose
// THP setting is "madvise", Debian's default):
//
// * AdviseHugePages asks for transparent huge pages on the output's range,
//   turning 16384 faults per 64 MiB into 32: 26-31 ms -> 8.6-9.6 ms, in a
//   fresh process, in a training process's state (bench's realistic mode),
//   and with physical memory fragmented (every other 4 KiB page of 21 GiB
//   held, background compaction off: the faults then compacted memory
//   directly, 126 times, and the call still took 8.6 ms). Advice only: it
//   changes no data and is ignored where THP is off or unsupported.
// * Prefault (MADV_POPULATE_WRITE, Linux 5.14) faults each 2 MiB piece of
//   the output in one system call just before the task writes it, while
//   the cleared pages are still in the cache: 28 -> 20 ms where no huge
//   pages are given (THP "never"), 8.8 -> 7.9 ms and a third of the spread
//   where every page may be huge (THP "always"), 9.6 -> 9.3 ms with
//   "madvise". Prefaulting each task's whole range at once instead cost
//   time wherever huge pages were given (cleared pages leave the cache
//   before they are written).
//
// Only on memory new to the process: where the range's last page is
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
#include <unistd.h>
#endif

namespace jax_aclnn::host {
namespace {  // internal linkage: each kernel target (kernels.h) keeps its own copy

// Outputs smaller than this are left alone (they sit in malloc's heap and
// are reused without faults).
constexpr int64_t kNewMemoryBytes = int64_t{8} << 20;
// Bytes of output prefaulted at a time, right before they are written.
constexpr int64_t kPrefaultBytes = int64_t{2} << 20;

constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

inline uintptr_t RoundUp(uintptr_t p, uintptr_t to) { return (p + to - 1) & ~(to - 1); }
inline uintptr_t RoundDown(uintptr_t p, uintptr_t to) { return p & ~(to - 1); }

#if defined(__linux__)
// The system's page size: 4 KiB on x86-64, 4, 16 or 64 KiB on aarch64.
inline uintptr_t PageSize() {
  static const uintptr_t size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}
#endif

// Whether [data, data + bytes) is an output worth preparing: at least
// kNewMemoryBytes, and its last whole page not yet resident. (Not its
// first: XLA may place a small temporary that dies before the output is
// written at the start of the output's buffer, as it placed
// CrossEntropyLoss's loss in the dx of its gradient under jit(grad) before
// dx took logProb's buffer; the first page was then resident, and 524 MB
// of dx at (4096, 32000) took 128,000 faults of 4 KiB, 0.25 s, instead of
// 262 huge ones.)
inline bool IsNewMemory(const void* data, int64_t bytes) {
#if defined(__linux__)
  if (bytes < kNewMemoryBytes) return false;
  const uintptr_t last =
      RoundDown(reinterpret_cast<uintptr_t>(data) + bytes, PageSize()) - PageSize();
  unsigned char resident = 0;
  return mincore(reinterpret_cast<void*>(last), 1, &resident) == 0 && !(resident & 1);
#else
  (void)data;
  (void)bytes;
  return false;
#endif
}

// Transparent huge pages for the whole huge pages of a new output's range.
inline void AdviseHugePages(void* data, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const uintptr_t begin = RoundUp(reinterpret_cast<uintptr_t>(data), kHugePage);
  const uintptr_t end = RoundDown(reinterpret_cast<uintptr_t>(data) + bytes, kHugePage);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

// Faults in the whole pages of [data, data + bytes) of a new output, for
// writing, in one system call, where the kernel knows MADV_POPULATE_WRITE
// (Linux 5.14 and later: asked once, with an empty range, which the kernel
// accepts for every advice it knows). A refusal of one range (a mapping it
// cannot populate) leaves the pages to be faulted in by the writes.
inline void Prefault(void* data, int64_t bytes) {
#if defined(__linux__)
#ifdef MADV_POPULATE_WRITE
  constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
  constexpr int kPopulateWrite = 23;  // not in headers before Linux 5.14's
#endif
  static const bool supported =
      madvise(reinterpret_cast<void*>(PageSize()), 0, kPopulateWrite) == 0;
  const uintptr_t begin = RoundUp(reinterpret_cast<uintptr_t>(data), PageSize());
  const uintptr_t end = RoundDown(reinterpret_cast<uintptr_t>(data) + bytes, PageSize());
  if (supported && end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, kPopulateWrite);
#else
  (void)data;
  (void)bytes;
#endif
}

// For a contiguous output of `bytes` at `data`: where it is new memory,
// huge pages advised and the bytes to prefault at a time, right before
// they are written (kPrefaultBytes); else 0, nothing to do.
inline int64_t PrepareOutput(void* data, int64_t bytes) {
  if (!IsNewMemory(data, bytes)) return 0;
  AdviseHugePages(data, bytes);
  return kPrefaultBytes;
}

}  // namespace
}  // namespace jax_aclnn::host

#endif  // JAX_ACLNN_HOST_MEMORY_H_
