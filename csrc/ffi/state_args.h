// The arguments of XLA_FFI_State_Get/Set in each FFI API version's layout,
// for the handlers (call_state.cc lays them out for the runtime that calls
// them) and the test-only FFI runtime (csrc/testing/, which speaks each
// version). Defined here: the headers have one version's.
#ifndef JAX_ACLNN_FFI_STATE_ARGS_H_
#define JAX_ACLNN_FFI_STATE_ARGS_H_

#include <cstddef>

#include "xla/ffi/api/c_api.h"

namespace jax_aclnn {

// XLA_FFI_State_Get_Args of FFI API 0.1 and 0.2, and _Set_Args of 0.2.
struct StateArgsV02 {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_ExecutionContext* ctx;
  XLA_FFI_TypeId* type_id;
  void* state;
};

// XLA_FFI_State_Set_Args of FFI API 0.1 (the state's deleter comes with it).
struct StateSetArgsV01 {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_ExecutionContext* ctx;
  XLA_FFI_TypeId* type_id;
  void* state;
  void (*deleter)(void* state);
};

// XLA_FFI_State_Get_Args and XLA_FFI_State_Set_Args of FFI API 0.3 (a
// `stage` in front of `type_id`).
struct StateArgsV03 {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_ExecutionContext* ctx;
  XLA_FFI_ExecutionStage stage;
  XLA_FFI_TypeId* type_id;
  void* state;
};

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_FFI_STATE_ARGS_H_
