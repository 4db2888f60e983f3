// The AdamW kernel of aclnnApplyAdamW and aclnnApplyAdamWV2. RunApplyAdamW
// (kernels.h; csrc/ops/apply_adam_w.cc reads each version's scalars): one
// formula over the contiguous var, m, v, (max_v) and grad (map_runs.h), in
// place, in float32 (float16 and bfloat16 converted in registers), split
// into tasks over the stream's thread pool: one pass over the five (six)
// tensors.
#include <cmath>
#include <cstdint>

#include "host/dtype.h"
#include "host/half_runs.h"
#include "host/kernels.h"
#include "host/map_runs.h"
#include "host/parallel.h"
#include "host/row_kernels.h"
#include "host/simd.h"

// Compiled once per CPU target (CMakeLists.txt), each copy in its own
// namespace; dispatch.cc picks one at run time.
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

// The update in the order of ops-nn's kernels
// (optim/apply_adam_w_v2/op_kernel/apply_adam_w_v2_fp.h,
// optim/apply_adam_w/op_kernel/arch35/apply_adam_w_dag.h; the test
// provider's csrc/testing/optim_operators.cc): g = maximize ? -grad : grad;
// var *= 1 - lr * weightDecay; m += (g - m) * (1 - beta1); v = v * beta2 +
// g * g * (1 - beta2); amsgrad: second = max(max_v, v) (written back to
// max_v by V2 alone), else second = v; denom = sqrt(second) / sqrt(1 -
// beta2^t) + eps; var -= m / denom * lr / (1 - beta1^t).
struct AdamWConstants {
  float decay, one_sub_beta1, beta2, one_sub_beta2, bias2_rsqrt, eps, step_size, sign;
};

// What the update does with max_v: nothing, reads it (V1), reads and
// writes it (V2).
enum class MaxV { kNone, kRead, kUpdate };

template <MaxV kMax>
struct AdamWFormula {
  // var, m, v, (max_v), grad -> var, m, v, (max_v)
  static constexpr int kInputs = kMax == MaxV::kNone ? 4 : 5;
  static constexpr int kOutputs = kMax == MaxV::kUpdate ? 4 : 3;
  // Its constants come from the caller's floats and step (a NaN among them
  // may have any bits: map_runs.h).
  static constexpr bool kNaNsFromInputs = false;
  AdamWConstants c;
  template <typename T>
  void operator()(const T* in, T* out) const {
    const T g = in[kInputs - 1] * c.sign;
    const T m = in[1] + (g - in[1]) * c.one_sub_beta1;
    const T v = in[2] * c.beta2 + g * g * c.one_sub_beta2;
    T second = v;
    if constexpr (kMax != MaxV::kNone) second = Larger(in[3], v);
    if constexpr (kMax == MaxV::kUpdate) out[3] = second;
    const T denom = Sqrt(second) * c.bias2_rsqrt + c.eps;
    out[0] = in[0] * c.decay - m / denom * c.step_size;
    out[1] = m;
    out[2] = v;
  }
};

template <MaxV kMax>
void Update(const AdamWConstants& c, aclDataType t, char* var, char* m, char* v, char* max_v,
            const char* grad, int64_t n, const JaxAclnnHostStream* stream) {
  const int64_t size = ElementSize(t);
  const int64_t tasks = RowTasks(n, 1, stream);  // single elements as rows
  const AdamWFormula<kMax> f{c};
  ParallelFor(stream, tasks, [&](int64_t k) {
    const int64_t begin = n * k / tasks, len = n * (k + 1) / tasks - begin, at = begin * size;
    if (len == 0) return;
    if constexpr (kMax == MaxV::kNone) {
      const char* in[] = {var + at, m + at, v + at, grad + at};
      char* out[] = {var + at, m + at, v + at};
      MapRuns(f, t, in, out, len);
    } else {
      const char* in[] = {var + at, m + at, v + at, max_v + at, grad + at};
      char* out[] = {var + at, m + at, v + at, max_v + at};  // max_v: kUpdate's alone
      MapRuns(f, t, in, out, len);
    }
  });
}

}  // namespace

void RunApplyAdamW(const View& var, const View& m, const View& v, const View* max_in,
                   const View* max_out, const View& grad, const AdamWParams& p,
                   float beta1_power, float beta2_power, const JaxAclnnHostStream* stream) {
  const int64_t n = var.NumElements();
  if (n == 0) return;
  const float bias1 = 1.0f - beta1_power, bias2 = 1.0f - beta2_power;
  const AdamWConstants c{1.0f - p.lr * p.weight_decay, 1.0f - p.beta1, p.beta2,
                         1.0f - p.beta2, 1.0f / std::sqrt(bias2), p.eps, p.lr / bias1,
                         p.maximize ? -1.0f : 1.0f};
  auto* vp = static_cast<char*>(var.data);
  auto* mp = static_cast<char*>(m.data);
  auto* sp = static_cast<char*>(v.data);
  const auto* gp = static_cast<const char*>(grad.data);
  auto* xp = p.amsgrad ? static_cast<char*>(max_in->data) : nullptr;
  if (!p.amsgrad)
    Update<MaxV::kNone>(c, grad.dtype, vp, mp, sp, nullptr, gp, n, stream);
  else if (max_out != nullptr)  // max_out is max_in (V2's in-place maxGradNormOptionalRef)
    Update<MaxV::kUpdate>(c, grad.dtype, vp, mp, sp, xp, gp, n, stream);
  else
    Update<MaxV::kRead>(c, grad.dtype, vp, mp, sp, xp, gp, n, stream);
}

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
