// The argument list of an aclnn first phase, as a custom call carries it.
//
// Every operator's first phase is `aclnnStatus aclnnXxxGetWorkspaceSize(<its
// parameters>, uint64_t* workspaceSize, aclOpExecutor** executor)`. The
// custom call of any operator carries these attributes (jax_aclnn/_arguments.py
// encodes them from a parsed prototype):
//   operator  string       the aclnn operator, e.g. "aclnnSoftplusBackward"
//   library   string       "" (the platform's provider) or the absolute path of
//                          a library exporting the operator's two phases
//   kinds     int64 array  one ArgKind per parameter, in the prototype's order
//   ints      int64 array  the integer values, consumed in parameter order
//   floats    float64 array the floating values, consumed in parameter order
//   strings   string       each string parameter's bytes followed by a NUL
// and its buffers: the operands in the order of the input tensors (a tensor
// list's n tensors in a row), the results in the order of the output tensors.
#ifndef JAX_ACLNN_FFI_ARGUMENTS_H_
#define JAX_ACLNN_FFI_ARGUMENTS_H_

#include <cstdint>

namespace jax_aclnn {

// X(Kind, value, C parameter type, what it consumes).
#define JAX_ACLNN_ARGUMENT_KINDS(X)                                                  \
  X(kInput, 0, "const aclTensor*", "the next operand buffer")                        \
  X(kOutput, 1, "aclTensor*", "the next result buffer")                              \
  X(kAbsentInput, 2, "const aclTensor*", "the next operand buffer (a placeholder); passes null") \
  X(kAbsentOutput, 3, "aclTensor*", "the next result buffer (a placeholder); passes null") \
  X(kNull, 4, "a pointer", "nothing; passes null")                                   \
  X(kScalar, 5, "const aclScalar*",                                                  \
    "ints: its aclDataType, then the value for an integer or bool type; floats: the value for a floating type") \
  X(kBool, 6, "bool", "ints: 0 or 1")                                                \
  X(kInt64, 7, "int64_t", "ints: the value")                                         \
  X(kDouble, 8, "double", "floats: the value")                                       \
  X(kFloat, 9, "float", "floats: the value, rounded to float")                      \
  X(kIntArray, 10, "const aclIntArray*", "ints: n, then n values")                   \
  X(kBoolArray, 11, "const aclBoolArray*", "ints: n, then n values (0 or 1)")        \
  X(kFloatArray, 12, "const aclFloatArray*", "ints: n; floats: n values")            \
  X(kInputList, 13, "const aclTensorList*", "ints: n; the next n operand buffers")   \
  X(kOutputList, 14, "aclTensorList*", "ints: n; the next n result buffers")         \
  X(kString, 15, "const char*", "strings: the next NUL-terminated string")           \
  X(kInt8, 16, "int8_t", "ints: the value")                                          \
  X(kInt32, 17, "int32_t", "ints: the value")                                       \
  X(kInOut, 18, "aclTensor*",                                                        \
    "the next operand buffer and the next result buffer, one buffer (XLA's input_output_aliases): a tensor updated in place") \
  X(kAbsentInOut, 19, "aclTensor*", "the next operand and result buffers (placeholders); passes null")

enum class ArgKind : int64_t {
#define JAX_ACLNN_ARGUMENT_KIND(kind, value, type, consumes) kind = value,
  JAX_ACLNN_ARGUMENT_KINDS(JAX_ACLNN_ARGUMENT_KIND)
#undef JAX_ACLNN_ARGUMENT_KIND
};

// Bounds of one call: past them a call is an error, never a write out of bounds.
constexpr int kMaxParameters = 64;  // first-phase parameters before workspaceSize
constexpr int kMaxTensors = 64;     // aclTensor descriptors (lists' included)
constexpr int kMaxOtherDescriptors = 32;  // aclScalar, arrays, tensor lists

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_FFI_ARGUMENTS_H_
