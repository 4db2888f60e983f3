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
// (csrc/ops/<op>_kernel.h), held by value in the executor (and any
// operator's attributes: AdamWParams, 24 bytes, the largest; a kernel
// copies only its own struct's bytes out).
struct PointwiseParams {
  alignas(8) unsigned char bytes[24] = {};
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

// CrossEntropyLoss(Grad)'s attributes (cross_entropy.cc fills them).
enum class Reduction : int32_t { kNone, kMean, kSum };
struct CrossEntropyAttrs {
  int64_t ignore_index;
  float label_smoothing;
  Reduction reduction;
};

// aclnnFlashAttentionScore(+Grad)'s attributes (csrc/ops/flash_attention_score.cc):
// the logits' scale, CANN's preTokens/nextTokens (clamped to int32: every
// band wider than the sequences is the same) and sparseMode (0-4).
struct AttentionParams {
  float scale;
  int32_t pre, next, sparse;
};

// aclnnApplyAdamW's and aclnnApplyAdamWV2's scalars (V2's float and bool
// attributes; V1's one-element tensors, read when it runs:
// csrc/ops/apply_adam_w.cc).
struct AdamWParams {
  float lr, beta1, beta2, weight_decay, eps;
  bool amsgrad, maximize;
};

// The kernels' entry points. The kernel sources (host/*_kernel.cc,
// kernels.cc) define them once per CPU target, in
// jax_aclnn::host::<target>, compiled for that target (CMakeLists.txt);
// dispatch.cc defines them in jax_aclnn::host, calling the best target the
// CPU supports.
//
// RunPointwise: an element-wise operator (one with a PointwiseKernel). Every
// input view has the output's rank and dims, with stride 0 along broadcast
// dimensions.
// HalfConversions: how the target converts contiguous float16 ("F16C ...").
// BatchNormReduceBackward over an (N, C, ...) input: per-channel sums.
// `outputs` holds sumDy, sumDyXmu, gradWeight, gradBias; null = not wanted.
// RmsNorm over the rows of x (its first `lead` dimensions; rows.h), of x1
// + x2 where x2 is given (AddRmsNorm, which writes the sum to xOut); rstd
// and x_out may be null. RmsNormGrad: dx and dgamma (summed over the rows).
// SwiGlu over `outer` blocks of x, each A then B (`run` contiguous elements
// each; out: `run` per block), and its gradient (dx in x's layout).
// GroupedMatmul (aclnnGroupedMatmulV4's single-tensor forms): along M, out
// (m, n) rows of group e = x's rows @ weight[e] (+ bias[e]; rows past the
// groups: zeros); along K, out[e] (m, n) = x[:, ks of e] @
// weight[ks of e]. group_list: int64 counts or cumulative sums; out
// contiguous.
// Rope: out = x * cos + rotate(x) * sin over contiguous (B, S, N, D) x,
// cos/sin contiguous (B|1, S|1, N|1, D) (mode 0 half, 1 interleave, 2
// quarter); RopeGrad: dx, and with x dcos and dsin (summed over cos's
// broadcast dimensions; null without x).
// CrossEntropyLoss over the rows of input (N, C): loss and logProb (a
// weight of C floats or null; target int32 or int64), and its gradient
// from logProb.
// FlashAttention (aclnnFlashAttentionScore, layout BSND: q [B, T, N, D], k
// and v [B, S, K, D(v)], any strides): out [B, T, N, Dv] and the softmax
// statistics [B, N, T, 8]; pse ([B|1, N, T|1, S]) and mask ([T, S] or [B|1,
// N|1, T, S], 1 byte, nonzero = masked; not read for sparse modes 2-4) may
// be null. FlashAttentionGrad: dq, dk, dv (and dpse, when pse and dpse are
// given) from dy, the forward's output and statistics.
// The mixture-of-experts routing (csrc/ops/moe.cc; contiguous tensors,
// int32 indices; an index out of range is skipped, never followed):
// MoeGating: per row of x (..., E), renorm false: the top k of softmax(x),
// true: softmax over the top k of x; y in x's type, ids int32 (E where
// `finished`, a bool per row, is set). MoePermute: the choices (indices
// int32 or int64, (T, k) or (T,)) in a stable counting sort by expert;
// sorted int32 (n,) the row each choice went to, permuted the first
// rows of tokens[choice / k] in that order. MoeGatherSum: out[t] = sum_j
// w[t, j] * data[sorted[t * k + j]] (w: probs, or 1 where null;
// aclnnMoeTokenUnpermute and aclnnMoeTokenPermuteGrad). MoeUnpermuteGrad:
// dx[sorted[t * k + j]] = dy[t] * w[t, j] (rows no index names: zeros)
// and, where dprobs is given, dprobs[t, j] = dy[t] . x[sorted[t * k + j]].
// Sums in float32.
// ApplyAdamW: one AdamW update of contiguous var, m, v (in place) from grad,
// all of one type, the bias corrections from beta1_power and beta2_power
// (beta^t of this update); with params.amsgrad the denominator takes
// max(max_in, v), also written to max_out where that is given (V2's
// maxGradNormOptionalRef; V1's maxGradNormOptional is read only).
#define JAX_ACLNN_KERNEL_ENTRY_POINTS                                                         \
  void RunPointwise(OpId op, const PointwiseParams& params, const View* inputs,             \
                    int num_inputs, const View& out, const JaxAclnnHostStream* stream);      \
  uint64_t BatchNormReduceWorkspaceSize(const View& input);                                  \
  void RunBatchNormReduce(const View& grad_out, const View& input, const View& mean,         \
                          const View& invstd, const View* const outputs[4], void* workspace, \
                          const JaxAclnnHostStream* stream);                                 \
  uint64_t RmsNormWorkspaceSize(const View& x, int lead);                                    \
  void RunRmsNorm(const View& x1, const View* x2, const View& gamma, int lead, float epsilon, \
                  const View& y, const View* rstd, const View* x_out, void* workspace,        \
                  const JaxAclnnHostStream* stream);                                         \
  uint64_t RmsNormGradWorkspaceSize(const View& x, int lead);                                \
  void RunRmsNormGrad(const View& dy, const View& x, const View& rstd, const View& gamma,    \
                      int lead, const View& dx, const View& dgamma, void* workspace,         \
                      const JaxAclnnHostStream* stream);                                     \
  void RunSwiGlu(const View& x, int64_t outer, int64_t run, const View& out,                 \
                 const JaxAclnnHostStream* stream);                                          \
  void RunSwiGluGrad(const View& dy, const View& x, int64_t outer, int64_t run,              \
                     const View& dx, const JaxAclnnHostStream* stream);                      \
  void RunGroupedMatmul(const View& x, const View& weight, const View* bias,                 \
                        const View& group_list, bool counts, bool along_k, const View& out,  \
                        const JaxAclnnHostStream* stream);                                   \
  void RunRope(const View& x, const View& cos, const View& sin, int mode, const View& out,   \
               const JaxAclnnHostStream* stream);                                            \
  uint64_t RopeGradWorkspaceSize(const View& dy, const View& cos);                           \
  void RunRopeGrad(const View& dy, const View& cos, const View& sin, const View* x, int mode, \
                   const View& dx, const View* dcos, const View* dsin, void* workspace,     \
                   const JaxAclnnHostStream* stream);                                        \
  uint64_t CrossEntropyWorkspaceSize(const View& input, bool forward);                       \
  void RunCrossEntropyLoss(const View& input, const View& target, const View* weight,        \
                           const CrossEntropyAttrs& attrs, const View& loss,                 \
                           const View& log_prob, void* workspace,                            \
                           const JaxAclnnHostStream* stream);                                \
  void RunCrossEntropyLossGrad(const View& grad_loss, const View& log_prob,                  \
                               const View& target, const View* weight,                       \
                               const CrossEntropyAttrs& attrs, const View& out,              \
                               void* workspace, const JaxAclnnHostStream* stream);           \
  void RunFlashAttention(const View& q, const View& k, const View& v, const View* pse,       \
                         const View* mask, const AttentionParams& p, const View& max_out,    \
                         const View& sum_out, const View& out,                               \
                         const JaxAclnnHostStream* stream);                                  \
  void RunFlashAttentionGrad(const View& q, const View& k, const View& v, const View& dy,    \
                             const View* pse, const View* mask, const View& max_in,          \
                             const View& sum_in, const View& out_in,                         \
                             const AttentionParams& p, const View& dq, const View& dk,       \
                             const View& dv, const View* dpse,                               \
                             const JaxAclnnHostStream* stream);                              \
  void RunApplyAdamW(const View& var, const View& m, const View& v, const View* max_in,      \
                     const View* max_out, const View& grad, const AdamWParams& params,       \
                     float beta1_power, float beta2_power, const JaxAclnnHostStream* stream); \
  void RunMoeGating(const View& x, const View* finished, int64_t k, bool renorm, const View& y, \
                    const View& ids, const JaxAclnnHostStream* stream);                      \
  void RunMoePermute(const View& tokens, const View& indices, const View& permuted,          \
                     const View& sorted, void* workspace, const JaxAclnnHostStream* stream); \
  void RunMoeGatherSum(const View& data, const View& sorted, const View* probs, int64_t k,   \
                       const View& out, const JaxAclnnHostStream* stream);                   \
  void RunMoeUnpermuteGrad(const View& x, const View& dy, const View& sorted,                \
                           const View* probs, const View& dx, const View* dprobs,            \
                           void* workspace, const JaxAclnnHostStream* stream);               \
  const char* HalfConversions();

JAX_ACLNN_KERNEL_ENTRY_POINTS

// The MoE kernels' workspaces (the same on every target), for n = T * k
// choices: MoePermute's two orders of the choices (int32) and the counting
// sort's buckets (a 16-bit digit's, plus one); MoeUnpermuteGrad's inverse
// of sortedIndices (int32).
constexpr int64_t kMoeSortBuckets = int64_t{1} << 16;
inline uint64_t MoePermuteWorkspaceSize(int64_t n) {
  return static_cast<uint64_t>(2 * n + kMoeSortBuckets + 1) * sizeof(int32_t);
}
inline uint64_t MoeUnpermuteGradWorkspaceSize(int64_t n) {
  return static_cast<uint64_t>(n) * sizeof(int32_t);
}

// The CPU target whose kernels run ("x86-64-v3", "native", ...).
const char* KernelTarget();

}  // namespace jax_aclnn::host

#endif  // JAX_ACLNN_HOST_KERNELS_H_
