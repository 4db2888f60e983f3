// CPU kernels of the host provider. They see validated views only; all
// argument checking happens in provider.cc, as CANN does it in its
// GetWorkspaceSize phase.
#ifndef JAX_ACLNN_HOST_KERNELS_H_
#define JAX_ACLNN_HOST_KERNELS_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "aclnn_abi.h"
#include "host_stream.h"
#include "operators.h"

namespace jax_aclnn::host {

constexpr int kMaxRank = 8;

// A strided view of a tensor. `data` points at the first element (the
// descriptor's offset already applied); strides are in elements.
struct View {
  void* data = nullptr;
  aclDataType dtype = ACL_FLOAT;
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
  int64_t NumElements() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
};

// The element-wise operators' parameters: an operator's Params struct
// (csrc/ops/<op>_kernel.h), held by value in the executor.
struct PointwiseParams {
  alignas(8) unsigned char bytes[16] = {};
  template <typename P>
  static PointwiseParams Of(const P& params) {
    static_assert(sizeof(P) <= sizeof(bytes) && std::is_trivially_copyable_v<P>);
    PointwiseParams held;
    std::memcpy(held.bytes, &params, sizeof(P));
    return held;
  }
  template <typename P>
  P As() const {
    P params;
    std::memcpy(&params, bytes, sizeof(P));
    return params;
  }
};

// The kernels' entry points. kernels.cc and batch_norm_kernel.cc define
// them once per CPU target, in jax_aclnn::host::<target>, compiled for that
// target (CMakeLists.txt); dispatch.cc defines them in jax_aclnn::host,
// calling the best target the CPU supports.
//
// RunPointwise: an element-wise operator (one with a PointwiseKernel). Every
// input view has the output's rank and dims, with stride 0 along broadcast
// dimensions.
// HalfConversions: how the target converts contiguous float16 ("F16C ...").
// BatchNormReduceBackward over an (N, C, ...) input: per-channel sums.
// `outputs` holds sumDy, sumDyXmu, gradWeight, gradBias; null = not wanted.
#define JAX_ACLNN_KERNEL_ENTRY_POINTS                                                         \
  void RunPointwise(OpId op, const PointwiseParams& params, const View* inputs,             \
                    int num_inputs, const View& out, const JaxAclnnHostStream* stream);      \
  uint64_t BatchNormReduceWorkspaceSize(const View& input);                                  \
  void RunBatchNormReduce(const View& grad_out, const View& input, const View& mean,         \
                          const View& invstd, const View* const outputs[4], void* workspace, \
                          const JaxAclnnHostStream* stream);                         \
  const char* HalfConversions();

JAX_ACLNN_KERNEL_ENTRY_POINTS

// The CPU target whose kernels run ("x86-64-v3", "native", ...).
const char* KernelTarget();

}  // namespace jax_aclnn::host

#endif  // JAX_ACLNN_HOST_KERNELS_H_
