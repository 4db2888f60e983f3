// The host aclnn provider: the aclnn C ABI (aclnn_abi.h) implemented on the
// CPU. It behaves as CANN does: GetWorkspaceSize validates every argument
// and returns an aclnnStatus with a readable last-error message, and builds
// an executor that the second phase consumes (unless made repeatable). The
// descriptors (aclCreateTensor, aclCreateScalar): descriptors.cc.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "aclnn_abi.h"
#include "host/dtype.h"
#include "host/kernels.h"
#include "host/parallel.h"
#include "host/provider.h"
#include "host/rows.h"
#include "operators.h"

namespace jax_aclnn::host {
namespace {

thread_local std::string last_error;

}  // namespace

aclnnStatus Fail(aclnnStatus status, const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  last_error = buf;
  return status;
}

std::string ShapeString(const View& v) {
  std::string s = "[";
  for (int d = 0; d < v.rank; ++d) s += (d ? "," : "") + std::to_string(v.dims[d]);
  return s + "]";
}

aclnnStatus CheckTensor(const char* op, const char* name, const aclTensor* t) {
  if (t == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is a null pointer", op, name);
  if (!IsSupportedFloat(t->view.dtype))
    return Fail(ACLNN_ERR_PARAM_INVALID,
                "%s: %s has data type %s; supported are FLOAT, FLOAT16, BFLOAT16", op, name,
                DataTypeName(t->view.dtype));
  if (t->view.NumElements() > 0 && t->view.data == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s has no data", op, name);
  return ACLNN_SUCCESS;
}

aclnnStatus CheckSameType(const char* op, const char* a_name, const aclTensor* a,
                          const char* b_name, const aclTensor* b) {
  if (a->view.dtype != b->view.dtype)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s (%s) and %s (%s) must have the same data type",
                op, a_name, DataTypeName(a->view.dtype), b_name, DataTypeName(b->view.dtype));
  return ACLNN_SUCCESS;
}

aclnnStatus CheckDataType(const char* op, const char* name, const aclTensor* t,
                          std::initializer_list<aclDataType> allowed) {
  std::string names;
  for (aclDataType d : allowed) {
    if (t->view.dtype == d) return ACLNN_SUCCESS;
    names += std::string(names.empty() ? "" : " or ") + DataTypeName(d);
  }
  return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has data type %s; expected %s", op, name,
              DataTypeName(t->view.dtype), names.c_str());
}

aclnnStatus CheckContiguous(const char* op, const char* name, const aclTensor* t) {
  if (IsContiguous(t->view)) return ACLNN_SUCCESS;
  return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s must be contiguous", op, name);
}

aclnnStatus CheckDims(const char* op, const char* name, const aclTensor* t, const int64_t* dims,
                      int rank) {
  const View& v = t->view;
  bool same = v.rank == rank;
  for (int d = 0; same && d < rank; ++d) same = v.dims[d] == dims[d];
  if (same) return ACLNN_SUCCESS;
  View expected;
  expected.rank = rank;
  std::copy(dims, dims + rank, expected.dims);
  return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s, expected %s", op, name,
              ShapeString(v).c_str(), ShapeString(expected).c_str());
}

aclnnStatus MakeExecutor(const char* op, ExecutorRun run, const PointwiseParams& params,
                         std::initializer_list<const aclTensor*> inputs,
                         std::initializer_list<const aclTensor*> outputs,
                         uint64_t workspace_size, uint64_t* workspaceSize,
                         aclOpExecutor** executor) {
  if (workspaceSize == nullptr || executor == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: workspaceSize or executor is a null pointer", op);
  if (inputs.size() > kMaxInputs || outputs.size() > kMaxOutputs)
    return Fail(ACLNN_ERR_INNER, "%s: too many tensors", op);
  auto* ex = new (std::nothrow) aclOpExecutor{};
  if (ex == nullptr) return Fail(ACLNN_ERR_INNER, "%s: out of memory", op);
  ex->op_name = op;
  ex->run = run;
  ex->params = params;
  for (const aclTensor* t : inputs) {
    if (t != nullptr) ex->inputs[ex->num_inputs] = t->view;
    ex->input_tensors[ex->num_inputs++] = t;
  }
  for (const aclTensor* t : outputs) {
    ex->has_output[ex->num_outputs] = t != nullptr;
    if (t != nullptr) ex->outputs[ex->num_outputs] = t->view;
    ex->output_tensors[ex->num_outputs++] = t;
  }
  ex->workspace_size = workspace_size;
  *workspaceSize = workspace_size;
  *executor = ex;
  return ACLNN_SUCCESS;
}

namespace {

// Broadcasts `in` to `out`'s shape (numpy rules): an input view of out's rank
// with stride 0 where the input is broadcast.
bool BroadcastTo(const View& in, const View& out, View* result) {
  if (in.rank > out.rank) return false;
  *result = in;
  result->rank = out.rank;
  const int shift = out.rank - in.rank;
  for (int d = out.rank - 1; d >= 0; --d) {
    const int s = d - shift;
    const int64_t dim = s >= 0 ? in.dims[s] : 1;
    if (dim != out.dims[d] && dim != 1) return false;
    result->dims[d] = out.dims[d];
    result->strides[d] = (s >= 0 && dim == out.dims[d]) ? in.strides[s] : 0;
  }
  return true;
}

// Checks that the inputs broadcast to the output's shape and fills `ex`.
aclnnStatus SetBroadcastInputs(aclOpExecutor* ex, const char* const* names,
                               const aclTensor* const* inputs, int n, const aclTensor* out,
                               const char* out_name) {
  int rank = 0;
  for (int k = 0; k < n; ++k) rank = std::max(rank, inputs[k]->view.rank);
  View shape;
  shape.rank = rank;
  for (int d = 0; d < rank; ++d) {
    shape.dims[d] = 1;
    for (int k = 0; k < n; ++k) {
      const View& v = inputs[k]->view;
      const int s = d - (rank - v.rank);
      if (s < 0 || v.dims[s] == 1) continue;
      if (shape.dims[d] != 1 && shape.dims[d] != v.dims[s]) {
        std::string msg;
        for (int j = 0; j < n; ++j)
          msg += std::string(j ? ", " : "") + names[j] + ShapeString(inputs[j]->view);
        return Fail(ACLNN_ERR_PARAM_INVALID, "%s: shapes do not broadcast: %s", ex->op_name,
                    msg.c_str());
      }
      shape.dims[d] = v.dims[s];
    }
  }
  const View& o = out->view;
  bool same = o.rank == rank;
  for (int d = 0; same && d < rank; ++d) same = o.dims[d] == shape.dims[d];
  if (!same)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s, expected the broadcast shape %s",
                ex->op_name, out_name, ShapeString(o).c_str(), ShapeString(shape).c_str());
  for (int k = 0; k < n; ++k) {
    BroadcastTo(inputs[k]->view, o, &ex->inputs[k]);
    ex->input_tensors[k] = inputs[k];
  }
  ex->num_inputs = n;
  ex->outputs[0] = o;
  ex->output_tensors[0] = out;
  ex->has_output[0] = true;
  ex->num_outputs = 1;
  return ACLNN_SUCCESS;
}

void RunPointwiseExecutor(const aclOpExecutor& ex, void*, const JaxAclnnHostStream* stream) {
  RunPointwise(ex.pointwise, ex.params, ex.inputs, ex.num_inputs, ex.outputs[0], stream);
}

}  // namespace

aclnnStatus PointwiseGetWorkspaceSize(const char* op, OpId kind,
                                      const PointwiseParams& params,
                                      std::initializer_list<Operand> operands, Operand out_operand,
                                      bool same_shape, uint64_t* workspace_size,
                                      aclOpExecutor** executor) {
  if (workspace_size == nullptr || executor == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: workspaceSize or executor is a null pointer", op);
  if (operands.size() > kMaxInputs) return Fail(ACLNN_ERR_INNER, "%s: too many inputs", op);
  const char* names[kMaxInputs];
  const aclTensor* inputs[kMaxInputs];
  int n = 0;
  for (const Operand& o : operands) {
    names[n] = o.name;
    inputs[n++] = o.tensor;
  }
  const char* out_name = out_operand.name;
  const aclTensor* out = out_operand.tensor;
  for (int k = 0; k < n; ++k) {
    if (aclnnStatus st = CheckTensor(op, names[k], inputs[k])) return st;
    if (k > 0)
      if (aclnnStatus st = CheckSameType(op, names[0], inputs[0], names[k], inputs[k])) return st;
  }
  if (aclnnStatus st = CheckTensor(op, out_name, out)) return st;
  if (aclnnStatus st = CheckSameType(op, names[0], inputs[0], out_name, out)) return st;
  if (same_shape) {
    for (int k = 1; k < n; ++k) {
      const View &a = inputs[0]->view, &b = inputs[k]->view;
      bool same = a.rank == b.rank;
      for (int d = 0; same && d < a.rank; ++d) same = a.dims[d] == b.dims[d];
      if (!same)
        return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s%s and %s%s must have the same shape", op,
                    names[0], ShapeString(a).c_str(), names[k], ShapeString(b).c_str());
    }
  }
  auto* ex = new (std::nothrow) aclOpExecutor{};
  if (ex == nullptr) return Fail(ACLNN_ERR_INNER, "%s: out of memory", op);
  ex->op_name = op;
  ex->run = RunPointwiseExecutor;
  ex->pointwise = kind;
  ex->params = params;
  if (aclnnStatus st = SetBroadcastInputs(ex, names, inputs, n, out, out_name)) {
    delete ex;
    return st;
  }
  *workspace_size = 0;
  *executor = ex;
  return ACLNN_SUCCESS;
}

namespace {

#ifdef JAX_ACLNN_TESTING
// Test hooks (tests/test_npu_runtime.py), per thread: the stream (its value
// only) and workspace given to the last second phase, and a status the next
// one refuses with.
thread_local aclrtStream testing_last_stream = nullptr;
thread_local void* testing_last_workspace = nullptr;
thread_local uint64_t testing_last_workspace_size = 0;
thread_local aclnnStatus testing_refuse_next = ACLNN_SUCCESS;
#endif

aclnnStatus Execute(const char* op, void* workspace, uint64_t workspace_size,
                    aclOpExecutor* ex, aclrtStream stream) {
  if (ex == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: executor is a null pointer", op);
#ifdef JAX_ACLNN_TESTING
  testing_last_stream = stream;
  testing_last_workspace = workspace;
  testing_last_workspace_size = workspace_size;
  if (aclnnStatus st = testing_refuse_next) {
    testing_refuse_next = ACLNN_SUCCESS;
    if (!ex->repeatable) delete ex;  // a refused second phase still consumes the executor
    return Fail(st, "%s: refused at the request of a test", op);
  }
#endif
  if (std::strcmp(ex->op_name, op) != 0)  // names, not addresses: one operator, one name
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: the executor was created by %sGetWorkspaceSize",
                op, ex->op_name);
  if (workspace_size < ex->workspace_size || (ex->workspace_size > 0 && workspace == nullptr))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: workspace of %llu bytes given, %llu needed", op,
                static_cast<unsigned long long>(workspace_size),
                static_cast<unsigned long long>(ex->workspace_size));
  ex->run(*ex, workspace, AsHostStream(stream));
  if (!ex->repeatable) delete ex;
  return ACLNN_SUCCESS;
}

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the exported C functions below

extern "C" {

const char* aclGetRecentErrMsg(void) { return last_error.c_str(); }

aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor* executor) {
  if (executor == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "aclSetAclOpExecutorRepeatable: executor is null");
  executor->repeatable = true;
  return ACLNN_SUCCESS;
}

aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor) {
  if (executor != nullptr && !executor->repeatable)
    return Fail(ACLNN_ERR_PARAM_INVALID,
                "aclDestroyAclOpExecutor: %s executor is not repeatable; it is consumed by its "
                "second phase", executor->op_name);
  delete executor;
  return ACLNN_SUCCESS;
}

static aclnnStatus SetTensorAddr(const char* fn, aclOpExecutor* executor, size_t index,
                                 aclTensor* tensor, void* addr, bool output) {
  if (executor == nullptr || tensor == nullptr || addr == nullptr)  // CANN: 561103 for each
    return Fail(ACLNN_ERR_INNER_NULLPTR, "%s: %s is null", fn,
                executor == nullptr ? "executor" : tensor == nullptr ? "tensor" : "addr");
  if (!executor->repeatable)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: the %s executor is not repeatable", fn,
                executor->op_name);
  const size_t limit = output ? executor->num_outputs : executor->num_inputs;
  if (index >= limit || (output && !executor->has_output[index]))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has no %s tensor %zu", fn, executor->op_name,
                output ? "output" : "input", index);
  // Compared before `tensor` is read: a stray pointer is refused, not followed.
  if ((output ? executor->output_tensors : executor->input_tensors)[index] != tensor)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: tensor is not %s %s tensor %zu", fn,
                executor->op_name, output ? "output" : "input", index);
  View& v = output ? executor->outputs[index] : executor->inputs[index];
  v.data = Advance(addr, tensor->offset, v.dtype);
  tensor->view.data = v.data;
  return ACLNN_SUCCESS;
}

ACLNN_DEFINE_SET_TENSOR_ADDR(SetTensorAddr)

// The second phase, the same for every operator: runs the executor.
#define JAX_ACLNN_SECOND_PHASE(Name, name)                                                 \
  aclnnStatus aclnn##Name(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor, \
                          aclrtStream stream) {                                            \
    return Execute(jax_aclnn::kAclnnOpNames[jax_aclnn::k##Name], workspace, workspaceSize,  \
                   executor, stream);                                                     \
  }
JAX_ACLNN_OPERATORS(JAX_ACLNN_SECOND_PHASE)
#undef JAX_ACLNN_SECOND_PHASE
#define JAX_ACLNN_CATALOGUE_SECOND_PHASE(A, Name, parameters)                               \
  aclnnStatus aclnn##Name(void* workspace, uint64_t workspaceSize, aclOpExecutor* executor, \
                          aclrtStream stream) {                                            \
    return Execute("aclnn" #Name, workspace, workspaceSize, executor, stream);              \
  }
JAX_ACLNN_HOST_CATALOGUE_WITH(JAX_ACLNN_CATALOGUE_SECOND_PHASE, _)
#undef JAX_ACLNN_CATALOGUE_SECOND_PHASE

#ifdef JAX_ACLNN_TESTING
// Test-only exports (built with -DJAX_ACLNN_TESTING=ON), not aclnn ABI.
__attribute__((visibility("default"))) void jaxAclnnTestingLastExecute(
    aclrtStream* stream, void** workspace, uint64_t* workspace_size) {
  *stream = testing_last_stream;
  *workspace = testing_last_workspace;
  *workspace_size = testing_last_workspace_size;
}
__attribute__((visibility("default"))) void jaxAclnnTestingRefuseNextExecute(aclnnStatus status) {
  testing_refuse_next = status;
}
#endif

}  // extern "C"
