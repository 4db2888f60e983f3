// XLA FFI handlers: one code path from an XLA buffer to an aclnn call.
//
// Every call: describe each buffer as an aclTensor (attributes as aclScalar
// where the ABI wants one), aclnnXxxGetWorkspaceSize, a workspace (XLA's
// scratch allocator on the NPU, a reused per-thread buffer on the CPU),
// aclnnXxx on the platform's stream, destroy the descriptors. A call site
// (FFI state made at instantiation) keeps a repeatable executor instead when
// the provider supports it, re-targeted at each step's buffers, so
// steady-state steps run the execute phase only. Its parts: the descriptors
// (descriptors.h), aclnn status errors (status.h), the call site's state
// (call_state.h) and the workspace sources (workspace.h).
#include "ffi/handlers.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "aclnn_abi.h"
#include "attributes.h"
#include "ffi/call_state.h"
#include "ffi/descriptors.h"
#include "ffi/provider.h"
#include "ffi/stats.h"
#include "ffi/status.h"
#include "ffi/workspace.h"
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

bool ExecutorReuse() { return executor_reuse.load(); }
void SetExecutorReuse(bool enabled) { executor_reuse.store(enabled); }

}  // namespace jax_aclnn
