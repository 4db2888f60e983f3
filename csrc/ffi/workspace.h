// The handlers' workspace sources: XLA's scratch allocator on the NPU, a
// reused per-thread buffer on the CPU.
#ifndef JAX_ACLNN_FFI_WORKSPACE_H_
#define JAX_ACLNN_FFI_WORKSPACE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jax_aclnn {

// Workspace sources. On the NPU: XLA's scratch allocator (device memory
// owned by the framework for the duration of the call). XLA's CPU runtime
// has no scratch allocator, so on the CPU: a per-thread buffer that grows
// to the largest workspace seen up to kRetainedWorkspace bytes and is
// reused, with no allocation per call; a larger workspace is the call's own
// and freed when it returns, so a thread never keeps more than that.
struct ScratchWorkspace {
  // XLA's device-memory allocation refuses alignments above 16
  // (kMaxAlignment in xla/ffi/ffi_api.cc); device allocations are aligned
  // more coarsely anyway.
  static constexpr size_t kAlignment = 16;
  ffi::ScratchAllocator& scratch;
  void* operator()(uint64_t size) const {
    std::optional<void*> ws = scratch.Allocate(size, kAlignment);
    return ws.value_or(nullptr);
  }
};

constexpr uint64_t kRetainedWorkspace = uint64_t{16} << 20;

struct HostWorkspace {
  mutable std::unique_ptr<std::byte[]> own;  // a workspace above kRetainedWorkspace
  void* operator()(uint64_t size) const {
    if (size > kRetainedWorkspace) {
      own.reset(new (std::nothrow) std::byte[size]);
      return own.get();
    }
    thread_local std::unique_ptr<std::byte[]> buffer;
    thread_local uint64_t capacity = 0;
    if (size > capacity) {
      buffer.reset(new (std::nothrow) std::byte[size]);
      capacity = buffer ? size : 0;
    }
    return buffer.get();
  }
};

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_FFI_WORKSPACE_H_
