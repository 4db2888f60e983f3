// The XLA FFI handler of every aclnn operator: one code path from XLA's
// buffers to any aclnn operator's two phases.
//
// Every call: the custom call's attributes (ffi/arguments.h) say which
// operator it is and its first phase's argument list; each buffer becomes
// an aclTensor and each other argument its aclScalar, array, list or plain
// value (ffi/descriptors.h); both phases are looked up by name in the
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

// The custom call's attributes (ffi/arguments.h). Bound one by one, in
// their sorted order: XLA FFI then decodes each by its index, where a struct
// of attributes is looked up by name on every call.
struct CallAttributes {
  ffi::Span<const double> floats;
  ffi::Span<const int64_t> ints;
  ffi::Span<const int64_t> kinds;
  std::string_view library;
  std::string_view op;  // the attribute "operator"
  std::string_view strings;
};

RuntimeStats& Stats() {
  static RuntimeStats stats;
  return stats;
}

namespace {

std::mutex counters_mutex;
std::vector<std::pair<std::string, std::unique_ptr<OpCounters>>>& CountersList() {
  static std::vector<std::pair<std::string, std::unique_ptr<OpCounters>>> list;
  return list;
}

}  // namespace

OpCounters& OperatorCounters(std::string_view name) {
  std::lock_guard<std::mutex> lock(counters_mutex);
  auto& list = CountersList();
  for (auto& [n, c] : list)
    if (n == name) return *c;
  return *list.emplace_back(std::string(name), std::make_unique<OpCounters>()).second;
}

std::vector<std::pair<std::string, OpCounters*>> AllOperatorCounters() {
  std::lock_guard<std::mutex> lock(counters_mutex);
  std::vector<std::pair<std::string, OpCounters*>> all;
  for (auto& [n, c] : CountersList()) all.emplace_back(n, c.get());
  return all;
}

namespace {

std::atomic<bool> executor_reuse{true};

ffi::Error Invalid(const std::string& message) {
  return ffi::Error::InvalidArgument("jax_aclnn: " + message);
}

// One call: the operator's attributes and buffers.
struct Call {
  const CallAttributes& attrs;
  ffi::RemainingArgs in;
  ffi::RemainingRets out;
};

// The attributes' values, taken in parameter order.
class Values {
 public:
  explicit Values(const CallAttributes& a) : a_(a) {}
  ffi::ErrorOr<int64_t> Int() {
    if (next_int_ >= a_.ints.size()) return ffi::Unexpected(Short("ints"));
    return a_.ints[next_int_++];
  }
  ffi::ErrorOr<double> Float() {
    if (next_float_ >= a_.floats.size()) return ffi::Unexpected(Short("floats"));
    return a_.floats[next_float_++];
  }
  // n values of ints (in place) or floats.
  ffi::ErrorOr<const int64_t*> Ints(int64_t n) {
    if (n < 0 || static_cast<size_t>(n) > a_.ints.size() - next_int_)
      return ffi::Unexpected(Short("ints"));
    const int64_t* p = a_.ints.begin() + next_int_;
    next_int_ += n;
    return p;
  }
  ffi::ErrorOr<const double*> Floats(int64_t n) {
    if (n < 0 || static_cast<size_t>(n) > a_.floats.size() - next_float_)
      return ffi::Unexpected(Short("floats"));
    const double* p = a_.floats.begin() + next_float_;
    next_float_ += n;
    return p;
  }
  // The next NUL-terminated string of `strings`.
  ffi::ErrorOr<const char*> String() {
    const size_t end = a_.strings.find('\0', next_string_);
    if (end == std::string_view::npos) return ffi::Unexpected(Short("strings"));
    const char* s = a_.strings.data() + next_string_;
    next_string_ = end + 1;
    return s;
  }

 private:
  static ffi::Error Short(const char* what) {
    return Invalid(std::string("the custom call's '") + what +
                   "' attribute holds fewer values than its 'kinds' take");
  }
  const CallAttributes& a_;
  size_t next_int_ = 0, next_float_ = 0, next_string_ = 0;
};

constexpr int kMaxArrayValues = 256;  // bool and float array values of one call

// The first phase's arguments of one call and what they are made of: the
// descriptors (in `d`), the input and output tensor parameters' descriptors
// by index, the bool and float arrays' values. Only the entries made are
// set (the arrays are not cleared on every call).
struct Built {
  explicit Built(Descriptors& descriptors) : d(descriptors) {}
  Descriptors& d;
  Arguments args;
  aclTensor* inputs[kMaxTensors];
  aclTensor* outputs[kMaxTensors];
  int num_inputs = 0, num_outputs = 0;
  bool has_lists = false;  // tensor lists: executors are not re-targeted
  bool bools[kMaxArrayValues];
  float floats[kMaxArrayValues];
  int num_array_values = 0;
};

#define JAX_ACLNN_TRY(var, expr)                 \
  auto var##_or = (expr);                        \
  if (var##_or.has_error()) return var##_or.error(); \
  auto var = *var##_or

// The next operand (result) buffer's descriptor, or null for a placeholder.
ffi::ErrorOr<aclTensor*> NextTensor(const Call& c, Built& b, bool output, bool absent,
                                    int* next) {
  const int i = (*next)++;
  const size_t count = output ? c.out.size() : c.in.size();
  if (i >= static_cast<int>(count))
    return ffi::Unexpected(Invalid(std::string("the custom call has fewer ") +
                                   (output ? "results" : "operands") + " than its 'kinds' take"));
  if (absent) return static_cast<aclTensor*>(nullptr);
  if (output) {
    auto r = c.out.get<ffi::AnyBuffer>(i);
    if (r.has_error()) return ffi::Unexpected(r.error());
    return b.d.Tensor(&**r);
  }
  auto a = c.in.get<ffi::AnyBuffer>(i);
  if (a.has_error()) return ffi::Unexpected(a.error());
  return b.d.Tensor(&*a);
}

// Room for n more bool or float array values: their offset in Built's arrays.
ffi::ErrorOr<int> ArrayStorage(Built& b, int64_t n) {
  if (n < 0 || n > kMaxArrayValues - b.num_array_values)
    return ffi::Unexpected(Invalid("more bool and float array values than one call takes (" +
                                   std::to_string(kMaxArrayValues) + ")"));
  const int offset = b.num_array_values;
  b.num_array_values += static_cast<int>(n);
  return offset;
}

// One parameter's argument.
ffi::Error BuildOne(const Call& c, ArgKind kind, Values& v, Built& b, int* next_in,
                    int* next_out) {
  Argument& arg = b.args.items[b.args.size];
  arg.type = Argument::Type::kPointer;
  switch (kind) {
    case ArgKind::kInput:
    case ArgKind::kAbsentInput:
    case ArgKind::kOutput:
    case ArgKind::kAbsentOutput: {
      const bool output = kind == ArgKind::kOutput || kind == ArgKind::kAbsentOutput;
      const bool absent = kind == ArgKind::kAbsentInput || kind == ArgKind::kAbsentOutput;
      JAX_ACLNN_TRY(t, NextTensor(c, b, output, absent, output ? next_out : next_in));
      int& n = output ? b.num_outputs : b.num_inputs;
      (output ? b.outputs : b.inputs)[n++] = t;
      arg.value.pointer = t;
      break;
    }
    case ArgKind::kNull: arg.value.pointer = nullptr; break;
    case ArgKind::kScalar: {
      JAX_ACLNN_TRY(dtype, v.Int());
      const bool floating = dtype == ACL_FLOAT || dtype == ACL_DOUBLE;
      double value = 0;
      int64_t integer = 0;
      if (floating) {
        JAX_ACLNN_TRY(f, v.Float());
        value = f;
      } else {
        JAX_ACLNN_TRY(i, v.Int());
        integer = i;
      }
      JAX_ACLNN_TRY(s, b.d.Scalar(static_cast<aclDataType>(dtype), value, integer));
      arg.value.pointer = s;
      break;
    }
    case ArgKind::kBool: {
      JAX_ACLNN_TRY(i, v.Int());
      arg.type = Argument::Type::kBool;
      arg.value.b = i != 0;
      break;
    }
    case ArgKind::kInt8:
    case ArgKind::kInt32:
    case ArgKind::kInt64: {
      JAX_ACLNN_TRY(i, v.Int());
      if (kind == ArgKind::kInt8) {
        arg.type = Argument::Type::kInt8;
        arg.value.i8 = static_cast<int8_t>(i);
      } else if (kind == ArgKind::kInt32) {
        arg.type = Argument::Type::kInt32;
        arg.value.i32 = static_cast<int32_t>(i);
      } else {
        arg.type = Argument::Type::kInt64;
        arg.value.i64 = i;
      }
      break;
    }
    case ArgKind::kDouble:
    case ArgKind::kFloat: {
      JAX_ACLNN_TRY(f, v.Float());
      if (kind == ArgKind::kFloat) {
        arg.type = Argument::Type::kFloat;
        arg.value.f = static_cast<float>(f);
      } else {
        arg.type = Argument::Type::kDouble;
        arg.value.d = f;
      }
      break;
    }
    case ArgKind::kIntArray: {
      JAX_ACLNN_TRY(n, v.Int());
      JAX_ACLNN_TRY(values, v.Ints(n));
      JAX_ACLNN_TRY(a, b.d.IntArray(values, static_cast<uint64_t>(n)));
      arg.value.pointer = a;
      break;
    }
    case ArgKind::kBoolArray: {
      JAX_ACLNN_TRY(n, v.Int());
      JAX_ACLNN_TRY(values, v.Ints(n));
      JAX_ACLNN_TRY(offset, ArrayStorage(b, n));
      bool* bools = b.bools + offset;
      for (int64_t i = 0; i < n; ++i) bools[i] = values[i] != 0;
      JAX_ACLNN_TRY(a, b.d.BoolArray(bools, static_cast<uint64_t>(n)));
      arg.value.pointer = a;
      break;
    }
    case ArgKind::kFloatArray: {
      JAX_ACLNN_TRY(n, v.Int());
      JAX_ACLNN_TRY(values, v.Floats(n));
      JAX_ACLNN_TRY(offset, ArrayStorage(b, n));
      float* floats = b.floats + offset;
      for (int64_t i = 0; i < n; ++i) floats[i] = static_cast<float>(values[i]);
      JAX_ACLNN_TRY(a, b.d.FloatArray(floats, static_cast<uint64_t>(n)));
      arg.value.pointer = a;
      break;
    }
    case ArgKind::kInputList:
    case ArgKind::kOutputList: {
      JAX_ACLNN_TRY(n, v.Int());
      if (n < 0 || n > kMaxTensors) return Invalid("a tensor list of " + std::to_string(n));
      const bool output = kind == ArgKind::kOutputList;
      for (int64_t i = 0; i < n; ++i) {
        JAX_ACLNN_TRY(t, NextTensor(c, b, output, false, output ? next_out : next_in));
        (void)t;
      }
      JAX_ACLNN_TRY(list, b.d.TensorList(static_cast<int>(n)));
      b.has_lists = true;
      arg.value.pointer = list;
      break;
    }
    case ArgKind::kString: {
      JAX_ACLNN_TRY(s, v.String());
      arg.value.pointer = const_cast<char*>(s);
      break;
    }
    default:
      return Invalid("unknown argument kind " + std::to_string(static_cast<int64_t>(kind)));
  }
  ++b.args.size;
  return ffi::Error::Success();
}

#undef JAX_ACLNN_TRY

// Every parameter's argument, descriptors included.
ffi::Error Build(const Call& c, Built& b) {
  if (c.attrs.kinds.size() > static_cast<size_t>(kMaxParameters))
    return Invalid("more than " + std::to_string(kMaxParameters) + " parameters");
  Values v(c.attrs);
  int next_in = 0, next_out = 0;
  for (int64_t k : c.attrs.kinds)
    if (ffi::Error e = BuildOne(c, static_cast<ArgKind>(k), v, b, &next_in, &next_out);
        e.failure())
      return e;
  if (next_in != static_cast<int>(c.in.size()) || next_out != static_cast<int>(c.out.size()))
    return Invalid("the custom call's buffers are not those its 'kinds' take");
  return ffi::Error::Success();
}

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
    if (b.has_lists || api.aclSetAclOpExecutorRepeatable(ex) != ACLNN_SUCCESS) {
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
