// The XLA FFI handlers of the five aclnn operators, for the CPU (host
// provider) and the NPU (CANN) platforms, and the per-call-site state type.
#ifndef JAX_ACLNN_FFI_HANDLERS_H_
#define JAX_ACLNN_FFI_HANDLERS_H_

#include "xla/ffi/api/c_api.h"

namespace jax_aclnn {

struct HandlerSet {
  const char* target;            // custom-call target name
  const char* function;          // the jax_aclnn function
  XLA_FFI_Handler* instantiate;  // creates the call site's executor cache
  XLA_FFI_Handler* cpu_execute;
  XLA_FFI_Handler* npu_execute;
};

// One entry per operator, in OpId order (operators.h).
extern const HandlerSet kHandlerSets[];
extern const int kNumHandlerSets;

// The FFI type id and type info of the per-call-site state.
XLA_FFI_TypeId* CallStateTypeId();
const XLA_FFI_TypeInfo* CallStateTypeInfo();

// Whether call sites keep repeatable executors (default on). Off, every call
// runs the one-shot two-phase sequence; for measuring what reuse saves.
bool ExecutorReuse();
void SetExecutorReuse(bool enabled);

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_FFI_HANDLERS_H_
