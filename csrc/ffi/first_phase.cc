// A first phase called through libffi (first_phase.h): the argument types
// become a call interface (ffi_cif) and the call follows this machine's C
// calling convention, whatever the mix of pointers, integers and floating
// arguments and however many of them go on the stack.
#include "ffi/first_phase.h"

#include <ffi.h>

namespace jax_aclnn {
namespace {

ffi_type* TypeOf(Argument::Type t) {
  switch (t) {
    case Argument::Type::kPointer: return &ffi_type_pointer;
    case Argument::Type::kBool: return &ffi_type_uint8;  // C's bool: one byte, 0 or 1
    case Argument::Type::kInt8: return &ffi_type_sint8;
    case Argument::Type::kInt32: return &ffi_type_sint32;
    case Argument::Type::kInt64: return &ffi_type_sint64;
    case Argument::Type::kFloat: return &ffi_type_float;
    case Argument::Type::kDouble: return &ffi_type_double;
  }
  return nullptr;
}

}  // namespace

ffi::ErrorOr<aclnnStatus> CallFirstPhase(void* first_phase, const Arguments& args,
                                         uint64_t* workspace_size, aclOpExecutor** executor) {
  constexpr int kCapacity = kMaxParameters + 2;
  ffi_type* types[kCapacity];
  void* values[kCapacity];
  const int n = args.size;
  if (n < 0 || n > kMaxParameters)
    return ffi::Unexpected(ffi::Error::InvalidArgument("jax_aclnn: too many parameters"));
  for (int i = 0; i < n; ++i) {
    types[i] = TypeOf(args.items[i].type);
    // Every member of the union starts at its address.
    values[i] = const_cast<void*>(static_cast<const void*>(&args.items[i].value));
  }
  types[n] = types[n + 1] = &ffi_type_pointer;
  values[n] = &workspace_size;
  values[n + 1] = &executor;
  ffi_cif cif;
  if (ffi_prep_cif(&cif, FFI_DEFAULT_ABI, n + 2, &ffi_type_sint32, types) != FFI_OK)
    return ffi::Unexpected(ffi::Error::Internal("jax_aclnn: libffi cannot describe the call"));
  ffi_arg status = 0;  // a return value narrower than a register is widened to ffi_arg
  ffi_call(&cif, FFI_FN(first_phase), &status, values);
  return static_cast<aclnnStatus>(status);
}

}  // namespace jax_aclnn
