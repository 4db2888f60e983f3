// A formula over contiguous runs of one float type, a vector at a time.
// F has kInputs and kOutputs, and `template <typename T> void operator()(
// const T* in, T* out) const`, the formula on one element (T = float) or
// on a vector of them (T = Vec, simd.h); float16 and bfloat16 are
// converted in registers where the target can (simd.h), else a chunk at a
// time through float buffers. F::kNaNsFromInputs says that its NaNs can
// only be its inputs' or an invalid operation's (no constant of its own
// can be a NaN): bfloat16 results are then stored without quieting NaNs
// first (StoreVec's kAnyNaN, simd.h). Compiled once per kernel target
// (kernels.h).
#ifndef JAX_ACLNN_HOST_MAP_RUNS_H_
#define JAX_ACLNN_HOST_MAP_RUNS_H_

#include <algorithm>
#include <cstdint>

#include "aclnn_abi.h"
#include "host/dtype.h"
#include "host/half_runs.h"
#include "host/simd.h"

#ifdef JAX_ACLNN_KERNEL_TARGET
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

template <aclDataType D, typename F>
void MapVectors(const F& f, const char* const* in, char* const* out, int64_t n) {
  constexpr int64_t size = D == ACL_FLOAT ? 4 : 2;
  const F func = f;  // a local, as in kernels.cc's loops
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Vec a[F::kInputs], r[F::kOutputs];
    for (int k = 0; k < F::kInputs; ++k) a[k] = LoadFloats<D, Vec>(in[k] + i * size);
    func(a, r);
    for (int k = 0; k < F::kOutputs; ++k)
      StoreFloats<D, !F::kNaNsFromInputs>(out[k] + i * size, r[k]);
  }
  for (; i < n; ++i) {
    float a[F::kInputs], r[F::kOutputs];
    for (int k = 0; k < F::kInputs; ++k) a[k] = LoadFloats<D, float>(in[k] + i * size);
    func(a, r);
    for (int k = 0; k < F::kOutputs; ++k) StoreFloats<D>(out[k] + i * size, r[k]);
  }
}

// out[k][i] = f(in[0][i], ...)[k] for i in [0, n); every run of type t.
template <typename F>
void MapRuns(const F& f, aclDataType t, const char* const* in, char* const* out, int64_t n) {
  if (t == ACL_FLOAT) return MapVectors<ACL_FLOAT>(f, in, out, n);
  if (t == ACL_BF16) return MapVectors<ACL_BF16>(f, in, out, n);
  if constexpr (kVectorFloat16) {
    MapVectors<ACL_FLOAT16>(f, in, out, n);
  } else {  // float16 without vector conversions: through float buffers
    alignas(64) float bufs[F::kInputs + F::kOutputs][kChunk];
    const char* fin[F::kInputs];
    char* fout[F::kOutputs];
    for (int k = 0; k < F::kInputs; ++k) fin[k] = reinterpret_cast<const char*>(bufs[k]);
    for (int k = 0; k < F::kOutputs; ++k) fout[k] = reinterpret_cast<char*>(bufs[F::kInputs + k]);
    for (int64_t c = 0; c < n; c += kChunk) {
      const int64_t len = std::min(kChunk, n - c);
      for (int k = 0; k < F::kInputs; ++k)
        HalvesToFloats(reinterpret_cast<const uint16_t*>(in[k]) + c, len, bufs[k]);
      MapVectors<ACL_FLOAT>(f, fin, fout, len);
      for (int k = 0; k < F::kOutputs; ++k)
        FloatsToHalves(bufs[F::kInputs + k], len, reinterpret_cast<uint16_t*>(out[k]) + c);
    }
  }
}

}  // namespace
}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_HOST_MAP_RUNS_H_
