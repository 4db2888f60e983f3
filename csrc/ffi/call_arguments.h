// The first phase's argument list of one call, built from the custom call's
// attributes and buffers (ffi/arguments.h): each buffer becomes an aclTensor
// and each other argument its aclScalar, array, list or plain value
// (ffi/descriptors.h), in the prototype's order.
#ifndef JAX_ACLNN_FFI_CALL_ARGUMENTS_H_
#define JAX_ACLNN_FFI_CALL_ARGUMENTS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "aclnn_abi.h"
#include "ffi/arguments.h"
#include "ffi/descriptors.h"
#include "ffi/first_phase.h"
#include "xla/ffi/api/ffi.h"

namespace jax_aclnn {

// The custom call's attributes (ffi/arguments.h). Bound one by one, in
// their sorted order: XLA FFI then decodes each by its index, where a struct
// of attributes is looked up by name on every call.
struct CallAttributes {
  ffi::Span<const double> floats;
  ffi::Span<const int64_t> ints;
  ffi::Span<const int64_t> kinds;
  std::string_view library;
  std::string_view op;  // the attribute "operator"
  std::string_view strings;
};

// One call: the operator's attributes and buffers.
struct Call {
  const CallAttributes& attrs;
  ffi::RemainingArgs in;
  ffi::RemainingRets out;
};

constexpr int kMaxArrayValues = 256;  // bool and float array values of one call

// The first phase's arguments of one call and what they are made of: the
// descriptors (in `d`), the input and output tensor parameters' descriptors
// by index, the bool and float arrays' values. Only the entries made are
// set (the arrays are not cleared on every call).
struct Built {
  explicit Built(Descriptors& descriptors) : d(descriptors) {}
  Descriptors& d;
  Arguments args;
  aclTensor* inputs[kMaxTensors];
  aclTensor* outputs[kMaxTensors];
  int num_inputs = 0, num_outputs = 0;
  bool one_shot = false;  // tensor lists or in-place tensors: executors are not re-targeted
  bool bools[kMaxArrayValues];
  float floats[kMaxArrayValues];
  int num_array_values = 0;
};

// Every parameter's argument of call `c`, descriptors included, into `b`.
ffi::Error Build(const Call& c, Built& b);

// An INVALID_ARGUMENT error of jax_aclnn.
inline ffi::Error Invalid(const std::string& message) {
  return ffi::Error::InvalidArgument("jax_aclnn: " + message);
}

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_FFI_CALL_ARGUMENTS_H_
