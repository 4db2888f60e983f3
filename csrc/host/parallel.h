// ParallelFor over the thread pool that the caller passed in its stream.
#ifndef JAX_ACLNN_HOST_PARALLEL_H_
#define JAX_ACLNN_HOST_PARALLEL_H_

#include <pthread.h>

#include <cstddef>
#include <cstdint>

#include "aclnn_abi.h"
#include "host_stream.h"

namespace jax_aclnn::host {
namespace {  // internal linkage: each kernel target (kernels.h) keeps its own copy

// The highest address of the calling thread's stack (0 when unknown).
inline uintptr_t StackTop() {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
  void* low = nullptr;
  size_t size = 0;
  const int rc = pthread_attr_getstack(&attr, &low, &size);
  pthread_attr_destroy(&attr);
  return rc == 0 ? reinterpret_cast<uintptr_t>(low) + size : 0;
}

// The stream as a host stream, or null when it is not one (a null stream or
// a foreign one): then work runs on the calling thread. A host stream lives
// in a caller's frame on the calling thread's stack (the FFI handler makes
// it there), so the pointer is only read when it lies between this frame
// and the stack's top, memory that is certainly mapped: an aclrtStream of
// CANN's, or any stray pointer, is never followed.
inline const JaxAclnnHostStream* AsHostStream(aclrtStream stream) {
  thread_local const uintptr_t top = StackTop();
  const auto p = reinterpret_cast<uintptr_t>(stream);
  const auto frame = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (p % alignof(JaxAclnnHostStream) != 0 || p <= frame || top < sizeof(JaxAclnnHostStream) ||
      p > top - sizeof(JaxAclnnHostStream))
    return nullptr;
  auto* s = static_cast<const JaxAclnnHostStream*>(stream);
  return (s->magic == JAX_ACLNN_HOST_STREAM_MAGIC && s->parallel_for != nullptr) ? s : nullptr;
}

inline int64_t NumThreads(const JaxAclnnHostStream* s) {
  return (s != nullptr && s->num_threads > 1) ? s->num_threads : 1;
}

// Runs body(t) for t in [0, num_tasks) and returns when all are done.
template <typename Body>
void ParallelFor(const JaxAclnnHostStream* s, int64_t num_tasks, const Body& body) {
  if (num_tasks <= 1 || NumThreads(s) == 1) {
    for (int64_t t = 0; t < num_tasks; ++t) body(t);
    return;
  }
  s->parallel_for(
      s->pool, num_tasks,
      [](void* arg, int64_t t) { (*static_cast<const Body*>(arg))(t); },
      const_cast<Body*>(&body));
}

}  // namespace
}  // namespace jax_aclnn::host

#endif  // JAX_ACLNN_HOST_PARALLEL_H_
