// The element-wise operators' kernel (RunPointwise) and the target's
// float16 conversions (HalfConversions); the batch-norm reduction is in
// batch_norm_kernel.cc.
#include "host/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "host/dtype.h"
#include "host/half_runs.h"
#include "host/memory.h"
#include "host/parallel.h"
#include "host/simd.h"

// Compiled once per CPU target (CMakeLists.txt), each copy in its own
// namespace; dispatch.cc picks one at run time.
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {
namespace {

// The output's shape after dropping size-1 dimensions and merging
// dimensions that are contiguous in every operand (operand 0 is the output).
struct Layout {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[5][kMaxRank] = {};
};

Layout Collapse(const View& out, const View* inputs, int num_inputs) {
  const View* views[5] = {&out};
  for (int k = 0; k < num_inputs; ++k) views[k + 1] = &inputs[k];
  const int num = num_inputs + 1;
  Layout l;
  for (int d = 0; d < out.rank; ++d) {
    if (out.dims[d] == 1) continue;
    bool merge = l.rank > 0;
    for (int k = 0; k < num && merge; ++k)
      merge = l.strides[k][l.rank - 1] == views[k]->strides[d] * out.dims[d];
    if (merge) {
      l.dims[l.rank - 1] *= out.dims[d];
      for (int k = 0; k < num; ++k) l.strides[k][l.rank - 1] = views[k]->strides[d];
    } else {
      l.dims[l.rank] = out.dims[d];
      for (int k = 0; k < num; ++k) l.strides[k][l.rank] = views[k]->strides[d];
      ++l.rank;
    }
  }
  if (l.rank == 0) {  // a single element
    l.rank = 1;
    l.dims[0] = 1;
    for (int k = 0; k < num; ++k) l.strides[k][0] = 1;
  }
  return l;
}

// Whether the view's elements lie in row-major order without gaps.
bool IsRowMajor(const View& v) {
  int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    if (v.dims[d] != 1 && v.strides[d] != stride) return false;
    stride *= v.dims[d];
  }
  return true;
}

// The formula on n elements: out[i] = f(in[0][i], in[1][i], ...), in
// float32, a vector at a time (simd.h's Vec, as HalfLoop): the formula's
// vector form clamps with the target's min and max instructions, where the
// compiler's vectorisation of its scalar form compared and blended
// (SwishBackward at 1M float32 elements, a call on one x86-64-v3 thread:
// 1,060 -> 755 us).
template <typename F, size_t... k>
void FloatLoop(const F& f, const float* const* in, int64_t n, float* out,
               std::index_sequence<k...>) {
  const F func = f;  // a local: reading the attributes through `f` blocks vectorisation
  const float* const ptrs[] = {in[k]...};
  const auto at = [](const float* p) { return reinterpret_cast<const char*>(p); };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    StoreFloats<ACL_FLOAT>(reinterpret_cast<char*>(out + i),
                           func(LoadFloats<ACL_FLOAT, Vec>(at(ptrs[k] + i))...));
  for (; i < n; ++i) out[i] = func(ptrs[k][i]...);
}

// The same on contiguous float16 or bfloat16 (D) inputs and output, a
// vector of each at a time (simd.h): no float32 copy in memory.
template <aclDataType D, typename F, size_t... k>
void HalfLoop(const F& f, const uint16_t* const* in, int64_t n, uint16_t* out,
              std::index_sequence<k...>) {
  const F func = f;
  const uint16_t* const ptrs[] = {in[k]...};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) StoreVec<D>(out + i, func(LoadVec<D>(ptrs[k] + i)...));
  for (; i < n; ++i) StoreScalar<D>(out + i, func(LoadScalar<D>(ptrs[k] + i)...));
}

// Applies `f` to the elements [begin, end) of the output (row-major order),
// a chunk of each run along the last dimension at a time. Where the output
// and every input are float16 (or every one bfloat16), contiguous or
// broadcast along that dimension, and the target converts that type in
// vectors: HalfLoop. Otherwise each input that is not contiguous float32 is
// converted into a float buffer first, and a half-precision or strided
// output is computed into one.
//
// `out` may be the memory of an input: XLA gives the result the incoming
// gradient's buffer (`alias_gradient` in jax_aclnn/_primitive.py; same
// shape, so same strides). That is safe: every loop reads element i (or
// vector i) of each input before it writes that of the output (no pointer
// is __restrict; `omp simd` still vectorises, there being no loop-carried
// dependence), a chunk of each input is converted before that chunk of the
// output is written, and each task has its own range.
template <typename F>
void PointwiseRange(const F& f, const Layout& l, const View* inputs, int num_inputs,
                    const View& out, int64_t begin, int64_t end) {
  constexpr auto kInputs = std::make_index_sequence<F::kNumInputs>();
  alignas(64) float bufs[5][kChunk];
  alignas(64) uint16_t spread[4][kChunk];  // broadcast half-precision inputs
  const int r = l.rank;
  const int64_t inner = l.dims[r - 1];
  const int64_t so = l.strides[0][r - 1];
  bool vector_halves = so == 1 && InRegisters(out.dtype);
  for (int k = 0; k < num_inputs; ++k)
    vector_halves &= inputs[k].dtype == out.dtype && l.strides[k + 1][r - 1] <= 1;
  int64_t idx[kMaxRank];
  int64_t rem = begin;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % l.dims[d];
    rem /= l.dims[d];
  }
  int64_t pos = begin;
  while (pos < end) {
    const int64_t col = idx[r - 1];
    const int64_t len = std::min(inner - col, end - pos);
    int64_t offs[5];
    for (int k = 0; k <= num_inputs; ++k) {
      offs[k] = 0;
      for (int d = 0; d < r; ++d) offs[k] += idx[d] * l.strides[k][d];
    }
    for (int64_t c = 0; c < len; c += kChunk) {
      const int64_t n = std::min(kChunk, len - c);
      char* po = static_cast<char*>(out.data) + (offs[0] + c * so) * ElementSize(out.dtype);
      if (vector_halves) {
        // A broadcast input is spread into a chunk of its own.
        const uint16_t* in_ptrs[4];
        for (int k = 0; k < num_inputs; ++k) {
          const int64_t s = l.strides[k + 1][r - 1];
          const auto* p = static_cast<const uint16_t*>(inputs[k].data) + offs[k + 1] + c * s;
          in_ptrs[k] = p;
          if (s == 0) {
            std::fill(spread[k], spread[k] + n, *p);
            in_ptrs[k] = spread[k];
          }
        }
        auto* ho = reinterpret_cast<uint16_t*>(po);
        if (out.dtype == ACL_BF16)
          HalfLoop<ACL_BF16>(f, in_ptrs, n, ho, kInputs);
        else if constexpr (kVectorFloat16)
          HalfLoop<ACL_FLOAT16>(f, in_ptrs, n, ho, kInputs);
        continue;
      }
      const float* in_ptrs[4];
      HalfRun halves[4];
      int num_halves = 0;
      for (int k = 0; k < num_inputs; ++k) {
        const View& v = inputs[k];
        const int64_t s = l.strides[k + 1][r - 1];
        const int64_t e = offs[k + 1] + c * s;
        const char* p = static_cast<const char*>(v.data) + e * ElementSize(v.dtype);
        in_ptrs[k] = bufs[k];
        if (v.dtype == ACL_FLOAT && s == 1)
          in_ptrs[k] = reinterpret_cast<const float*>(p);
        else if (v.dtype != ACL_FLOAT && s == 1)
          halves[num_halves++] = {v.dtype, p, bufs[k]};
        else
          LoadAsFloat(v.dtype, p, s, n, bufs[k]);
      }
      ConvertTogether(halves, num_halves, n);
      if (out.dtype == ACL_FLOAT && so == 1) {
        FloatLoop(f, in_ptrs, n, reinterpret_cast<float*>(po), kInputs);
      } else {
        FloatLoop(f, in_ptrs, n, bufs[4], kInputs);
        StoreFromFloat(out.dtype, bufs[4], n, po, so);
      }
    }
    pos += len;
    idx[r - 1] += len;
    for (int d = r - 1; d > 0 && idx[d] == l.dims[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

template <typename F>
void Pointwise(const F& f, const View* inputs, int num_inputs, const View& out,
               const JaxAclnnHostStream* stream) {
  const int64_t total = out.NumElements();
  if (total == 0) return;
  const Layout l = Collapse(out, inputs, num_inputs);
  // A contiguous output new to the process (memory.h): huge pages, and
  // each piece prefaulted right before it is written.
  const int64_t size = ElementSize(out.dtype);
  const bool fresh = IsRowMajor(out) && IsNewMemory(out.data, total * size);
  if (fresh) AdviseHugePages(out.data, total * size);
  const int64_t piece = fresh ? kPrefaultBytes / size : total;
  const int64_t num_tasks =
      std::min<int64_t>((total + kGrain - 1) / kGrain, 4 * NumThreads(stream));
  ParallelFor(stream, num_tasks, [&](int64_t t) {
    const int64_t end = total * (t + 1) / num_tasks;
    for (int64_t begin = total * t / num_tasks; begin < end; begin += piece) {
      const int64_t stop = std::min(end, begin + piece);
      if (fresh) Prefault(static_cast<char*>(out.data) + begin * size, (stop - begin) * size);
      PointwiseRange(f, l, inputs, num_inputs, out, begin, stop);
    }
  });
}

// An operator's element-wise kernel (PointwiseKernel<op>, from its
// csrc/ops/<op>_kernel.h) on its parameters; nothing for an operator
// without one.
template <OpId op, typename = void>
constexpr bool kIsPointwise = false;
template <OpId op>
constexpr bool kIsPointwise<op, std::void_t<decltype(sizeof(PointwiseKernel<op>))>> = true;

template <OpId op>
void RunKernel(const PointwiseParams& p, const View* inputs, int num_inputs, const View& out,
               const JaxAclnnHostStream* stream) {
  if constexpr (kIsPointwise<op>) {
    using Kernel = PointwiseKernel<op>;
    Pointwise(Kernel::Make(p.As<typename Kernel::Params>()), inputs, num_inputs, out, stream);
  }
}

}  // namespace

void RunPointwise(OpId op, const PointwiseParams& p, const View* inputs, int num_inputs,
                  const View& out, const JaxAclnnHostStream* stream) {
  switch (op) {
#define JAX_ACLNN_POINTWISE_CASE(Name, name) \
  case k##Name:                              \
    return RunKernel<k##Name>(p, inputs, num_inputs, out, stream);
    JAX_ACLNN_OPERATORS(JAX_ACLNN_POINTWISE_CASE)
#undef JAX_ACLNN_POINTWISE_CASE
    case kNumOps:
      break;
  }
}

const char* HalfConversions() { return kHalfConversions; }

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET

