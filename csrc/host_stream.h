// The "stream" the CPU handlers pass to the host provider.
//
// On an NPU, aclnnXxx(..., stream) receives an aclrtStream. On the CPU the
// FFI handler passes a pointer to this struct instead, which hands the
// provider XLA's intra-op thread pool (the FFI ThreadPool context): the
// provider runs its kernels on XLA's threads and never starts its own.
// The handler makes it in its own frame, on the stack of the thread that
// calls aclnnXxx; the provider reads a stream only there (anything else,
// a null or stray pointer included, is never followed), and one without the
// magic tag runs on the calling thread.
#ifndef JAX_ACLNN_HOST_STREAM_H_
#define JAX_ACLNN_HOST_STREAM_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define JAX_ACLNN_HOST_STREAM_MAGIC 0x4e4c43414a58414aULL /* "JAXACLN" */

// Runs fn(arg, i) for every i in [0, num_tasks), possibly in parallel, and
// returns when all have finished.
typedef void (*JaxAclnnParallelFor)(void* pool, int64_t num_tasks,
                                    void (*fn)(void* arg, int64_t task),
                                    void* arg);

typedef struct {
  uint64_t magic;       // JAX_ACLNN_HOST_STREAM_MAGIC
  int64_t num_threads;  // threads available to parallel_for (>= 1)
  void* pool;           // opaque, passed back to parallel_for
  JaxAclnnParallelFor parallel_for;
} JaxAclnnHostStream;

// The CPU target whose kernels the host provider runs, chosen on first use
// ("x86-64", "x86-64-v3", "x86-64-v4", "armv8-a", "armv8.2-a+sve",
// "native"), and how those kernels convert float16 ("F16C
// vcvtph2ps/vcvtps2ph", "NEON fcvtl/fcvtn", "portable formulas"): the host
// provider's two exports beyond the aclnn ABI.
const char* JaxAclnnHostKernelTarget(void);
const char* JaxAclnnHostHalfConversions(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // JAX_ACLNN_HOST_STREAM_H_
