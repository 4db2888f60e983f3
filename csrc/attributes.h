// An operator's custom-call attributes are declared once, in its header
// (csrc/ops/<op>.h), as an X-macro JAX_ACLNN_ATTRIBUTES_<Name>(X) of
// X(C++ type, name) entries in the order of the struct's members. From it
// come the operator's Attributes struct (JAX_ACLNN_ATTRIBUTE_MEMBER), its
// XLA FFI decoding (ffi/handlers.cc) and the schema the Python operators
// are checked against (_aclnn_ffi.operator_attributes(), ffi/module.cc).
#ifndef JAX_ACLNN_ATTRIBUTES_H_
#define JAX_ACLNN_ATTRIBUTES_H_

#include <cstdint>

#define JAX_ACLNN_ATTRIBUTE_MEMBER(type, name) type name;

namespace jax_aclnn {

// The NumPy dtype name of an attribute type, as the Python side sends it.
template <typename T>
struct AttributeType;
template <>
struct AttributeType<bool> {
  static constexpr const char* kName = "bool";
};
template <>
struct AttributeType<int64_t> {
  static constexpr const char* kName = "int64";
};
template <>
struct AttributeType<float> {
  static constexpr const char* kName = "float32";
};
template <>
struct AttributeType<double> {
  static constexpr const char* kName = "float64";
};

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_ATTRIBUTES_H_
