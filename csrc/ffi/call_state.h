// The per-call-site state of the handlers (CallState: a cached repeatable
// executor) and its passage through the FFI API of the runtime that calls
// them: the XLA FFI decoding of ffi::State<CallState> and encoding of the
// instantiate stage's result, and the instantiate handler (call_state.cc).
#ifndef JAX_ACLNN_FFI_CALL_STATE_H_
#define JAX_ACLNN_FFI_CALL_STATE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "aclnn_abi.h"
#include "ffi/descriptors.h"
#include "ffi/provider.h"
#include "ffi/stats.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jax_aclnn {

// A repeatable executor with the descriptors it was built from. Made whole
// by one call and only then handed to its call site; the executor is
// destroyed before its descriptors.
struct CachedExecutor {
  explicit CachedExecutor(const AclnnApi& api) : api(&api), descriptors(api) {}
  ~CachedExecutor() {
    if (executor == nullptr) return;
    api->aclDestroyAclOpExecutor(executor);
    Count(Stats().live_executors, -1);
  }
  const AclnnApi* api;  // provider that made `executor`
  Descriptors descriptors;
  // The descriptors of the input and output tensor parameters, by their
  // index among them (null where absent): what aclSetInput/OutputTensorAddr
  // re-target.
  aclTensor* inputs[kMaxTensors] = {};
  aclTensor* outputs[kMaxTensors] = {};
  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
};

// Per call site: the operator it calls, once looked up for a platform's
// provider, and its cached executor, once one call has made it.
struct CallState {
  static ffi::TypeId id;
  const Provider* platform = nullptr;  // the provider `api` and `phases` were found for
  const AclnnApi* api = nullptr;       // the platform's, or a library's over it
  const OperatorPhases* phases = nullptr;
  std::unique_ptr<CachedExecutor> cached;
  bool refused = false;            // the provider refused repeatability
  std::atomic<bool> busy{false};   // a concurrent call falls back to one-shot
};

// Hands `state` to the call site, which owns it from then on (without state
// calls, or on an error, it is deleted here).
XLA_FFI_Error* SetCallState(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx,
                            std::unique_ptr<CallState> state);

// The call site's state (null without state calls).
XLA_FFI_Error* GetCallState(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx,
                            CallState** state);

// The instantiate stage of every operator's handlers (the HandlerSet's
// `instantiate`): makes the call site's CallState.
XLA_FFI_Error* Instantiate(XLA_FFI_CallFrame* frame);

}  // namespace jax_aclnn

// The bindings' ffi::State<CallState> (execute stage) and the instantiate
// stage's ErrorOr<std::unique_ptr<CallState>> result go through
// GetCallState and SetCallState (call_state.cc), in place of the headers'
// encodings (one layout only). state_type_id() is what the headers of FFI
// API 0.2 on declare in the instantiate stage's metadata (Instantiate,
// call_state.cc, does it with 0.1's).
namespace xla::ffi {

template <>
struct CtxDecoding<State<jax_aclnn::CallState>> {
  using Type = jax_aclnn::CallState*;
  static std::optional<Type> Decode(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx,
                                    DiagnosticEngine& diagnostic) {
    jax_aclnn::CallState* state = nullptr;
    if (XLA_FFI_Error* error = jax_aclnn::GetCallState(api, ctx, &state)) {
      diagnostic.Emit("Failed to get state from execution context: ")
          << internal::GetErrorMessage(api, error);
      internal::DestroyError(api, error);
      return std::nullopt;
    }
    return state;
  }
};

template <>
struct ResultEncoding<ExecutionStage::kInstantiate,
                      ErrorOr<std::unique_ptr<jax_aclnn::CallState>>> {
  static XLA_FFI_TypeId state_type_id() { return jax_aclnn::CallState::id; }
  static XLA_FFI_Error* Encode(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx,
                               ErrorOr<std::unique_ptr<jax_aclnn::CallState>> state) {
    if (state.has_error()) return internal::CreateError(api, state.error());
    return jax_aclnn::SetCallState(api, ctx, std::move(state.value()));
  }
};

}  // namespace xla::ffi

#endif  // JAX_ACLNN_FFI_CALL_STATE_H_
