// Run-time CPU dispatch of the kernels. CMakeLists.txt compiles the kernels
// (kernels.cc, batch_norm_kernel.cc, rms_norm_kernel.cc, swiglu_kernel.cc,
// grouped_matmul_kernel.cc, rope_kernel.cc, cross_entropy_kernel.cc,
// attention_kernel.cc, adamw_kernel.cc, moe_kernel.cc)
// once per CPU target (a baseline build for any x86-64 or aarch64 CPU;
// x86-64-v3/-v4: AVX2, FMA and F16C, then AVX-512; armv8.2-a+sve: SVE),
// each copy in its own namespace
// jax_aclnn::host::<target>; the first call picks the best one the CPU
// supports. The opt-in native build has a single target, "native".
#include "host/kernels.h"

#if JAX_ACLNN_KERNELS_ARMV8_2_A_SVE
#include <sys/auxv.h>
#endif

namespace jax_aclnn::host {

#define JAX_ACLNN_KERNEL_TARGET_NAMESPACE(target) \
  namespace target {                            \
  JAX_ACLNN_KERNEL_ENTRY_POINTS                 \
  }
#if JAX_ACLNN_KERNELS_NATIVE
JAX_ACLNN_KERNEL_TARGET_NAMESPACE(native)
#else
JAX_ACLNN_KERNEL_TARGET_NAMESPACE(baseline)
#endif
#if JAX_ACLNN_KERNELS_X86_64_V3
JAX_ACLNN_KERNEL_TARGET_NAMESPACE(x86_64_v3)
#endif
#if JAX_ACLNN_KERNELS_X86_64_V4
JAX_ACLNN_KERNEL_TARGET_NAMESPACE(x86_64_v4)
#endif
#if JAX_ACLNN_KERNELS_ARMV8_2_A_SVE
JAX_ACLNN_KERNEL_TARGET_NAMESPACE(armv8_2_a_sve)
#endif

namespace {

struct Kernels {
  const char* target;
  decltype(&RunPointwise) run_pointwise;
  decltype(&BatchNormReduceWorkspaceSize) batch_norm_reduce_workspace_size;
  decltype(&RunBatchNormReduce) run_batch_norm_reduce;
  decltype(&RmsNormWorkspaceSize) rms_norm_workspace_size;
  decltype(&RunRmsNorm) run_rms_norm;
  decltype(&RmsNormGradWorkspaceSize) rms_norm_grad_workspace_size;
  decltype(&RunRmsNormGrad) run_rms_norm_grad;
  decltype(&RunSwiGlu) run_swiglu;
  decltype(&RunSwiGluGrad) run_swiglu_grad;
  decltype(&RunGroupedMatmul) run_grouped_matmul;
  decltype(&RunRope) run_rope;
  decltype(&RopeGradWorkspaceSize) rope_grad_workspace_size;
  decltype(&RunRopeGrad) run_rope_grad;
  decltype(&CrossEntropyWorkspaceSize) cross_entropy_workspace_size;
  decltype(&RunCrossEntropyLoss) run_cross_entropy_loss;
  decltype(&RunCrossEntropyLossGrad) run_cross_entropy_loss_grad;
  decltype(&RunFlashAttention) run_flash_attention;
  decltype(&RunFlashAttentionGrad) run_flash_attention_grad;
  decltype(&RunApplyAdamW) run_apply_adam_w;
  decltype(&RunMoeGating) run_moe_gating;
  decltype(&RunMoePermute) run_moe_permute;
  decltype(&RunMoeGatherSum) run_moe_gather_sum;
  decltype(&RunMoeUnpermuteGrad) run_moe_unpermute_grad;
  decltype(&HalfConversions) half_conversions;
};

#define JAX_ACLNN_KERNELS_OF(target, name)                                                 \
  Kernels {                                                                                \
    name, &target::RunPointwise, &target::BatchNormReduceWorkspaceSize,                    \
        &target::RunBatchNormReduce, &target::RmsNormWorkspaceSize, &target::RunRmsNorm,   \
        &target::RmsNormGradWorkspaceSize, &target::RunRmsNormGrad, &target::RunSwiGlu,    \
        &target::RunSwiGluGrad, &target::RunGroupedMatmul, &target::RunRope,              \
        &target::RopeGradWorkspaceSize, &target::RunRopeGrad,                              \
        &target::CrossEntropyWorkspaceSize, &target::RunCrossEntropyLoss,                  \
        &target::RunCrossEntropyLossGrad, &target::RunFlashAttention,                      \
        &target::RunFlashAttentionGrad, &target::RunApplyAdamW, &target::RunMoeGating,     \
        &target::RunMoePermute, &target::RunMoeGatherSum, &target::RunMoeUnpermuteGrad,    \
        &target::HalfConversions                                                           \
  }

Kernels Choose() {
#if JAX_ACLNN_KERNELS_X86_64_V3 || JAX_ACLNN_KERNELS_X86_64_V4
  __builtin_cpu_init();
#endif
#if JAX_ACLNN_KERNELS_X86_64_V4
  if (__builtin_cpu_supports("x86-64-v4")) return JAX_ACLNN_KERNELS_OF(x86_64_v4, "x86-64-v4");
#endif
#if JAX_ACLNN_KERNELS_X86_64_V3
  if (__builtin_cpu_supports("x86-64-v3")) return JAX_ACLNN_KERNELS_OF(x86_64_v3, "x86-64-v3");
#endif
#if JAX_ACLNN_KERNELS_ARMV8_2_A_SVE
  // Instructions per element against armv8-a's NEON (SwishBackward, float32
  // and float16, counted under qemu): 0.91x with 128-bit SVE vectors, 0.46x
  // with 256-bit, 0.23x with 512-bit.
  if (getauxval(AT_HWCAP) & HWCAP_SVE)
    return JAX_ACLNN_KERNELS_OF(armv8_2_a_sve, "armv8.2-a+sve");
#endif
#if JAX_ACLNN_KERNELS_NATIVE
  return JAX_ACLNN_KERNELS_OF(native, "native");
#elif defined(__x86_64__)
  return JAX_ACLNN_KERNELS_OF(baseline, "x86-64");
#elif defined(__aarch64__)
  return JAX_ACLNN_KERNELS_OF(baseline, "armv8-a");
#else
  return JAX_ACLNN_KERNELS_OF(baseline, "baseline");
#endif
}

const Kernels& Chosen() {
  static const Kernels kernels = Choose();
  return kernels;
}

}  // namespace

void RunPointwise(OpId op, const PointwiseParams& params, const View* inputs,
                  int num_inputs, const View& out, const JaxAclnnHostStream* stream) {
  Chosen().run_pointwise(op, params, inputs, num_inputs, out, stream);
}

uint64_t BatchNormReduceWorkspaceSize(const View& input) {
  return Chosen().batch_norm_reduce_workspace_size(input);
}

void RunBatchNormReduce(const View& grad_out, const View& input, const View& mean,
                        const View& invstd, const View* const outputs[4], void* workspace,
                        const JaxAclnnHostStream* stream) {
  Chosen().run_batch_norm_reduce(grad_out, input, mean, invstd, outputs, workspace, stream);
}

uint64_t RmsNormWorkspaceSize(const View& x, int lead) {
  return Chosen().rms_norm_workspace_size(x, lead);
}

void RunRmsNorm(const View& x1, const View* x2, const View& gamma, int lead, float epsilon,
                const View& y, const View* rstd, const View* x_out, void* workspace,
                const JaxAclnnHostStream* stream) {
  Chosen().run_rms_norm(x1, x2, gamma, lead, epsilon, y, rstd, x_out, workspace, stream);
}

uint64_t RmsNormGradWorkspaceSize(const View& x, int lead) {
  return Chosen().rms_norm_grad_workspace_size(x, lead);
}

void RunRmsNormGrad(const View& dy, const View& x, const View& rstd, const View& gamma,
                    int lead, const View& dx, const View& dgamma, void* workspace,
                    const JaxAclnnHostStream* stream) {
  Chosen().run_rms_norm_grad(dy, x, rstd, gamma, lead, dx, dgamma, workspace, stream);
}

void RunSwiGlu(const View& x, int64_t outer, int64_t run, const View& out,
               const JaxAclnnHostStream* stream) {
  Chosen().run_swiglu(x, outer, run, out, stream);
}

void RunSwiGluGrad(const View& dy, const View& x, int64_t outer, int64_t run, const View& dx,
                   const JaxAclnnHostStream* stream) {
  Chosen().run_swiglu_grad(dy, x, outer, run, dx, stream);
}

void RunGroupedMatmul(const View& x, const View& weight, const View* bias, const View& group_list,
                      bool counts, bool along_k, const View& out,
                      const JaxAclnnHostStream* stream) {
  Chosen().run_grouped_matmul(x, weight, bias, group_list, counts, along_k, out, stream);
}

void RunRope(const View& x, const View& cos, const View& sin, int mode, const View& out,
             const JaxAclnnHostStream* stream) {
  Chosen().run_rope(x, cos, sin, mode, out, stream);
}

uint64_t RopeGradWorkspaceSize(const View& dy, const View& cos) {
  return Chosen().rope_grad_workspace_size(dy, cos);
}

void RunRopeGrad(const View& dy, const View& cos, const View& sin, const View* x, int mode,
                 const View& dx, const View* dcos, const View* dsin, void* workspace,
                 const JaxAclnnHostStream* stream) {
  Chosen().run_rope_grad(dy, cos, sin, x, mode, dx, dcos, dsin, workspace, stream);
}

uint64_t CrossEntropyWorkspaceSize(const View& input, bool forward) {
  return Chosen().cross_entropy_workspace_size(input, forward);
}

void RunCrossEntropyLoss(const View& input, const View& target, const View* weight,
                         const CrossEntropyAttrs& attrs, const View& loss, const View& log_prob,
                         void* workspace, const JaxAclnnHostStream* stream) {
  Chosen().run_cross_entropy_loss(input, target, weight, attrs, loss, log_prob, workspace, stream);
}

void RunCrossEntropyLossGrad(const View& grad_loss, const View& log_prob, const View& target,
                             const View* weight, const CrossEntropyAttrs& attrs, const View& out,
                             void* workspace, const JaxAclnnHostStream* stream) {
  Chosen().run_cross_entropy_loss_grad(grad_loss, log_prob, target, weight, attrs, out,
                                       workspace, stream);
}

void RunFlashAttention(const View& q, const View& k, const View& v, const View* pse,
                       const View* mask, const AttentionParams& p, const View& max_out,
                       const View& sum_out, const View& out, const JaxAclnnHostStream* stream) {
  Chosen().run_flash_attention(q, k, v, pse, mask, p, max_out, sum_out, out, stream);
}

void RunFlashAttentionGrad(const View& q, const View& k, const View& v, const View& dy,
                           const View* pse, const View* mask, const View& max_in,
                           const View& sum_in, const View& out_in, const AttentionParams& p,
                           const View& dq, const View& dk, const View& dv, const View* dpse,
                           const JaxAclnnHostStream* stream) {
  Chosen().run_flash_attention_grad(q, k, v, dy, pse, mask, max_in, sum_in, out_in, p, dq, dk,
                                    dv, dpse, stream);
}

void RunApplyAdamW(const View& var, const View& m, const View& v, const View* max_in,
                   const View* max_out, const View& grad, const AdamWParams& params,
                   float beta1_power, float beta2_power, const JaxAclnnHostStream* stream) {
  Chosen().run_apply_adam_w(var, m, v, max_in, max_out, grad, params, beta1_power, beta2_power,
                            stream);
}

void RunMoeGating(const View& x, const View* finished, int64_t k, bool renorm, const View& y,
                  const View& ids, const JaxAclnnHostStream* stream) {
  Chosen().run_moe_gating(x, finished, k, renorm, y, ids, stream);
}

void RunMoePermute(const View& tokens, const View& indices, const View& permuted,
                   const View& sorted, void* workspace, const JaxAclnnHostStream* stream) {
  Chosen().run_moe_permute(tokens, indices, permuted, sorted, workspace, stream);
}

void RunMoeGatherSum(const View& data, const View& sorted, const View* probs, int64_t k,
                     const View& out, const JaxAclnnHostStream* stream) {
  Chosen().run_moe_gather_sum(data, sorted, probs, k, out, stream);
}

void RunMoeUnpermuteGrad(const View& x, const View& dy, const View& sorted, const View* probs,
                         const View& dx, const View* dprobs, void* workspace,
                         const JaxAclnnHostStream* stream) {
  Chosen().run_moe_unpermute_grad(x, dy, sorted, probs, dx, dprobs, workspace, stream);
}

const char* KernelTarget() { return Chosen().target; }

const char* HalfConversions() { return Chosen().half_conversions(); }

}  // namespace jax_aclnn::host

// The host provider's exports beyond the aclnn ABI (host_stream.h).
extern "C" __attribute__((visibility("default"))) const char* JaxAclnnHostKernelTarget(void) {
  return jax_aclnn::host::KernelTarget();
}

extern "C" __attribute__((visibility("default"))) const char* JaxAclnnHostHalfConversions(void) {
  return jax_aclnn::host::HalfConversions();
}
