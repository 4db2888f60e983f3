// Test-only: a minimal XLA FFI runtime standing in for a PJRT device plugin
// (the Ascend one), so that the NPU-platform handlers run in tests. It
// implements what XLA's own runtime (xla/ffi/ffi_api.cc) gives a handler on a
// device platform: the API table, errors, the type registry, per-call-site
// state, the platform stream and device memory for the scratch allocator.
// Built only with -DJAX_ACLNN_TESTING=ON (module jax_aclnn._ffi_testing).
#ifndef JAX_ACLNN_TESTING_FFI_RUNTIME_H_
#define JAX_ACLNN_TESTING_FFI_RUNTIME_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "xla/ffi/api/c_api.h"

namespace jax_aclnn::testing {

// Structs of FFI API versions other than the headers' (pip's isolated build
// uses 0.1's, jaxlib 0.7.2's; a build without isolation the environment's
// jaxlib's, whose handlers a runtime of an older version refuses, as XLA
// does), defined here as XLA defines them.

// XLA_FFI_TypeInfo (FFI API 0.2 on): a registered type's deleter.
struct TypeInfo {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  void (*deleter)(void* object);
};

// XLA_FFI_Metadata of FFI API 0.2 on: 0.1's ends at `traits`.
struct Metadata {
  size_t struct_size;
  XLA_FFI_Api_Version api_version;
  XLA_FFI_Handler_Traits traits;
  XLA_FFI_TypeId state_type_id;
};

// A device: a fake aclrtStream and a host-memory allocator that counts.
class Device {
 public:
  struct MemoryStats {
    int64_t allocations = 0, frees = 0, live = 0, live_bytes = 0, bytes = 0;
    int64_t last_size = 0, last_alignment = 0;
    uintptr_t last_address = 0;
  };

  // The stream handed to handlers: the address of an object of this device
  // (readable memory, as a real aclrtStream; never a host-provider stream).
  void* stream() { return &stream_; }

  XLA_FFI_Error* Allocate(size_t size, size_t alignment, void** data);
  XLA_FFI_Error* Free(void* data, size_t size);
  MemoryStats Stats();
  // Allocations above `bytes` fail as when device memory is exhausted.
  void SetMemoryLimit(std::optional<size_t> bytes);

 private:
  struct FakeStream {
    char tag[32] = "jax_aclnn test aclrtStream";
  } stream_;
  std::mutex mu_;
  std::unordered_map<void*, size_t> live_;  // address -> size
  MemoryStats stats_;
  std::optional<size_t> limit_;
};

// The state of one call site, as XLA's ExecutionState: at most one object of
// a registered type, destroyed with the call site by the type's deleter.
class ExecutionState {
 public:
  ExecutionState() = default;
  ExecutionState(const ExecutionState&) = delete;
  ExecutionState& operator=(const ExecutionState&) = delete;
  ~ExecutionState() { Reset(); }

  // `deleter`: the one FFI API 0.1 passes with the state; null (0.2 on):
  // the registered type's.
  XLA_FFI_Error* Set(XLA_FFI_TypeId type_id, void* state, void (*deleter)(void*));
  XLA_FFI_Error* Get(XLA_FFI_TypeId type_id, void** state) const;
  bool has_state() const { return state_ != nullptr; }
  void Reset();

 private:
  int64_t type_id_ = 0;
  void* state_ = nullptr;
  void (*deleter_)(void*) = nullptr;
};

// The process's XLA FFI API table of FFI API 0.`minor_version` (one per XLA
// instance, as XLA_FFI_GetApi): 1 as jaxlib 0.7, 2 as jaxlib 0.8 and 0.9.0,
// 3 as 0.9.1 on (std::invalid_argument for another). They differ in the
// layout of the XLA_FFI_State_Get/Set arguments and of type registration.
const XLA_FFI_Api* Api(int minor_version);

// Registers a type in the process's type registry, as jaxlib's
// register_custom_type does: `type_id` 0 is assigned a fresh id (or the
// name's). `info` null: by id only, as FFI API 0.1 registers types.
XLA_FFI_Error* RegisterType(std::string_view name, XLA_FFI_TypeId* type_id, const TypeInfo* info);

XLA_FFI_Error* MakeError(XLA_FFI_Error_Code code, std::string message);
// Takes an error returned to the runtime: its code and message; destroys it.
std::pair<XLA_FFI_Error_Code, std::string> TakeError(XLA_FFI_Error* error);
const char* ErrorCodeName(XLA_FFI_Error_Code code);

}  // namespace jax_aclnn::testing

// The opaque C API types, defined by this runtime.
struct XLA_FFI_Error {
  XLA_FFI_Error_Code code;
  std::string message;
};

struct XLA_FFI_ExecutionContext {
  jax_aclnn::testing::Device* device;           // null at instantiation
  jax_aclnn::testing::ExecutionState* state;    // the call site's
};

#endif  // JAX_ACLNN_TESTING_FFI_RUNTIME_H_
