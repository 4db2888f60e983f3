// Float vectors for the element-wise kernels' half-precision loops
// (kernels.cc): the compiler's vector extensions (GCC and Clang), whose
// arithmetic, comparisons and `?:` it maps to the kernel target's
// instructions, and the target's own float16 conversions. With these, a
// float16 or bfloat16 element goes from memory to a register, through the
// operator's formula and back without a float32 copy in memory: the
// buffered loop (convert each input into a float buffer, compute into a
// float buffer, convert that) spent its time on those buffers' stores, and
// ran float16 at 1M elements at about XLA's speed; fused, the same loop
// takes half the time.
//
// The formulas (csrc/ops/<op>_kernel.h, ExpF in pointwise_kernel.h) are
// templates on their value type: `float` in the float32 loops, `Vec` here.
// The helpers below have an overload for each, so that a formula reads the
// same for both. Compiled once per kernel target (kernels.h), in its
// namespace.
#ifndef JAX_ACLNN_HOST_SIMD_H_
#define JAX_ACLNN_HOST_SIMD_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "host/dtype.h"

#ifdef JAX_ACLNN_KERNEL_TARGET
namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET {

// Lanes of one hardware vector of float32 on the target.
#if defined(__AVX512F__)
constexpr int kLanes = 16;
#elif defined(__AVX2__)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;  // SSE2, NEON
#endif

typedef float Vec __attribute__((vector_size(4 * kLanes)));
typedef int32_t VecI __attribute__((vector_size(4 * kLanes)));
typedef uint32_t VecU __attribute__((vector_size(4 * kLanes)));
typedef uint16_t VecH __attribute__((vector_size(2 * kLanes)));

// Whether the target converts float16 vectors itself (F16C, AVX-512, NEON).
// Without, float16 takes the buffered loop, whose conversions are the
// portable formulas of dtype.h. bfloat16 is a shift on every target.
#if defined(__F16C__) || defined(__aarch64__)
constexpr bool kVectorFloat16 = true;
#else
constexpr bool kVectorFloat16 = false;
#endif

// Whether elements of type t are converted in registers (LoadVec/StoreVec).
inline bool InRegisters(aclDataType t) {
  return t == ACL_BF16 || (t == ACL_FLOAT16 && kVectorFloat16);
}

// kLanes float16 or bfloat16 elements from memory (no alignment needed),
// exactly; to memory, rounded to nearest even (NaN stays a quiet NaN,
// overflow gives inf): the same results as dtype.h's conversions (but
// for StoreVec<ACL_BF16, false>, below).
template <aclDataType D>
inline Vec LoadVec(const uint16_t* p) {
  if constexpr (D == ACL_BF16) {  // widen and shift (GCC's own widening is a shuffle chain)
#if defined(__AVX512F__)
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return reinterpret_cast<Vec>(
        reinterpret_cast<VecU>(_mm512_maskz_cvtepu16_epi32(kAllLanes, h)) << 16);
#elif defined(__AVX2__)
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return reinterpret_cast<Vec>(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
#elif defined(__aarch64__)
    return reinterpret_cast<Vec>(vshll_n_u16(vld1_u16(p), 16));
#else  // SSE2: each element above a zero half
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return reinterpret_cast<Vec>(_mm_unpacklo_epi16(_mm_setzero_si128(), h));
#endif
  } else {
#if defined(__AVX512F__)
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return reinterpret_cast<Vec>(_mm512_maskz_cvtph_ps(kAllLanes, h));
#elif defined(__AVX2__) && defined(__F16C__)
    return reinterpret_cast<Vec>(
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(__F16C__)  // AVX without AVX2 (a native build): 4 lanes
    return reinterpret_cast<Vec>(
        _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#elif defined(__aarch64__)
    return reinterpret_cast<Vec>(vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))));
#else
    static_assert(D == ACL_BF16, "no float16 vector conversions on this target");
    return Vec{};
#endif
  }
}

// StoreVec<ACL_BF16, false> where v's NaNs can only be bfloat16 inputs
// or invalid operations' (map_runs.h; no float32 constant or parameter of
// the formula may be a NaN): IEEE propagation keeps an input NaN's bits,
// and the default NaN has none below the top 16, so rounding leaves each
// NaN as it is (an input's passed on unchanged, a signalling one too) and
// the select that quiets any other NaN first is not needed (x86-64-v3,
// bfloat16 SwiGLU: 19.1 -> 15.9 cycles per 8 outputs on one core).
template <aclDataType D, bool kAnyNaN = true>
inline void StoreVec(uint16_t* p, Vec v) {
  if constexpr (D == ACL_BF16) {
    const VecU bits = reinterpret_cast<VecU>(v);
    VecU out = bits + 0x7fffu + ((bits >> 16) & 1u);
    if constexpr (kAnyNaN) out = v != v ? bits | 0x400000u : out;  // NaN: quiet
    out >>= 16;
#if defined(__AVX512F__)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_maskz_cvtepi32_epi16(kAllLanes, reinterpret_cast<__m512i>(out)));
#elif defined(__AVX2__)
    const __m256i o = reinterpret_cast<__m256i>(out);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm_packus_epi32(_mm256_castsi256_si128(o), _mm256_extracti128_si256(o, 1)));
#else
    const VecH h = __builtin_convertvector(out, VecH);
    std::memcpy(p, &h, sizeof h);
#endif
  } else {
#if defined(__AVX512F__)
    const __m512 f = reinterpret_cast<__m512>(v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_maskz_cvtps_ph(kAllLanes, f, _MM_FROUND_TO_NEAREST_INT));
#elif defined(__AVX2__) && defined(__F16C__)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(reinterpret_cast<__m256>(v), _MM_FROUND_TO_NEAREST_INT));
#elif defined(__F16C__)
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p),
                     _mm_cvtps_ph(reinterpret_cast<__m128>(v), _MM_FROUND_TO_NEAREST_INT));
#elif defined(__aarch64__)
    vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(reinterpret_cast<float32x4_t>(v))));
#else
    static_assert(D == ACL_BF16, "no float16 vector conversions on this target");
#endif
  }
}

// One element, for the loops' tails.
template <aclDataType D>
inline float LoadScalar(const uint16_t* p) {
  return D == ACL_BF16 ? Bf16ToFloat(*p) : HalfToFloat(*p);
}

template <aclDataType D>
inline void StoreScalar(uint16_t* p, float v) {
  *p = D == ACL_BF16 ? FloatToBf16(v) : FloatToHalf(v);
}

// One element (T = float) or kLanes elements (T = Vec) of type D (float32,
// float16 or bfloat16) at p, as floats; and back.
template <aclDataType D, typename T>
inline T LoadFloats(const char* p) {
  if constexpr (D == ACL_FLOAT) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  } else if constexpr (std::is_same_v<T, float>) {
    return LoadScalar<D>(reinterpret_cast<const uint16_t*>(p));
  } else {
    return LoadVec<D>(reinterpret_cast<const uint16_t*>(p));
  }
}

template <aclDataType D, bool kAnyNaN = true, typename T>
inline void StoreFloats(char* p, T v) {
  if constexpr (D == ACL_FLOAT)
    std::memcpy(p, &v, sizeof v);
  else if constexpr (std::is_same_v<T, float>)
    StoreScalar<D>(reinterpret_cast<uint16_t*>(p), v);
  else
    StoreVec<D, kAnyNaN>(reinterpret_cast<uint16_t*>(p), v);
}

// --- Helpers of the formulas, for float and for Vec ---------------------

// The value `c` in every lane (T{} is zero in both).
template <typename T>
inline T Splat(float c) {
  return T{} + c;
}

// The sum of a vector's lanes, pairwise: its halves added until two lanes
// are left, log2(kLanes) adds deep where lane after lane was kLanes deep
// (a narrow row's normalization waits on it: RMSNorm over 1,024 rows of
// 64 float32 took 19 us instead of 21-23, one thread, SumOfLanes in both).
template <size_t kBytes>
struct HalfVec {
  typedef float type __attribute__((vector_size(kBytes / 2)));
};
template <typename V>
inline float SumPairwise(V v) {
  if constexpr (sizeof(V) == 2 * sizeof(float)) {
    return v[0] + v[1];
  } else {
    typename HalfVec<sizeof(V)>::type lo, hi;
    std::memcpy(&lo, &v, sizeof lo);
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
    return SumPairwise(lo + hi);
  }
}
inline float SumLanes(Vec v) { return SumPairwise(v); }

inline float Abs(float x) { return std::fabs(x); }
inline Vec Abs(Vec x) { return reinterpret_cast<Vec>(reinterpret_cast<VecI>(x) & 0x7fffffff); }

// floor(x); the portable vector form, for |x| < 2^31, truncates through int32.
inline float Floor(float x) { return std::floor(x); }
inline Vec Floor(Vec x) {
#if defined(__AVX512F__)
  return reinterpret_cast<Vec>(_mm512_maskz_roundscale_ps(
      kAllLanes, reinterpret_cast<__m512>(x), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
#elif defined(__AVX2__)  // the 8-lane Vec
  return reinterpret_cast<Vec>(_mm256_floor_ps(reinterpret_cast<__m256>(x)));
#elif defined(__aarch64__)
  return reinterpret_cast<Vec>(vrndmq_f32(reinterpret_cast<float32x4_t>(x)));
#else
  const Vec t = __builtin_convertvector(__builtin_convertvector(x, VecI), Vec);
  return t > x ? t - 1.0f : t;
#endif
}

// x > c ? x : c and x < c ? x : c (a NaN x gives c): x86's max and min
// instructions have exactly these semantics; GCC compiles the vector `?:`
// into a compare and a blend.
inline float AtLeast(float x, float c) { return x > c ? x : c; }
inline float AtMost(float x, float c) { return x < c ? x : c; }
#if defined(__AVX512F__)
inline Vec AtLeast(Vec x, float c) {
  const __m512 v = reinterpret_cast<__m512>(x);
  return reinterpret_cast<Vec>(_mm512_maskz_max_ps(kAllLanes, v, _mm512_set1_ps(c)));
}
inline Vec AtMost(Vec x, float c) {
  const __m512 v = reinterpret_cast<__m512>(x);
  return reinterpret_cast<Vec>(_mm512_maskz_min_ps(kAllLanes, v, _mm512_set1_ps(c)));
}
#elif defined(__AVX2__)  // the 8-lane Vec
inline Vec AtLeast(Vec x, float c) {
  return reinterpret_cast<Vec>(_mm256_max_ps(reinterpret_cast<__m256>(x), _mm256_set1_ps(c)));
}
inline Vec AtMost(Vec x, float c) {
  return reinterpret_cast<Vec>(_mm256_min_ps(reinterpret_cast<__m256>(x), _mm256_set1_ps(c)));
}
#else
inline Vec AtLeast(Vec x, float c) { return x > c ? x : c; }
inline Vec AtMost(Vec x, float c) { return x < c ? x : c; }
#endif

// sqrt(x), and the larger of a and b (b where a is NaN; std::max's order
// for a NaN b: a), per lane.
inline float Sqrt(float x) { return std::sqrt(x); }
#if defined(__AVX512F__)
inline Vec Sqrt(Vec x) {
  return reinterpret_cast<Vec>(_mm512_maskz_sqrt_ps(kAllLanes, reinterpret_cast<__m512>(x)));
}
#elif defined(__AVX2__)  // the 8-lane Vec
inline Vec Sqrt(Vec x) {
  return reinterpret_cast<Vec>(_mm256_sqrt_ps(reinterpret_cast<__m256>(x)));
}
#elif defined(__SSE2__)  // the 4-lane Vec
inline Vec Sqrt(Vec x) { return reinterpret_cast<Vec>(_mm_sqrt_ps(reinterpret_cast<__m128>(x))); }
#elif defined(__aarch64__)
inline Vec Sqrt(Vec x) {
  return reinterpret_cast<Vec>(vsqrtq_f32(reinterpret_cast<float32x4_t>(x)));
}
#else
inline Vec Sqrt(Vec x) {
  for (int i = 0; i < kLanes; ++i) x[i] = std::sqrt(x[i]);
  return x;
}
#endif
inline float Larger(float a, float b) { return a < b ? b : a; }
inline Vec Larger(Vec a, Vec b) { return a < b ? b : a; }

// Lane k of the result is v's lane idx[k] (each in [0, kLanes)).
inline Vec Permute(Vec v, VecI idx) {
#if defined(__AVX512F__)
  return reinterpret_cast<Vec>(_mm512_maskz_permutexvar_ps(
      kAllLanes, reinterpret_cast<__m512i>(idx), reinterpret_cast<__m512>(v)));
#elif defined(__AVX2__)  // the 8-lane Vec
  return reinterpret_cast<Vec>(
      _mm256_permutevar8x32_ps(reinterpret_cast<__m256>(v), reinterpret_cast<__m256i>(idx)));
#else
  Vec r;
  for (int k = 0; k < kLanes; ++k) r[k] = v[idx[k]];
  return r;
#endif
}

// p * 2^n for p in [0.5, 2) and an integer-valued n in [-126, 128], by
// adding n to p's exponent bits (ldexp), +inf where the product overflows
// (the sum's bits capped at +inf's: a NaN's otherwise). Where n = -126, p
// must be at least 1 (a smaller p's bits would be read as a subnormal).
// (Multiplying p by a float 2^n would overflow at n = 128, making exp inf
// from 88.376, where it is finite up to 88.7228.)
inline float ScaleByPow2(float p, float n) {
  const uint32_t bits = __builtin_bit_cast(uint32_t, p) +
                        static_cast<uint32_t>(static_cast<int32_t>(n)) * (1u << 23);
  return __builtin_bit_cast(float, std::min<uint32_t>(bits, 0x7F800000u));
}
inline Vec ScaleByPow2(Vec p, Vec n) {
  const VecI bits = reinterpret_cast<VecI>(p) + __builtin_convertvector(n, VecI) * (1 << 23);
  // (+inf's bits as a vector, not a scalar: then GCC makes the select a min)
  const VecI inf = reinterpret_cast<VecI>(Splat<Vec>(__builtin_inff()));
  return reinterpret_cast<Vec>(bits < inf ? bits : inf);
}

}  // namespace jax_aclnn::host::JAX_ACLNN_KERNEL_TARGET
#endif  // JAX_ACLNN_KERNEL_TARGET

#endif  // JAX_ACLNN_HOST_SIMD_H_
