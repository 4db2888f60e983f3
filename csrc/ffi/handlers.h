// The XLA FFI handler of every aclnn operator, for the CPU (host provider)
// and the NPU (CANN) platforms, and the per-call-site state type.
#ifndef JAX_ACLNN_FFI_HANDLERS_H_
#define JAX_ACLNN_FFI_HANDLERS_H_

#include <cstddef>

#include "xla/ffi/api/c_api.h"

namespace jax_aclnn {

struct HandlerSet {
  XLA_FFI_Handler* instantiate;  // creates the call site's executor cache
  XLA_FFI_Handler* cpu_execute;
  XLA_FFI_Handler* npu_execute;
};

// The handlers, the same for every operator: each operator's custom-call
// target (aclnn_<name>) is registered with them, and its attributes say
// which operator it is and its argument list (ffi/arguments.h).
extern const HandlerSet kHandlers;

// XLA_FFI_TypeInfo of FFI API 0.2 on: what the runtime needs to know of a
// registered type (defined here: FFI API 0.1's headers, the build's, lack it;
// a 0.1 runtime takes the deleter with each XLA_FFI_State_Set instead).
struct TypeInfo {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  void (*deleter)(void* object);
};

// The FFI type id and type info of the per-call-site state.
XLA_FFI_TypeId* CallStateTypeId();
const TypeInfo* CallStateTypeInfo();

// Whether call sites keep repeatable executors (default on). Off, every call
// runs the one-shot two-phase sequence; for measuring what reuse saves.
bool ExecutorReuse();
void SetExecutorReuse(bool enabled);

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_FFI_HANDLERS_H_
