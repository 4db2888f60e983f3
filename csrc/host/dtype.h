// Element types of the host provider: float32, float16 and bfloat16 storage,
// always computed in float32. Conversions are plain loops over contiguous
// chunks, which the compiler vectorises (F16C / AVX-512 FP16 / NEON).
#ifndef JAX_ACLNN_HOST_DTYPE_H_
#define JAX_ACLNN_HOST_DTYPE_H_

#include <cstdint>
#include <cstring>

#include "aclnn_abi.h"

namespace jax_aclnn::host {

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

inline float Bf16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even; NaN stays a (quiet) NaN.
inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
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
      const _Float16* s = static_cast<const _Float16*>(src);
      if (stride == 1) {
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i * stride]);
      }
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
      _Float16* d = static_cast<_Float16*>(dst);
      if (stride == 1) {
        for (int64_t i = 0; i < n; ++i) d[i] = static_cast<_Float16>(src[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) d[i * stride] = static_cast<_Float16>(src[i]);
      }
      break;
    }
    default: {  // ACL_BF16
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = FloatToBf16(src[i]);
      break;
    }
  }
}

}  // namespace jax_aclnn::host

#endif  // JAX_ACLNN_HOST_DTYPE_H_
