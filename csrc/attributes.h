// An operator's custom-call attributes are declared once, in its header
// (csrc/ops/<op>.h), as an X-macro JAX_ACLNN_ATTRIBUTES_<Name>(X) of
// X(C++ type, name) entries. From it come the operator's Attributes struct
// (JAX_ACLNN_ATTRIBUTES_STRUCT), its XLA FFI decoding (ffi/handlers.cc) and
// the schema the Python operators are checked against
// (_aclnn_ffi.operator_attributes(), ffi/module.cc).
#ifndef JAX_ACLNN_ATTRIBUTES_H_
#define JAX_ACLNN_ATTRIBUTES_H_

#include <cstdint>
#include <type_traits>

#define JAX_ACLNN_ATTRIBUTE_MEMBER(type, name) type name;
// struct Attributes { <the members, in the order declared> }
#define JAX_ACLNN_ATTRIBUTES_STRUCT(Name)                    \
  struct Attributes {                                        \
    JAX_ACLNN_ATTRIBUTES_##Name(JAX_ACLNN_ATTRIBUTE_MEMBER) \
  }

namespace jax_aclnn {

// The NumPy dtype name of an attribute type, as the Python side sends it.
template <typename T>
constexpr const char* AttributeType() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_same_v<T, int64_t>) return "int64";
  else if constexpr (std::is_same_v<T, float>) return "float32";
  else {
    static_assert(std::is_same_v<T, double>, "attribute types: bool, int64_t, float, double");
    return "float64";
  }
}

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_ATTRIBUTES_H_
