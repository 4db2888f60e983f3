// The checks and data access the test provider's CANN-semantics operators
// share (norm_operators.cc, llm_operators.cc, attention_operators.cc,
// grouped_matmul_operators.cc, moe_operators.cc): each refusal is
// ACLNN_ERR_PARAM_NULLPTR or ACLNN_ERR_PARAM_INVALID with a message naming
// the operator, the tensor and the shapes (Fail, test_provider.h). Tensors
// are read where their strides say (a non-contiguous view where CANN's page
// allows one is gathered first).
#ifndef JAX_ACLNN_TESTING_OPERATOR_CHECKS_H_
#define JAX_ACLNN_TESTING_OPERATOR_CHECKS_H_

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "testing/test_provider.h"

namespace jax_aclnn::test_provider::ops {

using Dims = std::vector<int64_t>;

inline int64_t Product(const Dims& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= dims[i];
  return p;
}
inline int64_t Numel(const aclTensor* t) {
  return t == nullptr ? 0 : Product(t->dims, 0, t->dims.size());
}
inline std::string ShapeOf(const Dims& dims) {
  return "[" + test_provider::Join(dims, [](int64_t d) { return std::to_string(d); }) + "]";
}
inline std::string Shape(const aclTensor* t) { return t ? ShapeOf(t->dims) : "null"; }

inline Dims ContiguousStrides(const Dims& dims) {
  Dims s(dims.size());
  int64_t stride = 1;
  for (size_t d = dims.size(); d-- > 0; stride *= dims[d]) s[d] = stride;
  return s;
}
// The tensor's strides in elements (its own, or contiguous ones).
inline Dims StridesOf(const aclTensor* t) {
  return t->strides.empty() ? ContiguousStrides(t->dims) : t->strides;
}
inline bool IsContiguous(const aclTensor* t) {
  const Dims c = ContiguousStrides(t->dims);
  for (size_t d = 0; d < t->strides.size(); ++d)
    if (t->dims[d] != 1 && t->strides[d] != c[d]) return false;
  return true;
}

inline aclnnStatus CheckNotNull(const char* op, const char* name, const void* p) {
  if (p == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is null", op, name);
  return ACLNN_SUCCESS;
}

// A non-null tensor of one of `dtypes`; contiguous unless `strided_ok`
// (CANN's page marks the parameter as taking non-contiguous tensors).
inline aclnnStatus CheckTensor(const char* op, const char* name, const aclTensor* t,
                               std::initializer_list<aclDataType> dtypes,
                               bool strided_ok = false) {
  RETURN_IF_ERROR(CheckNotNull(op, name, t));
  bool ok = false;
  std::string names;
  for (aclDataType d : dtypes) {
    ok = ok || t->dtype == d;
    names += (names.empty() ? "" : " or ") + DtypeName(d);
  }
  if (!ok)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has data type %s; only %s is supported", op,
                name, DtypeName(t->dtype).c_str(), names.c_str());
  if (!t->strides.empty() && t->strides.size() != t->dims.size())
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has %zu strides for %zu dimensions", op, name,
                t->strides.size(), t->dims.size());
  if (!strided_ok && !IsContiguous(t))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s is not contiguous", op, name);
  return ACLNN_SUCCESS;
}
inline aclnnStatus CheckFloat32(const char* op, const char* name, const aclTensor* t,
                                bool strided_ok = false) {
  return CheckTensor(op, name, t, {ACL_FLOAT}, strided_ok);
}

inline aclnnStatus CheckShape(const char* op, const char* name, const aclTensor* t,
                              const Dims& dims) {
  if (t->dims != dims)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s; expected %s", op, name,
                Shape(t).c_str(), ShapeOf(dims).c_str());
  return ACLNN_SUCCESS;
}

inline aclnnStatus CheckRank(const char* op, const char* name, const aclTensor* t, size_t lo,
                             size_t hi) {
  if (t->dims.size() < lo || t->dims.size() > hi)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s; its rank must be %zu to %zu", op,
                name, Shape(t).c_str(), lo, hi);
  return ACLNN_SUCCESS;
}

// A second phase's tensors: each one with elements has data.
inline aclnnStatus CheckData(const char* op, const std::vector<Slot>& in,
                             const std::vector<Slot>& out) {
  for (const auto* slots : {&in, &out})
    for (const Slot& s : *slots)
      if (s.tensor != nullptr && Numel(s.tensor) > 0 && s.data == nullptr)
        return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: a tensor of shape %s has no data", op,
                    Shape(s.tensor).c_str());
  return ACLNN_SUCCESS;
}

// A float32 input's elements in row-major order: the slot's data when it is
// contiguous, else a gathered copy.
class Dense {
 public:
  explicit Dense(const Slot& s) {
    if (s.tensor == nullptr || s.data == nullptr) return;
    const aclTensor* t = s.tensor;
    data_ = Floats(s);
    if (IsContiguous(t)) return;
    const Dims strides = StridesOf(t);
    const size_t rank = t->dims.size();
    copy_.resize(static_cast<size_t>(Numel(t)));
    Dims index(rank, 0);
    for (size_t i = 0; i < copy_.size(); ++i) {
      int64_t offset = 0;
      for (size_t d = 0; d < rank; ++d) offset += index[d] * strides[d];
      copy_[i] = data_[offset];
      for (size_t d = rank; d-- > 0;) {
        if (++index[d] < t->dims[d]) break;
        index[d] = 0;
      }
    }
    data_ = copy_.data();
  }
  const float* get() const { return data_; }
  float operator[](int64_t i) const { return data_[i]; }

 private:
  const float* data_ = nullptr;
  std::vector<float> copy_;
};

// Element i of an integer tensor (int32 or int64, contiguous).
inline int64_t IntAt(const Slot& s, int64_t i) {
  if (s.tensor->dtype == ACL_INT32) return static_cast<const int32_t*>(s.data)[i];
  return static_cast<const int64_t*>(s.data)[i];
}

// dim in [-rank, rank - 1], made non-negative; -1 when out of range.
inline int64_t NormalizeDim(int64_t dim, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  if (dim < -r || dim >= r) return -1;
  return dim < 0 ? dim + r : dim;
}

}  // namespace jax_aclnn::test_provider::ops

#endif  // JAX_ACLNN_TESTING_OPERATOR_CHECKS_H_
