// aclnnApplyAdamWV2's kernel: RunApplyAdamW (kernels.h). One formula over
// the contiguous var, m, v, (max_v) and grad (map_runs.h), in place, in
// float32 (float16 and bfloat16 converted in registers), split into tasks
// over the stream's thread pool: one pass over the five (six) tensors.
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

// The update in the order of ops-nn's kernel
// (optim/apply_adam_w_v2/op_kernel/apply_adam_w_v2_fp.h; the test
// provider's csrc/testing/optim_operators.cc): g = maximize ? -grad : grad;
// var *= 1 - lr * weightDecay; m += (g - m) * (1 - beta1); v = v * beta2 +
// g * g * (1 - beta2); amsgrad: max_v = max(max_v, v); denom = sqrt(amsgrad
// ? max_v : v) / sqrt(1 - beta2^t) + eps; var -= m / denom * lr / (1 -
// beta1^t).
struct AdamWConstants {
  float decay, one_sub_beta1, beta2, one_sub_beta2, bias2_rsqrt, eps, step_size, sign;
};

template <bool kAmsgrad>
struct AdamWFormula {
  // var, m, v, (max_v), grad -> var, m, v, (max_v)
  static constexpr int kInputs = kAmsgrad ? 5 : 4, kOutputs = kAmsgrad ? 4 : 3;
  AdamWConstants c;
  template <typename T>
  void operator()(const T* in, T* out) const {
    const T g = in[kInputs - 1] * c.sign;
    const T m = in[1] + (g - in[1]) * c.one_sub_beta1;
    const T v = in[2] * c.beta2 + g * g * c.one_sub_beta2;
    T second = v;
    if constexpr (kAmsgrad) out[3] = second = Larger(in[3], v);
    const T denom = Sqrt(second) * c.bias2_rsqrt + c.eps;
    out[0] = in[0] * c.decay - m / denom * c.step_size;
    out[1] = m;
    out[2] = v;
  }
};

template <bool kAmsgrad>
void Update(const AdamWConstants& c, aclDataType t, char* var, char* m, char* v, char* max_v,
            const char* grad, int64_t n, const JaxAclnnHostStream* stream) {
  const int64_t size = ElementSize(t);
  const int64_t tasks = RowTasks(n, 1, stream);  // single elements as rows
  const AdamWFormula<kAmsgrad> f{c};
  ParallelFor(stream, tasks, [&](int64_t k) {
    const int64_t begin = n * k / tasks, len = n * (k + 1) / tasks - begin, at = begin * size;
    if (len == 0) return;
    if constexpr (kAmsgrad) {
      const char* in[] = {var + at, m + at, v + at, max_v + at, grad + at};
      char* out[] = {var + at, m + at, v + at, max_v + at};
      MapRuns(f, t, in, out, len);
    } else {
      const char* in[] = {var + at, m + at, v + at, grad + at};
      char* out[] = {var + at, m + at, v + at};
      MapRuns(f, t, in, out, len);
    }
  });
}

}  // namespace

void RunApplyAdamW(const View& var, const View& m, const View& v, const View* max_v,
                   const View& grad, const AdamWParams& p, double step,
                   const JaxAclnnHostStream* stream) {
  const int64_t n = var.NumElements();
  if (n == 0) return;
  // as the kernel: t = step + 1 in float32, the bias corrections from it
  const float t = static_cast<float>(step) + 1.0f;
  const float bias1 = 1.0f - static_cast<float>(std::pow(double(p.beta1), double(t)));
  const float bias2 = 1.0f - static_cast<float>(std::pow(double(p.beta2), double(t)));
  const AdamWConstants c{1.0f - p.lr * p.weight_decay, 1.0f - p.beta1, p.beta2,
                         1.0f - p.beta2, 1.0f / std::sqrt(bias2), p.eps, p.lr / bias1,
                         p.maximize ? -1.0f : 1.0f};
  auto* vp = static_cast<char*>(var.data);
  auto* mp = static_cast<char*>(m.data);
  auto* sp = static_cast<char*>(v.data);
  const auto* gp = static_cast<const char*>(grad.data);
  if (p.amsgrad)
    Update<true>(c, grad.dtype, vp, mp, sp, static_cast<char*>(max_v->data), gp, n, stream);
  else
    Update<false>(c, grad.dtype, vp, mp, sp, nullptr, gp, n, stream);
}

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
