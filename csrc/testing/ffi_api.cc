// The XLA_FFI_Api functions of the test runtime, after XLA's own
// implementation (xla/ffi/ffi_api.cc): the same argument checks, the same
// device-platform rules (stream and device memory only while executing on a
// device, alignments up to 16), the same type-registry and state semantics.
// Functions a device-platform handler of jax_aclnn has no use for (thread
// pool, futures, user data, run id) answer UNIMPLEMENTED.
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "ffi/state_args.h"
#include "testing/ffi_runtime.h"

namespace jax_aclnn::testing {
namespace {

XLA_FFI_Error* CheckStructSize(const char* name, size_t expected, size_t actual) {
  if (actual >= expected) return nullptr;
  return MakeError(XLA_FFI_Error_Code_INVALID_ARGUMENT,
                   std::string("Unexpected ") + name + " size: expected " +
                       std::to_string(expected) + ", got " + std::to_string(actual));
}

#define CHECK_ARGS(Type)                                                                \
  if (XLA_FFI_Error* e = CheckStructSize(#Type, Type##_STRUCT_SIZE, args->struct_size)) \
  return e

XLA_FFI_Error* Unimplemented(const char* what) {
  return MakeError(XLA_FFI_Error_Code_UNIMPLEMENTED,
                   std::string(what) + " is not implemented by the jax_aclnn test runtime");
}

// ----- type registry (process-wide, as XLA's TypeRegistry) -----

struct TypeRegistry {
  std::mutex mu;
  std::unordered_map<std::string, int64_t> ids;
  std::unordered_map<int64_t, TypeInfo> infos;  // deleter null: registered by id only
  int64_t next_id = 1;
};

TypeRegistry& Types() {
  static TypeRegistry* registry = new TypeRegistry;
  return *registry;
}

// ----- the API functions -----

XLA_FFI_Error* ErrorCreate(XLA_FFI_Error_Create_Args* args) {
  CHECK_ARGS(XLA_FFI_Error_Create_Args);
  return MakeError(args->errc, args->message ? args->message : "");
}

void ErrorGetMessage(XLA_FFI_Error_GetMessage_Args* args) {
  args->message = args->error->message.c_str();
}

void ErrorDestroy(XLA_FFI_Error_Destroy_Args* args) { delete args->error; }

XLA_FFI_Error* HandlerRegister(XLA_FFI_Handler_Register_Args*) {
  return Unimplemented("XLA_FFI_Handler_Register (handlers are given to Handler())");
}

XLA_FFI_Error* StreamGet(XLA_FFI_Stream_Get_Args* args) {
  CHECK_ARGS(XLA_FFI_Stream_Get_Args);
  if (args->ctx == nullptr || args->ctx->device == nullptr)
    return MakeError(XLA_FFI_Error_Code_UNIMPLEMENTED, "XLA FFI GPU context is not available");
  args->stream = args->ctx->device->stream();
  return nullptr;
}

// XLA_FFI_Type_Register_Args of FFI API 0.2 on; 0.1's
// XLA_FFI_TypeId_Register_Args ends at `type_id` (no type info).
struct TypeRegisterArgs {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_ByteSpan name;
  XLA_FFI_TypeId* type_id;
  const TypeInfo* type_info;
};

// The API table's type registration: XLA_FFI_TypeId_Register of FFI API 0.1
// (by id: the deleter comes with each XLA_FFI_State_Set), XLA_FFI_Type_Register
// of 0.2 on (with the type's info). `HeaderArgs` is the headers' argument type
// of that table entry, deduced where the table is made.
template <int kMinor, typename HeaderArgs>
XLA_FFI_Error* TypeRegister(HeaderArgs* c_args) {
  auto* args = reinterpret_cast<TypeRegisterArgs*>(c_args);
  // The size XLA checks, also in 0.2 (its struct traits end at `type_id`).
  const size_t expected = XLA_FFI_STRUCT_SIZE(TypeRegisterArgs, type_id);
  if (XLA_FFI_Error* e = CheckStructSize("XLA_FFI_Type_Register_Args", expected, args->struct_size))
    return e;
  if (kMinor >= 2 && args->type_info == nullptr)
    return MakeError(XLA_FFI_Error_Code_INVALID_ARGUMENT, "type info is null");
  return RegisterType(std::string_view(args->name.ptr, args->name.len), args->type_id,
                      kMinor >= 2 ? args->type_info : nullptr);
}

XLA_FFI_Error* ExecutionContextGet(XLA_FFI_ExecutionContext_Get_Args*) {
  return Unimplemented("XLA_FFI_ExecutionContext_Get (user data)");
}

// The state functions, in the argument layout of FFI API 0.`kMinor`
// (ffi/state_args.h, shared with the handlers). 0.1 (jaxlib 0.7) passes the
// state's deleter to XLA_FFI_State_Set; 0.2 takes it from the type's
// registration; 0.3 (jaxlib 0.9.1 on) puts a `stage` in front of `type_id`.
// jaxlib's XLA also takes a 0.2-sized struct as the instantiation stage's in
// 0.3; this runtime refuses it, as the API allows, so that the tests see
// which layout a handler uses.

template <int kMinor, bool kSet>
using StateArgs =
    std::conditional_t<kMinor >= 3, StateArgsV03,
                       std::conditional_t<kMinor == 1 && kSet, StateSetArgsV01, StateArgsV02>>;

template <int kMinor, typename Args>
XLA_FFI_Error* CheckStateArgs(const char* name, const Args* args) {
  if (XLA_FFI_Error* e = CheckStructSize(name, sizeof(*args), args->struct_size)) return e;
  if constexpr (kMinor >= 3) {
    if (args->stage != XLA_FFI_ExecutionStage_INSTANTIATE)
      return Unimplemented("state of the prepare and initialize stages");
  }
  return nullptr;
}

template <int kMinor>
XLA_FFI_Error* StateSet(XLA_FFI_State_Set_Args* c_args) {
  auto* args = reinterpret_cast<StateArgs<kMinor, /*kSet=*/true>*>(c_args);
  if (XLA_FFI_Error* e = CheckStateArgs<kMinor>("XLA_FFI_State_Set_Args", args)) return e;
  void (*deleter)(void*) = nullptr;  // 0.2 on: the registered type's
  if constexpr (kMinor == 1) deleter = args->deleter;
  return args->ctx->state->Set(*args->type_id, args->state, deleter);
}

template <int kMinor>
XLA_FFI_Error* StateGet(XLA_FFI_State_Get_Args* c_args) {
  auto* args = reinterpret_cast<StateArgs<kMinor, /*kSet=*/false>*>(c_args);
  if (XLA_FFI_Error* e = CheckStateArgs<kMinor>("XLA_FFI_State_Get_Args", args)) return e;
  return args->ctx->state->Get(*args->type_id, &args->state);
}

XLA_FFI_Error* DeviceMemoryAllocate(XLA_FFI_DeviceMemory_Allocate_Args* args) {
  CHECK_ARGS(XLA_FFI_DeviceMemory_Allocate_Args);
  if (args->ctx == nullptr || args->ctx->device == nullptr)
    return MakeError(XLA_FFI_Error_Code_INVALID_ARGUMENT, "XLA FFI GPU context is not available");
  // XLA's rule (kMaxAlignment in xla/ffi/ffi_api.cc).
  constexpr size_t kMaxAlignment = 16;
  const size_t a = args->alignment;
  if (a == 0 || (a & (a - 1)) != 0 || a > kMaxAlignment)
    return MakeError(XLA_FFI_Error_Code_INVALID_ARGUMENT,
                     "Unsupported alignment: " + std::to_string(a));
  return args->ctx->device->Allocate(args->size, a, &args->data);
}

XLA_FFI_Error* DeviceMemoryFree(XLA_FFI_DeviceMemory_Free_Args* args) {
  CHECK_ARGS(XLA_FFI_DeviceMemory_Free_Args);
  if (args->ctx == nullptr || args->ctx->device == nullptr)
    return MakeError(XLA_FFI_Error_Code_UNIMPLEMENTED, "XLA FFI GPU context is not available");
  return args->ctx->device->Free(args->data, args->size);
}

XLA_FFI_Error* ThreadPoolSchedule(XLA_FFI_ThreadPool_Schedule_Args*) {
  return MakeError(XLA_FFI_Error_Code_UNIMPLEMENTED, "XLA FFI CPU context is not available");
}

XLA_FFI_Error* ThreadPoolNumThreads(XLA_FFI_ThreadPool_NumThreads_Args*) {
  return MakeError(XLA_FFI_Error_Code_UNIMPLEMENTED, "XLA FFI CPU context is not available");
}

XLA_FFI_Error* FutureCreate(XLA_FFI_Future_Create_Args*) {
  return Unimplemented("XLA_FFI_Future_Create");
}
XLA_FFI_Error* FutureSetAvailable(XLA_FFI_Future_SetAvailable_Args*) {
  return Unimplemented("XLA_FFI_Future_SetAvailable");
}
XLA_FFI_Error* FutureSetError(XLA_FFI_Future_SetError_Args*) {
  return Unimplemented("XLA_FFI_Future_SetError");
}
XLA_FFI_Error* RunIdGet(XLA_FFI_RunId_Get_Args*) { return Unimplemented("XLA_FFI_RunId_Get"); }

XLA_FFI_Error* DeviceOrdinalGet(XLA_FFI_DeviceOrdinal_Get_Args* args) {
  CHECK_ARGS(XLA_FFI_DeviceOrdinal_Get_Args);
  args->device_ordinal = 0;
  return nullptr;
}

#undef CHECK_ARGS

}  // namespace

XLA_FFI_Error* MakeError(XLA_FFI_Error_Code code, std::string message) {
  return new XLA_FFI_Error{code, std::move(message)};
}

std::pair<XLA_FFI_Error_Code, std::string> TakeError(XLA_FFI_Error* error) {
  std::pair<XLA_FFI_Error_Code, std::string> taken{error->code, std::move(error->message)};
  delete error;
  return taken;
}

const char* ErrorCodeName(XLA_FFI_Error_Code code) {
  static const char* const names[] = {
      "OK",        "CANCELLED",          "UNKNOWN",         "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED", "NOT_FOUND",  "ALREADY_EXISTS",  "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",       "UNAVAILABLE",     "DATA_LOSS",
      "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? names[i] : "UNKNOWN_CODE";
}

XLA_FFI_Error* RegisterType(std::string_view name_view, XLA_FFI_TypeId* type_id,
                            const TypeInfo* info) {
  const std::string name(name_view);
  const TypeInfo registered = info ? *info : TypeInfo{sizeof(TypeInfo), nullptr, nullptr};
  TypeRegistry& r = Types();
  std::lock_guard<std::mutex> lock(r.mu);
  auto known = r.ids.find(name);
  const int64_t wanted = type_id->type_id;
  if (wanted == 0) {  // XLA assigns a fresh id, or the name's existing one
    if (known == r.ids.end()) {
      while (r.infos.count(r.next_id)) ++r.next_id;
      known = r.ids.emplace(name, r.next_id++).first;
      r.infos[known->second] = registered;
    }
    type_id->type_id = known->second;
    return nullptr;
  }
  if (known != r.ids.end()) {
    if (known->second == wanted) return nullptr;
    return MakeError(XLA_FFI_Error_Code_INVALID_ARGUMENT,
                     "type " + name + " is registered with id " + std::to_string(known->second) +
                         ", not " + std::to_string(wanted));
  }
  if (r.infos.count(wanted))
    return MakeError(XLA_FFI_Error_Code_INVALID_ARGUMENT,
                     "type id " + std::to_string(wanted) + " is taken by another type");
  r.ids.emplace(name, wanted);
  r.infos[wanted] = registered;
  return nullptr;
}

// ----- Device -----

XLA_FFI_Error* Device::Allocate(size_t size, size_t alignment, void** data) {
  std::lock_guard<std::mutex> lock(mu_);
  if (limit_ && size > *limit_)
    return MakeError(XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                     "out of device memory allocating " + std::to_string(size) + " bytes");
  // At least 64-byte aligned, as XLA's device allocators.
  void* p = nullptr;
  if (posix_memalign(&p, std::max<size_t>(alignment, 64), std::max<size_t>(size, 1)) != 0)
    return MakeError(XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "host allocation failed");
  live_[p] = size;
  ++stats_.allocations;
  ++stats_.live;
  stats_.live_bytes += static_cast<int64_t>(size);
  stats_.bytes += static_cast<int64_t>(size);
  stats_.last_size = static_cast<int64_t>(size);
  stats_.last_alignment = static_cast<int64_t>(alignment);
  stats_.last_address = reinterpret_cast<uintptr_t>(p);
  *data = p;
  return nullptr;
}

XLA_FFI_Error* Device::Free(void* data, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(data);
  if (it == live_.end() || it->second != size)
    return MakeError(XLA_FFI_Error_Code_INVALID_ARGUMENT,
                     "freeing device memory that was not allocated with this size");
  std::free(data);
  live_.erase(it);
  ++stats_.frees;
  --stats_.live;
  stats_.live_bytes -= static_cast<int64_t>(size);
  return nullptr;
}

Device::MemoryStats Device::Stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Device::SetMemoryLimit(std::optional<size_t> bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  limit_ = bytes;
}

// ----- ExecutionState -----

XLA_FFI_Error* ExecutionState::Set(XLA_FFI_TypeId type_id, void* state,
                                   void (*deleter)(void*)) {
  if (state_ != nullptr)
    return MakeError(XLA_FFI_Error_Code_FAILED_PRECONDITION, "State is already set");
  TypeRegistry& r = Types();
  std::lock_guard<std::mutex> lock(r.mu);
  auto info = r.infos.find(type_id.type_id);
  if (info == r.infos.end())
    return MakeError(XLA_FFI_Error_Code_NOT_FOUND,
                     "type id " + std::to_string(type_id.type_id) + " is not registered");
  type_id_ = type_id.type_id;
  state_ = state;
  deleter_ = deleter != nullptr ? deleter : info->second.deleter;
  return nullptr;
}

XLA_FFI_Error* ExecutionState::Get(XLA_FFI_TypeId type_id, void** state) const {
  if (state_ == nullptr)
    return MakeError(XLA_FFI_Error_Code_FAILED_PRECONDITION, "State is not set");
  if (type_id.type_id != type_id_)
    return MakeError(XLA_FFI_Error_Code_INVALID_ARGUMENT,
                     "Set state type id " + std::to_string(type_id_) +
                         " does not match the requested one " + std::to_string(type_id.type_id));
  *state = state_;
  return nullptr;
}

void ExecutionState::Reset() {
  if (state_ != nullptr && deleter_ != nullptr) deleter_(state_);
  state_ = nullptr;
  deleter_ = nullptr;
  type_id_ = 0;
}

template <int kMinor>
const XLA_FFI_Api* ApiOf() {
  static const XLA_FFI_Api api = {
      XLA_FFI_Api_STRUCT_SIZE,
      /*extension_start=*/nullptr,
      XLA_FFI_Api_Version{XLA_FFI_Api_Version_STRUCT_SIZE, nullptr, 0, kMinor},
      /*internal_api=*/nullptr,
      ErrorCreate,
      ErrorGetMessage,
      ErrorDestroy,
      HandlerRegister,
      StreamGet,
      TypeRegister<kMinor>,
      ExecutionContextGet,
      StateSet<kMinor>,
      StateGet<kMinor>,
      DeviceMemoryAllocate,
      DeviceMemoryFree,
      ThreadPoolSchedule,
      ThreadPoolNumThreads,
      FutureCreate,
      FutureSetAvailable,
      FutureSetError,
      RunIdGet,
      DeviceOrdinalGet,
  };
  return &api;
}

const XLA_FFI_Api* Api(int minor_version) {
  switch (minor_version) {
    case 1: return ApiOf<1>();
    case 2: return ApiOf<2>();
    case 3: return ApiOf<3>();
    default:
      throw std::invalid_argument("the test runtime speaks FFI API 0.1, 0.2 and 0.3, not 0." +
                                  std::to_string(minor_version));
  }
}

}  // namespace jax_aclnn::testing
