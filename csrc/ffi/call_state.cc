// The per-call-site state (call_state.h) in the FFI API the runtime speaks,
// and the instantiate stage that makes it.
#include "ffi/call_state.h"

#include <cstddef>
#include <memory>
#include <type_traits>

#include "ffi/handlers.h"
#include "ffi/state_args.h"

namespace jax_aclnn {

ffi::TypeId CallState::id = {};

namespace {

// ----- the call site's state, in the FFI API the runtime speaks -----
//
// The handlers are compiled against one version of the FFI headers (pip's
// isolated build: the floor's, jaxlib 0.7.2: FFI API 0.1; a build without
// isolation, and Bazel's: the installed jaxlib's), whose encoding of state
// lays XLA_FFI_State_Get/Set's arguments out as that version only. XLA runs
// handlers of its own FFI API version or an older one: a build against newer
// headers (0.3's) runs on jaxlib releases of that version on only, and
// `import jax_aclnn` refuses an older jaxlib (jax_aclnn/_compat.py) before
// any handler is registered. The versions differ:
// - FFI API 0.1 (jaxlib 0.7): XLA_FFI_State_Set takes the state's deleter
//   after the state; the type is registered by id only.
// - FFI API 0.2 (jaxlib 0.8, 0.9.0): no deleter there; the type's
//   registration carries it (XLA_FFI_TypeInfo, CallStateTypeInfo()), and the
//   instantiate handler's metadata declares the state's type id.
// - FFI API 0.3 (jaxlib 0.9.1 on): a `stage` in front of `type_id`. jaxlib's
//   XLA still takes a 0.2-sized struct as the instantiation stage's state,
//   but that is a courtesy of one XLA build, not the API: a 0.3 runtime
//   without it (another XLA, a device plugin's) refuses the smaller struct,
//   and the instantiate stage fails.
// So the arguments are laid out for the API version of the runtime that
// calls the handler (XLA_FFI_Api::api_version of the call frame; the three
// layouts: ffi/state_args.h). A runtime of another major version gets no
// state calls: its call sites run one-shot.

enum class StateLayout { kNone, kV01, kV02, kV03 };

StateLayout StateLayoutOf(const XLA_FFI_Api* api) {
  const XLA_FFI_Api_Version& v = api->api_version;
  if (v.major_version != 0 || v.minor_version < 1) return StateLayout::kNone;
  if (v.minor_version == 1) return StateLayout::kV01;
  return v.minor_version == 2 ? StateLayout::kV02 : StateLayout::kV03;
}

void DeleteCallState(void* state) { delete static_cast<CallState*>(state); }

// Calls `function` (the runtime's XLA_FFI_State_Get or _Set) for the
// instantiation stage's CallState: `*state` in and out.
template <typename Args>
XLA_FFI_Error* CallStateFunction(XLA_FFI_Error* (*function)(Args*), const XLA_FFI_Api* api,
                                 XLA_FFI_ExecutionContext* ctx, void** state) {
  constexpr bool kSet = std::is_same_v<Args, XLA_FFI_State_Set_Args>;
  auto call = [&](auto args) {
    XLA_FFI_Error* error = function(reinterpret_cast<Args*>(&args));
    *state = args.state;
    return error;
  };
  switch (StateLayoutOf(api)) {
    case StateLayout::kNone: return nullptr;
    case StateLayout::kV01:
      if constexpr (kSet)
        return call(StateSetArgsV01{sizeof(StateSetArgsV01), nullptr, ctx, &CallState::id,
                                    *state, &DeleteCallState});
      [[fallthrough]];  // State_Get's arguments are 0.2's
    case StateLayout::kV02:
      return call(StateArgsV02{sizeof(StateArgsV02), nullptr, ctx, &CallState::id, *state});
    case StateLayout::kV03:
      return call(StateArgsV03{sizeof(StateArgsV03), nullptr, ctx,
                               XLA_FFI_ExecutionStage_INSTANTIATE, &CallState::id, *state});
  }
  return nullptr;
}

}  // namespace

XLA_FFI_Error* SetCallState(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx,
                            std::unique_ptr<CallState> state) {
  if (StateLayoutOf(api) == StateLayout::kNone) return nullptr;
  void* given = state.get();
  XLA_FFI_Error* error = CallStateFunction(api->XLA_FFI_State_Set, api, ctx, &given);
  if (error == nullptr) state.release();
  return error;
}

XLA_FFI_Error* GetCallState(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx,
                            CallState** state) {
  void* got = nullptr;
  XLA_FFI_Error* error = CallStateFunction(api->XLA_FFI_State_Get, api, ctx, &got);
  *state = error == nullptr ? static_cast<CallState*>(got) : nullptr;
  return error;
}

namespace {

// The attributes are the operator's; jaxlib 0.8.1 passes them to this stage
// too (later releases pass none), so they are taken as a dictionary, unused.
ffi::ErrorOr<std::unique_ptr<CallState>> InstantiateCallState(ffi::Dictionary) {
  return std::make_unique<CallState>();
}

XLA_FFI_DEFINE_HANDLER(kInstantiateCallState, InstantiateCallState,
                       ffi::Ffi::BindInstantiate().Attrs<ffi::Dictionary>());

// XLA_FFI_Metadata of FFI API 0.2 on, whose `state_type_id` a stateful
// handler's instantiate stage fills in (FFI API 0.1's has no such field).
struct MetadataV02 {
  size_t struct_size;
  XLA_FFI_Api_Version api_version;
  XLA_FFI_Handler_Traits traits;
  XLA_FFI_TypeId state_type_id;
};

}  // namespace

// The instantiate stage. Asked for its metadata (at registration), it also
// declares the state's type id when the runtime's metadata has the field
// (FFI API 0.2 on), as the headers of 0.2 on do and 0.1's (the build's)
// cannot; a 0.1 runtime's smaller struct is left as the headers fill it.
XLA_FFI_Error* Instantiate(XLA_FFI_CallFrame* frame) {
  XLA_FFI_Error* error = kInstantiateCallState(frame);
  const XLA_FFI_Extension_Base* extension = frame->extension_start;
  if (error != nullptr || extension == nullptr || extension->type != XLA_FFI_Extension_Metadata)
    return error;
  auto* metadata = reinterpret_cast<MetadataV02*>(
      reinterpret_cast<const XLA_FFI_Metadata_Extension*>(extension)->metadata);
  if (metadata->struct_size < XLA_FFI_STRUCT_SIZE(MetadataV02, state_type_id)) return nullptr;
  if (CallState::id.type_id == XLA_FFI_UNKNOWN_TYPE_ID.type_id)
    return ffi::internal::CreateError(
        frame->api, ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                               "jax_aclnn: the state type must be registered before the handlers"));
  metadata->state_type_id = CallState::id;
  return nullptr;
}

XLA_FFI_TypeId* CallStateTypeId() { return &CallState::id; }

const TypeInfo* CallStateTypeInfo() {
  static const TypeInfo info{sizeof(TypeInfo), nullptr, &DeleteCallState};
  return &info;
}

}  // namespace jax_aclnn
