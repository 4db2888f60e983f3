// The SwiGLU kernels: RunSwiGlu and RunSwiGluGrad (kernels.h). Formulas
// over A's, B's and the outputs' contiguous runs (map_runs.h).
#include <algorithm>
#include <cstdint>

#include "host/dtype.h"
#include "host/half_runs.h"
#include "host/kernels.h"
#include "host/map_runs.h"
#include "host/memory.h"
#include "host/parallel.h"
#include "host/pointwise_kernel.h"

// Compiled once per CPU target (CMakeLists.txt), each copy in its own
// namespace; dispatch.cc picks one at run time.
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

// sigmoid(a) (the exponentials clamp: 0 far below, 1 far above), with
// ExpForHalf where the result is stored in float16 or bfloat16 (kHalf).
template <bool kHalf, typename T>
inline T Sigmoid(T a) {
  if constexpr (kHalf) {
    return 1.0f / (1.0f + ExpForHalf(-a));
  } else {
    return 1.0f / (1.0f + ExpF(-a));
  }
}

// out = swish(A) * B = A * sigmoid(A) * B (aclnnSwiGlu.md).
template <bool kHalf>
struct SwiGluFormula {
  static constexpr int kInputs = 2, kOutputs = 1;  // A, B -> out
  static constexpr bool kNaNsFromInputs = true;      // map_runs.h; its one constant is 1
  template <typename T>
  void operator()(const T* in, T* out) const {
    const T a = in[0];
    out[0] = a * Sigmoid<kHalf>(a) * in[1];
  }
};

// dA = g * (s + s * (1 - s) * A) * B, dB = g * s * A with s = sigmoid(A)
// (aclnnSwiGluGrad.md).
template <bool kHalf>
struct SwiGluGradFormula {
  static constexpr int kInputs = 3, kOutputs = 2;  // g, A, B -> dA, dB
  static constexpr bool kNaNsFromInputs = true;
  template <typename T>
  void operator()(const T* in, T* out) const {
    const T g = in[0], a = in[1], s = Sigmoid<kHalf>(a);
    out[0] = g * (s + s * (1.0f - s) * a) * in[2];
    out[1] = g * s * a;
  }
};

// Calls body(o, j, len) over the elements [0, outer * run) of the halved
// tensor (block o, element j of its run), split into tasks. An output new
// to the process gets huge pages (memory.h; not prefaulted: its runs are
// not in the order the tasks take them for the gradient). Tasks of a
// quarter of kGrain: an element costs an exponential and a division, four
// times a copy's time, and a helper thread that wakes late still finds
// work (x86-64-v3, 64K float32 outputs in bursts: 52 -> 30 us, 1.07x ->
// 1.51x XLA's code).
template <typename Body>
void ForRuns(int64_t outer, int64_t run, const View& out, const JaxAclnnHostStream* stream,
             const Body& body) {
  const int64_t total = outer * run;
  if (total == 0) return;
  PrepareOutput(out.data, out.NumElements() * ElementSize(out.dtype));
  constexpr int64_t grain = kGrain / 4;
  const int64_t tasks =
      std::min<int64_t>((total + grain - 1) / grain, 4 * NumThreads(stream));
  ParallelFor(stream, tasks, [&](int64_t t) {
    const int64_t end = total * (t + 1) / tasks;
    for (int64_t begin = total * t / tasks; begin < end;) {
      const int64_t o = begin / run, j = begin % run;
      const int64_t len = std::min(run - j, end - begin);
      body(o, j, len);
      begin += len;
    }
  });
}

// MapRuns of Formula<kHalf> with kHalf = whether type t is half precision.
template <template <bool> class Formula>
void MapByStorage(aclDataType t, const char* const* in, char* const* out, int64_t n) {
  if (t == ACL_FLOAT) return MapRuns(Formula<false>{}, t, in, out, n);
  MapRuns(Formula<true>{}, t, in, out, n);
}

}  // namespace

void RunSwiGlu(const View& x, int64_t outer, int64_t run, const View& out,
               const JaxAclnnHostStream* stream) {
  const int64_t size = ElementSize(x.dtype);
  const auto* xp = static_cast<const char*>(x.data);
  auto* yp = static_cast<char*>(out.data);
  ForRuns(outer, run, out, stream, [&](int64_t o, int64_t j, int64_t len) {
    const char* a = xp + (o * 2 * run + j) * size;
    const char* in[] = {a, a + run * size};
    char* res[] = {yp + (o * run + j) * size};
    MapByStorage<SwiGluFormula>(x.dtype, in, res, len);
  });
}

void RunSwiGluGrad(const View& dy, const View& x, int64_t outer, int64_t run, const View& dx,
                   const JaxAclnnHostStream* stream) {
  const int64_t size = ElementSize(x.dtype);
  const auto* gp = static_cast<const char*>(dy.data);
  const auto* xp = static_cast<const char*>(x.data);
  auto* dp = static_cast<char*>(dx.data);
  ForRuns(outer, run, dx, stream, [&](int64_t o, int64_t j, int64_t len) {
    const int64_t ia = (o * 2 * run + j) * size;
    const char* in[] = {gp + (o * run + j) * size, xp + ia, xp + ia + run * size};
    char* res[] = {dp + ia, dp + ia + run * size};
    MapByStorage<SwiGluGradFormula>(x.dtype, in, res, len);
  });
}

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
