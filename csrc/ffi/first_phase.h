// Calling any aclnn operator's first phase, aclnnXxxGetWorkspaceSize, with an
// argument list assembled at run time (first_phase.cc, through libffi).
#ifndef JAX_ACLNN_FFI_FIRST_PHASE_H_
#define JAX_ACLNN_FFI_FIRST_PHASE_H_

#include <cstdint>

#include "aclnn_abi.h"
#include "ffi/arguments.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jax_aclnn {

// One argument of a first phase, as its C type passes it.
struct Argument {
  enum class Type : uint8_t { kPointer, kBool, kInt8, kInt32, kInt64, kFloat, kDouble };
  Type type;
  union {
    void* pointer;
    bool b;
    int8_t i8;
    int32_t i32;
    int64_t i64;
    float f;
    double d;
  } value;
};

// The arguments of one first-phase call, before workspaceSize and executor.
struct Arguments {
  Argument items[kMaxParameters];
  int size = 0;
};

// Calls `first_phase` (an aclnnXxxGetWorkspaceSize of the provider) with
// `args`, `workspace_size` and `executor`: the C calling convention of this
// machine for that parameter list (libffi). Returns its aclnnStatus, or an
// error when libffi cannot describe the call.
ffi::ErrorOr<aclnnStatus> CallFirstPhase(void* first_phase, const Arguments& args,
                                         uint64_t* workspace_size, aclOpExecutor** executor);

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_FFI_FIRST_PHASE_H_
