// Element types of the host provider: float32, float16 and bfloat16 storage,
// always computed in float32. Contiguous float16 is converted by the CPU's
// own instructions where the kernel target has them (F16C in x86-64-v3, 8
// lanes; AVX-512 in v4, 16; NEON on aarch64: intrinsics, no other headers);
// the portable baseline copy, strided views and vector tails use branch-free
// integer and float formulas. bfloat16 is a 16-bit shift (rounding to
// nearest even on store), in plain loops that the compiler vectorises.
// GCC 12 does not vectorise conversions of the _Float16 type itself.
#ifndef JAX_ACLNN_HOST_DTYPE_H_
#define JAX_ACLNN_HOST_DTYPE_H_

#include <cstdint>
#include <type_traits>

#include "aclnn_abi.h"

#if defined(__F16C__)
#include <immintrin.h>
#elif defined(__x86_64__)
#include <emmintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace jax_aclnn::host {
namespace {  // internal linkage: each kernel target (kernels.h) keeps its own copy

inline bool IsSupportedFloat(aclDataType t) {
  return t == ACL_FLOAT || t == ACL_FLOAT16 || t == ACL_BF16;
}

inline const char* DataTypeName(aclDataType t) {
  switch (t) {
    case ACL_FLOAT: return "FLOAT";
    case ACL_FLOAT16: return "FLOAT16";
    case ACL_BF16: return "BFLOAT16";
    case ACL_DOUBLE: return "DOUBLE";
    case ACL_INT32: return "INT32";
    case ACL_INT64: return "INT64";
    case ACL_BOOL: return "BOOL";
    default: return "UNSUPPORTED";
  }
}

constexpr int64_t ElementSize(aclDataType t) {
  switch (t) {
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: return 4;
    case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: case ACL_UINT16: return 2;
    case ACL_DOUBLE: case ACL_INT64: case ACL_UINT64: return 8;
    case ACL_INT8: case ACL_UINT8: case ACL_BOOL: return 1;
    default: return 0;
  }
}

inline float BitsToFloat(uint32_t bits) { return __builtin_bit_cast(float, bits); }
inline uint32_t FloatToBits(float f) { return __builtin_bit_cast(uint32_t, f); }

inline float Bf16ToFloat(uint16_t h) { return BitsToFloat(static_cast<uint32_t>(h) << 16); }

// Round to nearest even; NaN stays a (quiet) NaN.
inline uint16_t FloatToBf16(float f) {
  uint32_t bits = FloatToBits(f);
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  const uint32_t quiet_nan = bits | 0x400000u;
  return static_cast<uint16_t>(((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded) >> 16);
}

// IEEE binary16 -> float, exact. Subnormals go through an integer-to-float
// conversion, so no float subnormal is involved (correct with DAZ/FTZ on).
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa
  const uint32_t subnormal = FloatToBits(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
  const uint32_t normal = (em << 13) + ((127u - 15u) << 23);
  const uint32_t inf_nan = (em << 13) | 0x7f800000u;
  return BitsToFloat(sign | (em < 0x400u ? subnormal : em < 0x7c00u ? normal : inf_nan));
}

// float -> IEEE binary16, round to nearest even; overflow gives inf, NaN a
// quiet NaN (the branch-free method of F. Giesen's float_to_half_fast3_rtne).
inline uint16_t FloatToHalf(float f) {
  const uint32_t bits = FloatToBits(f);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t a = bits ^ sign;  // |f|
  // |f| < 2^-14: the float addition aligns the mantissa and rounds it.
  constexpr uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  const uint32_t subnormal = FloatToBits(BitsToFloat(a) + BitsToFloat(kDenormMagic)) - kDenormMagic;
  const uint32_t normal = (a + ((15u - 127u) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  const uint32_t big = a > 0x7f800000u ? 0x7e00u : 0x7c00u;  // NaN, else inf
  const uint32_t h = a >= ((127u + 16u) << 23) ? big : a < (113u << 23) ? subnormal : normal;
  return static_cast<uint16_t>(h | (sign >> 16));
}

#if defined(__AVX512F__)
// The AVX-512 intrinsics are used in their zero-masking forms with every
// lane enabled: the same instructions, but GCC 12's plain forms warn
// (-Wmaybe-uninitialized inside its own header, GCC bug 105593).
constexpr __mmask16 kAllLanes = 0xffff;
#endif

// How this kernel target converts contiguous float16 (reported by `info`
// and `bench` through JaxAclnnHostHalfConversions).
#if defined(__F16C__)
constexpr const char* kHalfConversions = "F16C vcvtph2ps/vcvtps2ph";
#elif defined(__aarch64__)
constexpr const char* kHalfConversions = "NEON fcvtl/fcvtn";
#else
constexpr const char* kHalfConversions = "portable formulas";
#endif

// Contiguous float16 <-> float32 (S, D: uint16_t and float, either way):
// whole vectors with the CPU's conversion instructions (round to nearest
// even; NaN stays NaN, subnormals exact, MXCSR's DAZ/FTZ do not apply), the
// formulas above for the rest. One loop nest for both directions: the same
// vector widths on the same CPUs.
template <typename S, typename D>
inline void ConvertHalves(const S* __restrict src, int64_t n, D* __restrict dst) {
  constexpr bool kToFloat = std::is_same_v<D, float>;
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    if constexpr (kToFloat)
      _mm512_storeu_ps(dst + i, _mm512_maskz_cvtph_ps(kAllLanes, _mm256_loadu_si256(
                                                     reinterpret_cast<const __m256i*>(src + i))));
    else
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                          _mm512_maskz_cvtps_ph(kAllLanes, _mm512_loadu_ps(src + i),
                                                _MM_FROUND_TO_NEAREST_INT));
  }
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    if constexpr (kToFloat)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                    reinterpret_cast<const __m128i*>(src + i))));
    else
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
#elif defined(__aarch64__)
  for (; i + 4 <= n; i += 4) {
    if constexpr (kToFloat)
      vst1q_f32(dst + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(src + i))));
    else
      vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
  }
#endif
  for (; i < n; ++i) {
    if constexpr (kToFloat) dst[i] = HalfToFloat(src[i]);
    else dst[i] = FloatToHalf(src[i]);
  }
}

inline void HalvesToFloats(const uint16_t* __restrict src, int64_t n, float* __restrict dst) {
  ConvertHalves(src, n, dst);
}

inline void FloatsToHalves(const float* __restrict src, int64_t n, uint16_t* __restrict dst) {
  ConvertHalves(src, n, dst);
}

// Contiguous bfloat16 <-> float32: the formulas in loops without strides,
// which the compiler vectorises; AVX2 intrinsics for stores on x86-64-v3.
inline void Bf16sToFloats(const uint16_t* __restrict src, int64_t n, float* __restrict dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
}

inline void FloatsToBf16s(const float* __restrict src, int64_t n, uint16_t* __restrict dst) {
  int64_t i = 0;
#if defined(__AVX2__) && !defined(__AVX512F__)
  // x86-64-v3: FloatToBf16 on 8 lanes, 20% faster than GCC's vectorisation
  // of the loop below (for x86-64-v4, with AVX-512's vpmovdw, GCC's is faster).
  const auto round = [](__m256 f) {
    const __m256i bits = _mm256_castps_si256(f);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i quiet_nan = _mm256_or_si256(bits, _mm256_set1_epi32(0x400000));
    return _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet_nan, nan), 16);
  };
  for (; i + 16 <= n; i += 16) {
    // packus interleaves 128-bit lanes (a0-3 b0-3 a4-7 b4-7); the permute restores the order.
    const __m256i packed = _mm256_packus_epi32(round(_mm256_loadu_ps(src + i)),
                                               round(_mm256_loadu_ps(src + i + 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_permute4x64_epi64(packed, 0xd8));
  }
#endif
  for (; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

// Reads n elements of type `t` starting at `src` with element stride `stride`
// into the float buffer `dst`.
inline void LoadAsFloat(aclDataType t, const void* src, int64_t stride, int64_t n,
                        float* __restrict dst) {
  if (stride == 0) {
    float v = 0.0f;
    LoadAsFloat(t, src, 1, 1, &v);
    for (int64_t i = 0; i < n; ++i) dst[i] = v;
    return;
  }
  switch (t) {
    case ACL_FLOAT: {
      const float* s = static_cast<const float*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      break;
    }
    case ACL_FLOAT16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      if (stride == 1) return HalvesToFloats(s, n, dst);
      for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(s[i * stride]);
      break;
    }
    default: {  // ACL_BF16
      const uint16_t* s = static_cast<const uint16_t*>(src);
      if (stride == 1) return Bf16sToFloats(s, n, dst);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(s[i * stride]);
      break;
    }
  }
}

// Writes n floats to `dst` (type `t`, element stride `stride`).
inline void StoreFromFloat(aclDataType t, const float* __restrict src, int64_t n,
                           void* dst, int64_t stride) {
  switch (t) {
    case ACL_FLOAT: {
      float* d = static_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = src[i];
      break;
    }
    case ACL_FLOAT16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      if (stride == 1) return FloatsToHalves(src, n, d);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = FloatToHalf(src[i]);
      break;
    }
    default: {  // ACL_BF16
      uint16_t* d = static_cast<uint16_t*>(dst);
      if (stride == 1) return FloatsToBf16s(src, n, d);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = FloatToBf16(src[i]);
      break;
    }
  }
}

}  // namespace
}  // namespace jax_aclnn::host

#endif  // JAX_ACLNN_HOST_DTYPE_H_
