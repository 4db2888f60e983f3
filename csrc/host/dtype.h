// Element types of the host provider: float32, float16 and bfloat16 storage,
// always computed in float32. Conversions are branch-free integer and float
// formulas in plain loops, which the compiler vectorises for any SIMD
// instruction set; contiguous float16 goes through Highway when the build
// has it (the CPU's conversion instructions: twice as fast as the formulas).
// GCC 12 does not vectorise conversions of the _Float16 type itself.
#ifndef JAX_ACLNN_HOST_DTYPE_H_
#define JAX_ACLNN_HOST_DTYPE_H_

#include <cstdint>

#include "aclnn_abi.h"

// Highway only for targets whose CPUs convert float16 themselves (F16C, Arm):
// its emulated conversions for older x86 targets are no faster than the
// formulas below (and Highway 1.0's turn float16 NaNs into infinities).
#if JAX_ACLNN_HAVE_HIGHWAY && (defined(__F16C__) || defined(__aarch64__))
#define JAX_ACLNN_HIGHWAY_FLOAT16 1
#include "hwy/highway.h"
// Functions calling Highway carry its target attributes (aarch64 GCC: "+crypto").
#define JAX_ACLNN_HWY_ATTR HWY_ATTR
#else
#define JAX_ACLNN_HWY_ATTR
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

inline int64_t ElementSize(aclDataType t) {
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

// Contiguous float16 <-> float32: Highway's conversions (the CPU's own
// instructions) for whole vectors, the formulas above for the tail.
#if JAX_ACLNN_HIGHWAY_FLOAT16
namespace hn = hwy::HWY_NAMESPACE;
using FloatTag = hn::ScalableTag<float>;
using HalfTag = hn::Rebind<hwy::float16_t, FloatTag>;
HWY_ATTR inline int64_t FloatLanes() { return static_cast<int64_t>(hn::Lanes(FloatTag())); }
#endif

JAX_ACLNN_HWY_ATTR
inline void HalvesToFloats(const uint16_t* __restrict src, int64_t n, float* __restrict dst) {
  int64_t i = 0;
#if JAX_ACLNN_HIGHWAY_FLOAT16
  const auto* s = reinterpret_cast<const hwy::float16_t*>(src);
  for (; i + FloatLanes() <= n; i += FloatLanes())
    hn::StoreU(hn::PromoteTo(FloatTag(), hn::LoadU(HalfTag(), s + i)), FloatTag(), dst + i);
#endif
  for (; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}

JAX_ACLNN_HWY_ATTR
inline void FloatsToHalves(const float* __restrict src, int64_t n, uint16_t* __restrict dst) {
  int64_t i = 0;
#if JAX_ACLNN_HIGHWAY_FLOAT16
  auto* d = reinterpret_cast<hwy::float16_t*>(dst);
  for (; i + FloatLanes() <= n; i += FloatLanes())
    hn::StoreU(hn::DemoteTo(HalfTag(), hn::LoadU(FloatTag(), src + i)), HalfTag(), d + i);
#endif
  for (; i < n; ++i) dst[i] = FloatToHalf(src[i]);
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
      for (int64_t i = 0; i < n; ++i) d[i * stride] = FloatToBf16(src[i]);
      break;
    }
  }
}

}  // namespace
}  // namespace jax_aclnn::host

#endif  // JAX_ACLNN_HOST_DTYPE_H_
