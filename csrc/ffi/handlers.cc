// The XLA FFI handler of every aclnn operator: one code path from XLA's
// buffers to any aclnn operator's two phases.
//
// Every call: the custom call's attributes (ffi/arguments.h) say which
// operator it is and its first phase's argument list; each buffer becomes
// an aclTensor and each other argument its aclScalar, array, list or plain
// value (ffi/call_arguments.h, ffi/descriptors.h); both phases are looked up by name in the
// provider (ffi/provider.h); aclnnXxxGetWorkspaceSize is called through
// libffi (ffi/first_phase.h), then a workspace (XLA's scratch allocator on
// the NPU, a reused per-thread buffer on the CPU, ffi/workspace.h) and
// aclnnXxx on the platform's stream; the descriptors are destroyed. A call
// site (FFI state made at instantiation, ffi/call_state.h) keeps a
// repeatable executor instead when the provider supports it, re-targeted at
// each step's buffers, so steady-state steps run the second phase only.
#include "ffi/handlers.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "aclnn_abi.h"
#include "ffi/arguments.h"
#include "ffi/call_arguments.h"
#include "ffi/call_state.h"
#include "ffi/descriptors.h"
#include "ffi/first_phase.h"
#include "ffi/provider.h"
#include "ffi/stats.h"
#include "ffi/status.h"
#include "ffi/workspace.h"
#include "host_stream.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jax_aclnn {

namespace {

std::atomic<bool> executor_reuse{true};

// An operator of a provider, ready to call.
struct Operator {
  std::string_view name;
  const AclnnApi* api;
  const OperatorPhases* phases;
};

// Descriptors for all arguments, then the first phase.
ffi::Error GetWorkspaceSize(const Call& c, const Operator& op, Built& b,
                            uint64_t* workspace_size, aclOpExecutor** executor) {
  if (ffi::Error e = Build(c, b); e.failure()) return e;
  Count(op.phases->counters->get_workspace_size);
  auto st = CallFirstPhase(op.phases->first_phase, b.args, workspace_size, executor);
  if (st.has_error()) return st.error();
  if (*st != ACLNN_SUCCESS)
    return StatusError(*op.api, std::string(op.name) + "GetWorkspaceSize", *st);
  Count(Stats().live_executors);
  return ffi::Error::Success();
}

// The second phase; a one-shot executor is consumed by it.
template <typename Workspace>
ffi::Error Execute(const Operator& op, aclOpExecutor* executor, uint64_t workspace_size,
                   bool consumed, aclrtStream stream, const Workspace& allocate) {
  const AclnnApi& api = *op.api;
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
                        std::string(op.name) + ": cannot allocate a workspace of " +
                            std::to_string(workspace_size) + " bytes");
    }
  }
  Count(op.phases->counters->execute);
  aclnnStatus st = op.phases->second_phase(workspace, workspace_size, executor, stream);
  if (consumed) Count(Stats().live_executors, -1);
  if (st != ACLNN_SUCCESS) return StatusError(api, std::string(op.name), st);
  return ffi::Error::Success();
}

template <typename Workspace>
ffi::Error RunOneShot(const Call& c, const Operator& op, aclrtStream stream,
                      const Workspace& workspace) {
  Descriptors d(*op.api);
  Built b(d);
  uint64_t ws = 0;
  aclOpExecutor* ex = nullptr;
  if (ffi::Error e = GetWorkspaceSize(c, op, b, &ws, &ex); e.failure()) return e;
  return Execute(op, ex, ws, /*consumed=*/true, stream, workspace);
}

// Re-targets the cached executor at this call's buffers: the tensor
// parameters' buffers by their index among the inputs (outputs).
ffi::Error Retarget(const Call& c, const AclnnApi& api, const CachedExecutor& cached) {
  int in = 0, out = 0, next_in = 0, next_out = 0;
  for (int64_t k : c.attrs.kinds) {
    const auto kind = static_cast<ArgKind>(k);
    if (kind == ArgKind::kAbsentInput) ++in, ++next_in;
    if (kind == ArgKind::kAbsentOutput) ++out, ++next_out;
    if (kind == ArgKind::kInput) {
      auto a = c.in.get<ffi::AnyBuffer>(next_in++);
      if (a.has_error()) return a.error();
      const int i = in++;
      if (a->element_count() == 0) continue;  // nothing to read
      if (aclnnStatus st = api.aclSetInputTensorAddr(cached.executor, i, cached.inputs[i],
                                                     const_cast<void*>(a->untyped_data())))
        return StatusError(api, "aclSetInputTensorAddr", st);
    }
    if (kind == ArgKind::kOutput) {
      auto r = c.out.get<ffi::AnyBuffer>(next_out++);
      if (r.has_error()) return r.error();
      const int i = out++;
      if ((*r)->element_count() == 0) continue;
      if (aclnnStatus st = api.aclSetOutputTensorAddr(cached.executor, i, cached.outputs[i],
                                                      (*r)->untyped_data()))
        return StatusError(api, "aclSetOutputTensorAddr", st);
    }
  }
  return ffi::Error::Success();
}

// Uses (or first creates) the call site's repeatable executor. A failed
// first call leaves the call site as it was: nothing is kept. An operator
// with tensor lists runs one-shot (its lists' tensors are not re-targeted).
template <typename Workspace>
ffi::Error RunCached(const Call& c, const Operator& op, aclrtStream stream,
                     const Workspace& workspace, CallState& s) {
  const AclnnApi& api = *op.api;
  if (s.cached == nullptr) {
    auto cached = std::make_unique<CachedExecutor>(api);
    Built b(cached->descriptors);
    aclOpExecutor* ex = nullptr;
    if (ffi::Error e = GetWorkspaceSize(c, op, b, &cached->workspace_size, &ex); e.failure())
      return e;
    if (b.one_shot || api.aclSetAclOpExecutorRepeatable(ex) != ACLNN_SUCCESS) {
      s.refused = true;
      return Execute(op, ex, cached->workspace_size, /*consumed=*/true, stream, workspace);
    }
    std::copy(b.inputs, b.inputs + b.num_inputs, cached->inputs);
    std::copy(b.outputs, b.outputs + b.num_outputs, cached->outputs);
    cached->executor = ex;
    s.cached = std::move(cached);
  } else if (ffi::Error e = Retarget(c, api, *s.cached); e.failure()) {
    return e;
  }
  return Execute(op, s.cached->executor, s.cached->workspace_size, /*consumed=*/false, stream,
                 workspace);
}

// The operator of the call's attributes in the platform's provider (or in
// the library they name, over it).
ffi::ErrorOr<Operator> Find(const Call& c, const Provider& platform) {
  const Provider* p = &platform;
  std::string error;
  if (!c.attrs.library.empty() &&
      (p = LibraryProvider(std::string(c.attrs.library), platform, &error)) == nullptr)
    return ffi::Unexpected(ffi::Error(ffi::ErrorCode::kFailedPrecondition, error));
  const OperatorPhases& phases = FindOperator(*p, c.attrs.op);
  if (phases.first_phase == nullptr || phases.second_phase == nullptr)
    return ffi::Unexpected(ffi::Error(
        ffi::ErrorCode::kUnimplemented,
        "jax_aclnn: the aclnn provider (" + p->origin + ") does not export " +
            std::string(c.attrs.op) + (phases.first_phase ? "" : "GetWorkspaceSize")));
  return Operator{phases.name, p->api, &phases};
}

// At a call site: the operator it found on its first call (for this
// platform's provider), and its repeatable executor where it can have one.
template <typename Workspace>
ffi::Error RunAtCallSite(const Call& c, const Provider& platform, aclrtStream stream,
                         const Workspace& workspace, CallState& s) {
  if (s.platform != &platform) {
    auto found = Find(c, platform);
    if (found.has_error()) return found.error();
    s.platform = &platform;
    s.api = found->api;
    s.phases = found->phases;
  }
  const Operator op{s.phases->name, s.api, s.phases};
  const bool reusable = executor_reuse.load(std::memory_order_relaxed) &&
                        op.api->supports_executor_reuse && !s.refused &&
                        (s.cached == nullptr || s.cached->api == op.api);
  return reusable ? RunCached(c, op, stream, workspace, s) : RunOneShot(c, op, stream, workspace);
}

template <typename Workspace>
ffi::Error Run(const Call& c, const Provider& platform, aclrtStream stream,
               const Workspace& workspace, CallState* state) {
  // A concurrent call of the same call site (busy) runs one-shot.
  if (state == nullptr || state->busy.exchange(true, std::memory_order_acquire)) {
    auto op = Find(c, platform);
    if (op.has_error()) return op.error();
    return RunOneShot(c, *op, stream, workspace);
  }
  ffi::Error e = RunAtCallSite(c, platform, stream, workspace, *state);
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
ffi::Error CpuExecute(ffi::ThreadPool pool, ffi::ScratchAllocator, CallState* state,
                      ffi::RemainingArgs in, ffi::RemainingRets out,
                      ffi::Span<const double> floats, ffi::Span<const int64_t> ints,
                      ffi::Span<const int64_t> kinds, std::string_view library,
                      std::string_view op, std::string_view strings) {
  const Provider& p = CpuProvider();
  if (p.api == nullptr)
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "jax_aclnn: the host aclnn provider is not loaded");
  JaxAclnnHostStream stream{JAX_ACLNN_HOST_STREAM_MAGIC,
                            std::max<int64_t>(1, pool.num_threads()), &pool, &PoolParallelFor};
  const CallAttributes attrs{floats, ints, kinds, library, op, strings};
  return Run(Call{attrs, in, out}, p, &stream, HostWorkspace{}, state);
}

ffi::Error NpuExecute(void* npu_stream, ffi::ScratchAllocator scratch, CallState* state,
                      ffi::RemainingArgs in, ffi::RemainingRets out,
                      ffi::Span<const double> floats, ffi::Span<const int64_t> ints,
                      ffi::Span<const int64_t> kinds, std::string_view library,
                      std::string_view op, std::string_view strings) {
  std::string error;
  const Provider* p = NpuProvider(&error);
  if (p == nullptr) return ffi::Error(ffi::ErrorCode::kFailedPrecondition, error);
  const CallAttributes attrs{floats, ints, kinds, library, op, strings};
  return Run(Call{attrs, in, out}, *p, npu_stream, ScratchWorkspace{scratch}, state);
}

// The same attributes and buffers on both platforms: the platform's stream,
// scratch allocator and call-site state, the operands and results, the
// attributes of CallAttributes.
template <typename StreamCtx>
auto Binding() {
  return ffi::Ffi::Bind()
      .Ctx<StreamCtx>()
      .template Ctx<ffi::ScratchAllocator>()
      .template Ctx<ffi::State<CallState>>()
      .RemainingArgs()
      .RemainingRets()
      .template Attr<ffi::Span<const double>>("floats")
      .template Attr<ffi::Span<const int64_t>>("ints")
      .template Attr<ffi::Span<const int64_t>>("kinds")
      .template Attr<std::string_view>("library")
      .template Attr<std::string_view>("operator")
      .template Attr<std::string_view>("strings");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER(kCpuExecute, CpuExecute, Binding<ffi::ThreadPool>());
XLA_FFI_DEFINE_HANDLER(kNpuExecute, NpuExecute, Binding<ffi::PlatformStream<void*>>());

const HandlerSet kHandlers = {Instantiate, kCpuExecute, kNpuExecute};

bool ExecutorReuse() { return executor_reuse.load(); }
void SetExecutorReuse(bool enabled) { executor_reuse.store(enabled); }

}  // namespace jax_aclnn
