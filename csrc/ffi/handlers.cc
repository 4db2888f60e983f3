// XLA FFI handlers: one code path from an XLA buffer to an aclnn call.
//
// Every call: describe each buffer as an aclTensor (attributes as aclScalar
// where the ABI wants one), aclnnXxxGetWorkspaceSize, a workspace (XLA's
// scratch allocator on the NPU, a reused per-thread buffer on the CPU),
// aclnnXxx on the platform's stream, destroy the descriptors. A call site
// (FFI state made at instantiation) keeps a repeatable executor instead when
// the provider supports it, re-targeted at each step's buffers, so
// steady-state steps run the execute phase only.
#include "ffi/handlers.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "aclnn_abi.h"
#include "attributes.h"
#include "ffi/provider.h"
#include "ffi/state_args.h"
#include "ffi/stats.h"
#include "host_stream.h"
#include "xla/ffi/api/ffi.h"

// The attribute structs' decoding, from each operator's one declaration.
#define JAX_ACLNN_STRUCT_MEMBER(type, name) , ::xla::ffi::StructMember<type>(#name)
#define JAX_ACLNN_REGISTER_ATTRIBUTES(...) XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(__VA_ARGS__);
#define JAX_ACLNN_ATTRIBUTE_DECODING(Name, name)                    \
  JAX_ACLNN_REGISTER_ATTRIBUTES(::jax_aclnn::ops::Name::Attributes \
                                JAX_ACLNN_ATTRIBUTES_##Name(JAX_ACLNN_STRUCT_MEMBER))
JAX_ACLNN_OPERATORS(JAX_ACLNN_ATTRIBUTE_DECODING)
#undef JAX_ACLNN_ATTRIBUTE_DECODING
#undef JAX_ACLNN_REGISTER_ATTRIBUTES
#undef JAX_ACLNN_STRUCT_MEMBER

namespace ffi = xla::ffi;

namespace jax_aclnn {

RuntimeStats& Stats() {
  static RuntimeStats stats;
  return stats;
}

namespace {

std::atomic<bool> executor_reuse{true};

// The single dtype dispatch: FFI element type -> aclDataType.
ffi::ErrorOr<aclDataType> ToAclDataType(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return ACL_FLOAT;
    case ffi::DataType::F16: return ACL_FLOAT16;
    case ffi::DataType::BF16: return ACL_BF16;
    default:
      return ffi::Unexpected(ffi::Error::InvalidArgument(
          "jax_aclnn: unsupported element type " + std::to_string(static_cast<int>(t)) +
          "; supported are float32, float16 and bfloat16"));
  }
}

const char* StatusName(aclnnStatus status) {
  switch (status) {
    case ACLNN_SUCCESS: return "ACLNN_SUCCESS";
    case ACLNN_ERR_PARAM_NULLPTR: return "ACLNN_ERR_PARAM_NULLPTR";
    case ACLNN_ERR_PARAM_INVALID: return "ACLNN_ERR_PARAM_INVALID";
    case ACLNN_ERR_RUNTIME_ERROR: return "ACLNN_ERR_RUNTIME_ERROR";
    case ACLNN_ERR_INNER: return "ACLNN_ERR_INNER";
    case ACLNN_ERR_INNER_NULLPTR: return "ACLNN_ERR_INNER_NULLPTR";
    default: return "unknown aclnnStatus";
  }
}

// A non-zero aclnnStatus as an ffi::Error naming the call, the status and
// the provider's last-error message: INVALID_ARGUMENT for parameter errors
// (161001, 161002), INTERNAL for runtime and inner errors.
ffi::Error StatusError(const AclnnApi& api, const std::string& call, aclnnStatus status) {
  const char* msg = api.aclGetRecentErrMsg ? api.aclGetRecentErrMsg() : nullptr;
  const bool parameter_error =
      status == ACLNN_ERR_PARAM_NULLPTR || status == ACLNN_ERR_PARAM_INVALID;
  return ffi::Error(parameter_error ? ffi::ErrorCode::kInvalidArgument : ffi::ErrorCode::kInternal,
                    call + " failed: aclnnStatus " + std::to_string(status) + " (" +
                        StatusName(status) + "): " + (msg && *msg ? msg : "no message"));
}

constexpr int kMaxInputs = 5, kMaxOutputs = 4;

// aclTensor / aclScalar descriptors of one call, destroyed together. The
// capacity covers every operator's buffers and attributes; running past it
// is an error, never a write out of bounds.
class Descriptors {
 public:
  explicit Descriptors(const AclnnApi& api) : api_(&api) {}
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    for (int i = 0; i < num_tensors_; ++i) api_->aclDestroyTensor(tensors_[i]);
    for (int i = 0; i < num_scalars_; ++i) api_->aclDestroyScalar(scalars_[i]);
    Count(Stats().live_tensors, -(num_tensors_ + num_scalars_));
  }

  // A contiguous ND descriptor of `buffer` (null buffer: null descriptor).
  ffi::ErrorOr<aclTensor*> Tensor(const ffi::AnyBuffer* buffer) {
    if (buffer == nullptr) return static_cast<aclTensor*>(nullptr);
    if (num_tensors_ == static_cast<int>(tensors_.size())) return ffi::Unexpected(Full("tensor"));
    ffi::ErrorOr<aclDataType> dtype = ToAclDataType(buffer->element_type());
    if (dtype.has_error()) return ffi::Unexpected(dtype.error());
    auto dims = buffer->dimensions();
    std::array<int64_t, 8> strides{};
    if (dims.size() > strides.size())
      return ffi::Unexpected(ffi::Error::InvalidArgument("jax_aclnn: rank above 8"));
    int64_t stride = 1;
    for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
      strides[d] = stride;
      stride *= dims[d];
    }
    aclTensor* t = api_->aclCreateTensor(dims.begin(), dims.size(), *dtype, strides.data(), 0,
                                         ACL_FORMAT_ND, dims.begin(), dims.size(),
                                         buffer->untyped_data());
    if (t == nullptr)
      return ffi::Unexpected(StatusError(*api_, "aclCreateTensor", ACLNN_ERR_INNER_NULLPTR));
    tensors_[num_tensors_++] = t;
    Count(Stats().live_tensors);
    return t;
  }

  // An attribute as an aclScalar. Called by an operator's first phase,
  // which can only answer with an aclnnStatus: the error is also kept for
  // failure().
  ffi::ErrorOr<aclScalar*> Scalar(float value) {
    if (num_scalars_ == static_cast<int>(scalars_.size())) {
      failure_ = Full("scalar");
      return ffi::Unexpected(*failure_);
    }
    aclScalar* s = api_->aclCreateScalar(&value, ACL_FLOAT);
    if (s == nullptr) {
      failure_ = StatusError(*api_, "aclCreateScalar", ACLNN_ERR_INNER_NULLPTR);
      return ffi::Unexpected(*failure_);
    }
    scalars_[num_scalars_++] = s;
    Count(Stats().live_tensors);
    return s;
  }

  const std::optional<ffi::Error>& failure() const { return failure_; }

 private:
  static ffi::Error Full(const char* what) {
    return ffi::Error::Internal(std::string("jax_aclnn: more ") + what +
                                " descriptors than one call has");
  }

  const AclnnApi* api_;
  std::array<aclTensor*, kMaxInputs + kMaxOutputs> tensors_{};
  std::array<aclScalar*, 2> scalars_{};
  int num_tensors_ = 0, num_scalars_ = 0;
  std::optional<ffi::Error> failure_;
};

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
  aclTensor* inputs[kMaxInputs] = {};
  aclTensor* outputs[kMaxOutputs] = {};
  uint64_t workspace_size = 0;
  aclOpExecutor* executor = nullptr;
};

// Per call site: its cached executor, once one call has made it.
struct CallState {
  static ffi::TypeId id;
  std::unique_ptr<CachedExecutor> cached;
  bool refused = false;            // the provider refused repeatability
  std::atomic<bool> busy{false};   // a concurrent call falls back to one-shot
};
ffi::TypeId CallState::id = {};

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

// Hands `state` to the call site, which owns it from then on (without state
// calls, or on an error, it is deleted here).
XLA_FFI_Error* SetCallState(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx,
                            std::unique_ptr<CallState> state) {
  if (StateLayoutOf(api) == StateLayout::kNone) return nullptr;
  void* given = state.get();
  XLA_FFI_Error* error = CallStateFunction(api->XLA_FFI_State_Set, api, ctx, &given);
  if (error == nullptr) state.release();
  return error;
}

// The call site's state (null without state calls).
XLA_FFI_Error* GetCallState(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx,
                            CallState** state) {
  void* got = nullptr;
  XLA_FFI_Error* error = CallStateFunction(api->XLA_FFI_State_Get, api, ctx, &got);
  *state = error == nullptr ? static_cast<CallState*>(got) : nullptr;
  return error;
}

}  // namespace
}  // namespace jax_aclnn

// The bindings' ffi::State<CallState> (execute stage) and the instantiate
// stage's ErrorOr<std::unique_ptr<CallState>> result go through the
// functions above, in place of the headers' encodings (one layout only).
// state_type_id() is what the headers of FFI API 0.2 on declare in the
// instantiate stage's metadata (Instantiate, below, does it with 0.1's).
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

namespace jax_aclnn {
namespace {

// The buffers of one call, in the aclnn signature's order; null = absent.
template <int kIn, int kOut>
struct Buffers {
  std::array<const ffi::AnyBuffer*, kIn> in;
  std::array<ffi::AnyBuffer*, kOut> out;
};

// Descriptors for all buffers, then the first phase.
template <typename Op>
ffi::Error GetWorkspaceSize(const Op& op, const AclnnApi& api, Descriptors& d,
                            const Buffers<Op::kNumInputs, Op::kNumOutputs>& b,
                            aclTensor** in, aclTensor** out, uint64_t* workspace_size,
                            aclOpExecutor** executor) {
  for (int i = 0; i < Op::kNumInputs; ++i) {
    auto t = d.Tensor(b.in[i]);
    if (t.has_error()) return t.error();
    in[i] = *t;
  }
  for (int i = 0; i < Op::kNumOutputs; ++i) {
    auto t = d.Tensor(b.out[i]);
    if (t.has_error()) return t.error();
    out[i] = *t;
  }
  Count(Stats().calls[Op::kId].get_workspace_size);
  aclnnStatus st = op.GetWorkspaceSize(api, d, in, out, workspace_size, executor);
  if (d.failure()) return *d.failure();
  if (st != ACLNN_SUCCESS)
    return StatusError(api, std::string(kAclnnOpNames[Op::kId]) + "GetWorkspaceSize", st);
  Count(Stats().live_executors);
  return ffi::Error::Success();
}

// Workspace sources. On the NPU: XLA's scratch allocator (device memory
// owned by the framework for the duration of the call). XLA's CPU runtime
// has no scratch allocator, so on the CPU: a per-thread buffer that grows
// to the largest workspace seen up to kRetainedWorkspace bytes and is
// reused, with no allocation per call; a larger workspace is the call's own
// and freed when it returns, so a thread never keeps more than that.
struct ScratchWorkspace {
  // XLA's device-memory allocation refuses alignments above 16
  // (kMaxAlignment in xla/ffi/ffi_api.cc); device allocations are aligned
  // more coarsely anyway.
  static constexpr size_t kAlignment = 16;
  ffi::ScratchAllocator& scratch;
  void* operator()(uint64_t size) const {
    std::optional<void*> ws = scratch.Allocate(size, kAlignment);
    return ws.value_or(nullptr);
  }
};

constexpr uint64_t kRetainedWorkspace = uint64_t{16} << 20;

struct HostWorkspace {
  mutable std::unique_ptr<std::byte[]> own;  // a workspace above kRetainedWorkspace
  void* operator()(uint64_t size) const {
    if (size > kRetainedWorkspace) {
      own.reset(new (std::nothrow) std::byte[size]);
      return own.get();
    }
    thread_local std::unique_ptr<std::byte[]> buffer;
    thread_local uint64_t capacity = 0;
    if (size > capacity) {
      buffer.reset(new (std::nothrow) std::byte[size]);
      capacity = buffer ? size : 0;
    }
    return buffer.get();
  }
};

// The second phase; a one-shot executor is consumed by it.
template <typename Op, typename Workspace>
ffi::Error Execute(const AclnnApi& api, aclOpExecutor* executor, uint64_t workspace_size,
                   bool consumed, aclrtStream stream, const Workspace& allocate) {
  void* workspace = nullptr;
  if (workspace_size > 0) {
    workspace = allocate(workspace_size);
    if (workspace == nullptr) {
      if (consumed && api.supports_executor_reuse) {  // release the unexecuted executor
        api.aclSetAclOpExecutorRepeatable(executor);
        api.aclDestroyAclOpExecutor(executor);
        Count(Stats().live_executors, -1);
      }
      return ffi::Error(ffi::ErrorCode::kResourceExhausted,
                        std::string(kAclnnOpNames[Op::kId]) + ": cannot allocate a workspace of " +
                            std::to_string(workspace_size) + " bytes");
    }
  }
  Count(Stats().calls[Op::kId].execute);
  aclnnStatus st = (api.*Op::kExecute)(workspace, workspace_size, executor, stream);
  if (consumed) Count(Stats().live_executors, -1);
  if (st != ACLNN_SUCCESS) return StatusError(api, kAclnnOpNames[Op::kId], st);
  return ffi::Error::Success();
}

template <typename Op, typename Workspace>
ffi::Error RunOneShot(const Op& op, const AclnnApi& api, aclrtStream stream,
                      const Workspace& workspace,
                      const Buffers<Op::kNumInputs, Op::kNumOutputs>& b) {
  Descriptors d(api);
  aclTensor* in[kMaxInputs];
  aclTensor* out[kMaxOutputs];
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  if (ffi::Error e = GetWorkspaceSize(op, api, d, b, in, out, &ws, &ex); e.failure()) return e;
  return Execute<Op>(api, ex, ws, /*consumed=*/true, stream, workspace);
}

// Uses (or first creates) the call site's repeatable executor. A failed
// first call leaves the call site as it was: nothing is kept.
template <typename Op, typename Workspace>
ffi::Error RunCached(const Op& op, const AclnnApi& api, aclrtStream stream,
                     const Workspace& workspace, CallState& s,
                     const Buffers<Op::kNumInputs, Op::kNumOutputs>& b) {
  if (s.cached == nullptr) {
    auto c = std::make_unique<CachedExecutor>(api);
    aclOpExecutor* ex = nullptr;
    if (ffi::Error e = GetWorkspaceSize(op, api, c->descriptors, b, c->inputs, c->outputs,
                                        &c->workspace_size, &ex);
        e.failure())
      return e;
    if (api.aclSetAclOpExecutorRepeatable(ex) != ACLNN_SUCCESS) {
      s.refused = true;
      return Execute<Op>(api, ex, c->workspace_size, /*consumed=*/true, stream, workspace);
    }
    c->executor = ex;
    s.cached = std::move(c);
  } else {
    CachedExecutor& c = *s.cached;
    for (int i = 0; i < Op::kNumInputs; ++i) {
      if (b.in[i] == nullptr || b.in[i]->element_count() == 0) continue;  // nothing to read
      void* addr = const_cast<void*>(b.in[i]->untyped_data());
      if (aclnnStatus st = api.aclSetInputTensorAddr(c.executor, i, c.inputs[i], addr))
        return StatusError(api, "aclSetInputTensorAddr", st);
    }
    for (int i = 0; i < Op::kNumOutputs; ++i) {
      if (b.out[i] == nullptr || b.out[i]->element_count() == 0) continue;
      if (aclnnStatus st =
              api.aclSetOutputTensorAddr(c.executor, i, c.outputs[i], b.out[i]->untyped_data()))
        return StatusError(api, "aclSetOutputTensorAddr", st);
    }
  }
  return Execute<Op>(api, s.cached->executor, s.cached->workspace_size, /*consumed=*/false,
                     stream, workspace);
}

template <typename Op, typename Workspace>
ffi::Error Run(const Op& op, const AclnnApi& api, aclrtStream stream,
               const Workspace& workspace, CallState* state,
               const Buffers<Op::kNumInputs, Op::kNumOutputs>& b) {
  if (state == nullptr || !api.supports_executor_reuse ||
      !executor_reuse.load(std::memory_order_relaxed) ||
      state->busy.exchange(true, std::memory_order_acquire))
    return RunOneShot(op, api, stream, workspace, b);
  const bool reusable =
      !state->refused && (state->cached == nullptr || state->cached->api == &api);
  ffi::Error e = reusable ? RunCached(op, api, stream, workspace, *state, b)
                          : RunOneShot(op, api, stream, workspace, b);
  state->busy.store(false, std::memory_order_release);
  return e;
}

// ParallelFor of the host stream on XLA's intra-op thread pool: the calling
// thread works too, and helpers that start late find nothing left to do.
void PoolParallelFor(void* pool, int64_t num_tasks, void (*fn)(void*, int64_t), void* arg) {
  struct Shared {
    std::atomic<int64_t> next{0}, done{0};
    int64_t num_tasks;
    void (*fn)(void*, int64_t);
    void* arg;
  };
  auto shared = std::make_shared<Shared>();
  shared->num_tasks = num_tasks;
  shared->fn = fn;
  shared->arg = arg;
  auto work = [](Shared& s) {
    for (int64_t t; (t = s.next.fetch_add(1, std::memory_order_relaxed)) < s.num_tasks;) {
      s.fn(s.arg, t);
      s.done.fetch_add(1, std::memory_order_release);
    }
  };
  auto* tp = static_cast<ffi::ThreadPool*>(pool);
  const int64_t helpers = std::min<int64_t>(tp->num_threads(), num_tasks) - 1;
  for (int64_t h = 0; h < helpers; ++h) tp->Schedule([shared, work] { work(*shared); });
  work(*shared);
  while (shared->done.load(std::memory_order_acquire) < num_tasks) std::this_thread::yield();
}

// Platform entry: the CPU runs the host provider with XLA's thread pool as
// its stream; the NPU runs CANN on the PJRT platform stream.
template <typename Op>
ffi::Error Dispatch(ffi::ThreadPool pool, ffi::ScratchAllocator&, CallState* state,
                    const Op& op, const Buffers<Op::kNumInputs, Op::kNumOutputs>& b) {
  const Provider& p = CpuProvider();
  if (p.api == nullptr)
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jax_aclnn: the host aclnn provider is not loaded");
  JaxAclnnHostStream stream{JAX_ACLNN_HOST_STREAM_MAGIC,
                            std::max<int64_t>(1, pool.num_threads()), &pool, &PoolParallelFor};
  return Run(op, *p.api, &stream, HostWorkspace{}, state, b);
}

template <typename Op>
ffi::Error Dispatch(void* npu_stream, ffi::ScratchAllocator& scratch, CallState* state,
                    const Op& op, const Buffers<Op::kNumInputs, Op::kNumOutputs>& b) {
  std::string error;
  const Provider* p = NpuProvider(&error);
  if (p == nullptr) return ffi::Error(ffi::ErrorCode::kFailedPrecondition, error);
  return Run(op, *p->api, npu_stream, ScratchWorkspace{scratch}, state, b);
}

// ----- the handlers: one binding and implementation for every operator -----

// An operator of csrc/ops/ with its place in the operator list.
#define JAX_ACLNN_OPERATOR(Name, name)                       \
  struct Name##Op : ops::Name {                              \
    static constexpr OpId kId = k##Name;                     \
    static constexpr auto kExecute = &AclnnApi::aclnn##Name; \
  };
JAX_ACLNN_OPERATORS(JAX_ACLNN_OPERATOR)
#undef JAX_ACLNN_OPERATOR

// Operators with optional buffers null the absent ones (OmitAbsent).
template <typename Op, typename B, typename = void>
struct HasOmitAbsent : std::false_type {};
template <typename Op, typename B>
struct HasOmitAbsent<Op, B, std::void_t<decltype(std::declval<const Op&>().OmitAbsent(
                                std::declval<B&>()))>> : std::true_type {};

// Binds the operator's buffers (AnyBuffer each) and then its attributes.
template <typename Op, int kArgs, int kRets, typename Binding>
auto BindBuffersAndAttributes(Binding&& b) {
  if constexpr (kArgs > 0)
    return BindBuffersAndAttributes<Op, kArgs - 1, kRets>(
        std::move(b).template Arg<ffi::AnyBuffer>());
  else if constexpr (kRets > 0)
    return BindBuffersAndAttributes<Op, 0, kRets - 1>(std::move(b).template Ret<ffi::AnyBuffer>());
  else
    return std::move(b).template Attrs<typename Op::Attributes>();
}

template <size_t>
using Input = ffi::AnyBuffer;
template <size_t>
using Output = ffi::Result<ffi::AnyBuffer>;

// The same attributes and buffers on both platforms: the platform's stream,
// scratch allocator and call-site state, the operator's buffers in the
// order of its aclnn signature, its attributes as one struct.
template <typename Op, typename = std::make_index_sequence<Op::kNumInputs>,
          typename = std::make_index_sequence<Op::kNumOutputs>>
struct Handler;

template <typename Op, size_t... I, size_t... O>
struct Handler<Op, std::index_sequence<I...>, std::index_sequence<O...>> {
  template <typename StreamCtx>
  static auto Binding() {
    return BindBuffersAndAttributes<Op, Op::kNumInputs, Op::kNumOutputs>(
        ffi::Ffi::Bind()
            .template Ctx<StreamCtx>()
            .template Ctx<ffi::ScratchAllocator>()
            .template Ctx<ffi::State<CallState>>());
  }

  template <typename Stream>
  static ffi::Error Impl(Stream stream, ffi::ScratchAllocator scratch, CallState* state,
                         Input<I>... in, Output<O>... out, typename Op::Attributes attrs) {
    const Op op{{attrs}};
    Buffers<Op::kNumInputs, Op::kNumOutputs> b{{&in...}, {&*out...}};
    if constexpr (HasOmitAbsent<Op, decltype(b)>::value) op.OmitAbsent(b);
    return Dispatch(stream, scratch, state, op, b);
  }
};

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

}  // namespace

#define JAX_ACLNN_DEFINE_HANDLERS(Name, name)                                     \
  XLA_FFI_DEFINE_HANDLER(k##Name##Cpu, Handler<Name##Op>::Impl<ffi::ThreadPool>, \
                         Handler<Name##Op>::Binding<ffi::ThreadPool>());         \
  XLA_FFI_DEFINE_HANDLER(k##Name##Npu, Handler<Name##Op>::Impl<void*>,          \
                         Handler<Name##Op>::Binding<ffi::PlatformStream<void*>>());
JAX_ACLNN_OPERATORS(JAX_ACLNN_DEFINE_HANDLERS)
#undef JAX_ACLNN_DEFINE_HANDLERS

#define JAX_ACLNN_HANDLER_SET(Name, name) \
  {"aclnn_" #name, #name, Instantiate, k##Name##Cpu, k##Name##Npu},
const HandlerSet kHandlerSets[] = {JAX_ACLNN_OPERATORS(JAX_ACLNN_HANDLER_SET)};
#undef JAX_ACLNN_HANDLER_SET
const int kNumHandlerSets = sizeof(kHandlerSets) / sizeof(kHandlerSets[0]);

XLA_FFI_TypeId* CallStateTypeId() { return &CallState::id; }

bool ExecutorReuse() { return executor_reuse.load(); }
void SetExecutorReuse(bool enabled) { executor_reuse.store(enabled); }

const TypeInfo* CallStateTypeInfo() {
  static const TypeInfo info{sizeof(TypeInfo), nullptr, &DeleteCallState};
  return &info;
}

}  // namespace jax_aclnn
