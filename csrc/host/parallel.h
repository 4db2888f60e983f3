// ParallelFor over the thread pool that the caller passed in its stream.
#ifndef JAX_ACLNN_HOST_PARALLEL_H_
#define JAX_ACLNN_HOST_PARALLEL_H_

#include <cstdint>

#include "aclnn_abi.h"
#include "host_stream.h"

namespace jax_aclnn::host {
namespace {  // internal linkage: each kernel target (kernels.h) keeps its own copy

// The stream as a host stream, or null when it is not one (a null stream or
// a foreign one): then work runs on the calling thread.
inline const JaxAclnnHostStream* AsHostStream(aclrtStream stream) {
  auto* s = static_cast<const JaxAclnnHostStream*>(stream);
  return (s != nullptr && s->magic == JAX_ACLNN_HOST_STREAM_MAGIC) ? s : nullptr;
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
