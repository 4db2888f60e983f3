// A test-only aclnn provider (libaclnn_test_provider.so), self-contained: its
// own descriptors (aclnn_abi.h's ABI, array and executor-reuse functions) and
// a few operators that are not in operators.h, for tests/test_declare.py:
//  - recording operators (aclnnRecord*): each first phase appends one line to
//    a log describing every argument it received, so a test can check that a
//    generic caller (libffi, argument list assembled at run time) delivers
//    exactly the declared values; their second phases do nothing;
//  - aclnnSoftplusBackward and aclnnRmsNormGrad, float32 on host memory.
// jaxAclnnTestRecorded / jaxAclnnTestReset read and clear the log and
// jaxAclnnTestLiveDescriptors counts the descriptors and executors alive,
// jaxAclnnTestLastStream is the last second phase's stream.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "aclnn_abi.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

std::atomic<int64_t> live{0};  // descriptors and executors not yet destroyed
thread_local std::string last_error;

std::mutex log_mutex;
std::string log_text;  // the recording operators' lines, separated by '\n'

// A member of every descriptor and executor: keeps `live` up to date.
struct Counted {
  Counted() { ++live; }
  Counted(const Counted&) { ++live; }
  ~Counted() { --live; }
};

// printf into a std::string; Fail also makes it the last error message.
std::string VFormat(const char* fmt, va_list args) {
  char buf[512];
  std::vsnprintf(buf, sizeof buf, fmt, args);
  return buf;
}
__attribute__((format(printf, 1, 2))) std::string Format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = VFormat(fmt, args);
  va_end(args);
  return s;
}
__attribute__((format(printf, 2, 3))) aclnnStatus Fail(aclnnStatus status, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  last_error = VFormat(fmt, args);
  va_end(args);
  return status;
}

size_t ElementSize(aclDataType dtype) {
  switch (dtype) {
    case ACL_DOUBLE: case ACL_INT64: case ACL_UINT64: return 8;
    case ACL_FLOAT: case ACL_INT32: case ACL_UINT32: return 4;
    case ACL_FLOAT16: case ACL_BF16: case ACL_INT16: case ACL_UINT16: return 2;
    default: return 1;
  }
}

float HalfToFloat(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const float v = exponent == 0    ? std::ldexp(float(mantissa), -24)
                  : exponent == 31 ? (mantissa ? NAN : INFINITY)
                                   : std::ldexp(float(mantissa | 0x400), exponent - 25);
  return (h & 0x8000) ? -v : v;
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <typename T>
T Load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

bool IsFloating(aclDataType d) {
  return d == ACL_FLOAT || d == ACL_DOUBLE || d == ACL_FLOAT16 || d == ACL_BF16;
}

}  // namespace

// The descriptors and the executor (the ABI's opaque structs).
struct aclTensor {
  aclDataType dtype;
  std::vector<int64_t> dims, strides;  // strides empty: contiguous
  int64_t offset;                      // in elements, from `data`
  void* data;                          // the storage (aclCreateTensor's tensorData)
  Counted counted;
  size_t OffsetBytes() const { return static_cast<size_t>(offset) * ElementSize(dtype); }
};
struct aclScalar {
  aclDataType dtype;
  double real;      // floating types
  int64_t integer;  // integer types and bool
  Counted counted;
};
struct aclIntArray { std::vector<int64_t> values; Counted counted; };
struct aclBoolArray { std::vector<bool> values; Counted counted; };
struct aclFloatArray { std::vector<float> values; Counted counted; };
struct aclTensorList {  // owns its tensors
  std::vector<std::unique_ptr<const aclTensor>> tensors;
  Counted counted;
};

namespace {

// One tensor parameter of an executor: the tensor and where its data is.
struct Slot {
  const aclTensor* tensor;
  size_t offset_bytes;
  void* data;  // element 0 of the view
};
Slot SlotOf(const aclTensor* t) {
  if (t == nullptr) return {nullptr, 0, nullptr};
  const size_t offset = t->OffsetBytes();
  return {t, offset, t->data ? static_cast<char*>(t->data) + offset : nullptr};
}
float* Floats(const Slot& s) { return static_cast<float*>(s.data); }

using Kernel =
    std::function<aclnnStatus(const std::vector<Slot>& in, const std::vector<Slot>& out)>;

}  // namespace

struct aclOpExecutor {
  const char* op;
  std::vector<Slot> inputs, outputs;  // tensor parameters in prototype order, nulls included
  Kernel kernel;                      // the second phase
  bool repeatable = false;
  Counted counted;
};

namespace {

aclnnStatus MakeExecutor(const char* op, std::vector<Slot> inputs, std::vector<Slot> outputs,
                         Kernel kernel, uint64_t* workspace_size, aclOpExecutor** executor) {
  *executor =
      new aclOpExecutor{op, std::move(inputs), std::move(outputs), std::move(kernel), false, {}};
  *workspace_size = 0;
  return ACLNN_SUCCESS;
}

// The second phase of every operator: runs the kernel; frees a one-shot executor.
aclnnStatus Run(const char* op, aclOpExecutor* executor) {
  if (executor == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: executor is null", op);
  const aclnnStatus status = executor->kernel(executor->inputs, executor->outputs);
  if (!executor->repeatable) delete executor;
  return status;
}

aclnnStatus SetTensorAddr(const char* fn, aclOpExecutor* executor, size_t index,
                          aclTensor* tensor, void* addr, bool output) {
  if (executor == nullptr || tensor == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is null", fn, executor ? "tensor" : "executor");
  std::vector<Slot>& slots = output ? executor->outputs : executor->inputs;
  const char* kind = output ? "output" : "input";
  if (index >= slots.size())
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has %zu %s tensors, no index %zu", fn,
                executor->op, slots.size(), kind, index);
  if (slots[index].tensor != tensor)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: tensor is not %s %s tensor %zu", fn, executor->op,
                kind, index);
  slots[index].data = addr ? static_cast<char*>(addr) + slots[index].offset_bytes : nullptr;
  tensor->data = addr;
  return ACLNN_SUCCESS;
}

// ---- The recording operators' log format: Describe(argument).

std::string Describe(bool v) { return v ? "true" : "false"; }
std::string Describe(int8_t v) { return Format("%lld", static_cast<long long>(v)); }
std::string Describe(int32_t v) { return Format("%lld", static_cast<long long>(v)); }
std::string Describe(int64_t v) { return Format("%lld", static_cast<long long>(v)); }
std::string Describe(double v) { return Format("%.17g", v); }
std::string Describe(float v) { return Format("%.9g", static_cast<double>(v)); }
std::string Describe(const char* s) { return s ? "\"" + std::string(s) + "\"" : "null"; }

template <typename Vector>
std::string Join(const Vector& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += (i ? "," : "") + Describe(values[i]);
  return s;
}

std::string DtypeName(aclDataType d) {
  switch (d) {
    case ACL_FLOAT: return "f32";
    case ACL_FLOAT16: return "f16";
    case ACL_BF16: return "bf16";
    case ACL_DOUBLE: return "f64";
    case ACL_INT64: return "i64";
    case ACL_INT32: return "i32";
    case ACL_BOOL: return "bool";
    default: return std::to_string(static_cast<int>(d));
  }
}

std::string Describe(const aclTensor* t) {
  return t ? "tensor(" + DtypeName(t->dtype) + ",[" + Join(t->dims) + "])" : "null";
}
std::string Describe(const aclScalar* s) {
  if (s == nullptr) return "null";
  const std::string value = IsFloating(s->dtype) ? Describe(s->real)
                            : s->dtype == ACL_BOOL ? Describe(s->integer != 0)
                                                   : Describe(s->integer);
  return "scalar(" + DtypeName(s->dtype) + "," + value + ")";
}
std::string Describe(const aclIntArray* a) { return a ? "ints[" + Join(a->values) + "]" : "null"; }
std::string Describe(const aclBoolArray* a) {
  return a ? "bools[" + Join(a->values) + "]" : "null";
}
std::string Describe(const aclFloatArray* a) {
  return a ? "floats[" + Join(a->values) + "]" : "null";
}
std::string Describe(const aclTensorList* l) {
  if (l == nullptr) return "null";
  std::string s;
  for (const auto& t : l->tensors) s += (s.empty() ? "" : ",") + Describe(t.get());
  return "list[" + s + "]";
}

// Describes a first phase's arguments and collects its tensor parameters
// (const: inputs, else outputs; a list's tensors in a row).
struct Recorder {
  std::string line;
  std::vector<Slot> inputs, outputs;

  void Add(const std::string& text) { line += (line.empty() ? "" : "; ") + text; }
  template <typename T>
  void Arg(T value) { Add(Describe(value)); }
  void Arg(const aclTensor* t) { inputs.push_back(SlotOf(t)); Add(Describe(t)); }
  void Arg(aclTensor* t) { outputs.push_back(SlotOf(t)); Add(Describe(t)); }
  void Arg(const aclTensorList* l) { AddList(l, &inputs); }
  void Arg(aclTensorList* l) { AddList(l, &outputs); }
  void AddList(const aclTensorList* l, std::vector<Slot>* slots) {
    if (l != nullptr)
      for (const auto& t : l->tensors) slots->push_back(SlotOf(t.get()));
    Add(Describe(l));
  }
};

template <typename... Args>
aclnnStatus Record(const char* op, uint64_t* workspace_size, aclOpExecutor** executor,
                   Args... args) {
  if (workspace_size == nullptr || executor == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: workspaceSize or executor is null", op);
  Recorder r;
  (r.Arg(args), ...);
  {
    std::lock_guard<std::mutex> lock(log_mutex);
    log_text += (log_text.empty() ? "" : "\n") + r.line;
  }
  return MakeExecutor(op, std::move(r.inputs), std::move(r.outputs),
                      [](const std::vector<Slot>&, const std::vector<Slot>&) { return 0; },
                      workspace_size, executor);
}

// ---- The real operators' checks.

int64_t Product(const int64_t* dims, size_t n) {
  int64_t p = 1;
  for (size_t i = 0; i < n; ++i) p *= dims[i];
  return p;
}

std::string Shape(const aclTensor* t) { return "[" + Join(t->dims) + "]"; }

aclnnStatus CheckFloat32(const char* op, const char* name, const aclTensor* t) {
  if (t == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is null", op, name);
  if (t->dtype != ACL_FLOAT)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has data type %s; only f32 is supported", op,
                name, DtypeName(t->dtype).c_str());
  int64_t contiguous = 1;
  for (size_t d = t->strides.size(); d-- > 0; contiguous *= t->dims[d])
    if (t->dims[d] != 1 && t->strides[d] != contiguous)
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s is not contiguous", op, name);
  return ACLNN_SUCCESS;
}

aclnnStatus CheckShape(const char* op, const char* name, const aclTensor* t,
                       const std::vector<int64_t>& dims) {
  if (t->dims != dims)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s; expected [%s]", op, name,
                Shape(t).c_str(), Join(dims).c_str());
  return ACLNN_SUCCESS;
}

// Null data in a second phase with elements to read or write.
aclnnStatus CheckData(const char* op, int64_t elements, const std::vector<Slot>& in,
                      const std::vector<Slot>& out) {
  for (const auto* slots : {&in, &out})
    for (const Slot& s : *slots)
      if (elements > 0 && s.data == nullptr)
        return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: a tensor has no data", op);
  return ACLNN_SUCCESS;
}

// Arrays and tensor lists: a null `value` only with size 0.
template <typename Array, typename T>
Array* CreateArray(const char* fn, const T* value, uint64_t size) {
  if (value == nullptr && size > 0) {
    Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: value is null", fn);
    return nullptr;
  }
  auto* array = new Array{};
  if (size > 0) array->values.assign(value, value + size);
  return array;
}

template <typename T>
aclnnStatus Destroy(const T* descriptor) {
  delete descriptor;  // a tensor list's tensors with it
  return ACLNN_SUCCESS;
}

#define RETURN_IF_ERROR(expr) \
  if (aclnnStatus status_ = (expr); status_ != ACLNN_SUCCESS) return status_

}  // namespace

// The ABI (aclnn_abi.h), defined with C linkage: a definition that differs
// from its declaration there does not compile.
extern "C" {

// ---- Descriptors.

aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                           const int64_t* stride, int64_t offset, aclFormat, const int64_t*,
                           uint64_t, void* tensorData) {
  if (viewDimsNum > 0 && viewDims == nullptr) {
    Fail(ACLNN_ERR_PARAM_NULLPTR, "aclCreateTensor: viewDims is null");
    return nullptr;
  }
  std::vector<int64_t> dims(viewDims, viewDims + viewDimsNum);
  if (offset < 0 || std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; })) {
    Fail(ACLNN_ERR_PARAM_INVALID, "aclCreateTensor: a negative dimension or offset");
    return nullptr;
  }
  std::vector<int64_t> strides;
  if (stride != nullptr) strides.assign(stride, stride + viewDimsNum);
  return new aclTensor{dataType, std::move(dims), std::move(strides), offset, tensorData, {}};
}

aclnnStatus aclDestroyTensor(const aclTensor* tensor) { return Destroy(tensor); }

aclScalar* aclCreateScalar(void* value, aclDataType dataType) {
  if (value == nullptr) {
    Fail(ACLNN_ERR_PARAM_NULLPTR, "aclCreateScalar: value is null");
    return nullptr;
  }
  double real = 0;
  int64_t integer = 0;
  switch (dataType) {
    case ACL_FLOAT: real = Load<float>(value); break;
    case ACL_DOUBLE: real = Load<double>(value); break;
    case ACL_FLOAT16: real = HalfToFloat(Load<uint16_t>(value)); break;
    case ACL_BF16: real = Bf16ToFloat(Load<uint16_t>(value)); break;
    case ACL_INT64: integer = Load<int64_t>(value); break;
    case ACL_UINT64: integer = static_cast<int64_t>(Load<uint64_t>(value)); break;
    case ACL_INT32: integer = Load<int32_t>(value); break;
    case ACL_UINT32: integer = Load<uint32_t>(value); break;
    case ACL_INT16: integer = Load<int16_t>(value); break;
    case ACL_UINT16: integer = Load<uint16_t>(value); break;
    case ACL_INT8: integer = Load<int8_t>(value); break;
    case ACL_UINT8: integer = Load<uint8_t>(value); break;
    case ACL_BOOL: integer = Load<bool>(value); break;
    default:
      Fail(ACLNN_ERR_PARAM_INVALID, "aclCreateScalar: data type %d is not supported",
           static_cast<int>(dataType));
      return nullptr;
  }
  if (!IsFloating(dataType)) real = static_cast<double>(integer);
  return new aclScalar{dataType, real, integer, {}};
}

aclnnStatus aclDestroyScalar(const aclScalar* scalar) { return Destroy(scalar); }

const char* aclGetRecentErrMsg(void) { return last_error.c_str(); }

aclIntArray* aclCreateIntArray(const int64_t* value, uint64_t size) {
  return CreateArray<aclIntArray>("aclCreateIntArray", value, size);
}
aclnnStatus aclDestroyIntArray(const aclIntArray* array) { return Destroy(array); }
aclBoolArray* aclCreateBoolArray(const bool* value, uint64_t size) {
  return CreateArray<aclBoolArray>("aclCreateBoolArray", value, size);
}
aclnnStatus aclDestroyBoolArray(const aclBoolArray* array) { return Destroy(array); }
aclFloatArray* aclCreateFloatArray(const float* value, uint64_t size) {
  return CreateArray<aclFloatArray>("aclCreateFloatArray", value, size);
}
aclnnStatus aclDestroyFloatArray(const aclFloatArray* array) { return Destroy(array); }
aclTensorList* aclCreateTensorList(const aclTensor* const* value, uint64_t size) {
  if (value == nullptr && size > 0) {
    Fail(ACLNN_ERR_PARAM_NULLPTR, "aclCreateTensorList: value is null");
    return nullptr;
  }
  auto* list = new aclTensorList{};
  for (uint64_t i = 0; i < size; ++i) list->tensors.emplace_back(value[i]);
  return list;
}
aclnnStatus aclDestroyTensorList(const aclTensorList* array) { return Destroy(array); }

// ---- Executor reuse.

aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor* executor) {
  if (executor == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "aclSetAclOpExecutorRepeatable: executor is null");
  executor->repeatable = true;
  return ACLNN_SUCCESS;
}
aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor) { return Destroy(executor); }
aclnnStatus aclSetInputTensorAddr(aclOpExecutor* executor, const size_t index, aclTensor* tensor,
                                  void* addr) {
  return SetTensorAddr("aclSetInputTensorAddr", executor, index, tensor, addr, false);
}
aclnnStatus aclSetOutputTensorAddr(aclOpExecutor* executor, const size_t index,
                                   aclTensor* tensor, void* addr) {
  return SetTensorAddr("aclSetOutputTensorAddr", executor, index, tensor, addr, true);
}

}  // extern "C"

// ---- Operators: first phases, then the second phases (all alike).

EXPORT aclnnStatus aclnnRecordAllKindsGetWorkspaceSize(
    const aclTensor* self, const aclTensor* optionalOther, const aclScalar* alpha,
    const aclScalar* betaOptional, bool flag, int64_t count, double ratio, float scale,
    const aclIntArray* dims, const aclBoolArray* mask, const aclFloatArray* weights,
    const aclTensorList* tensors, const char* mode, int8_t cubeMathType, int32_t group,
    aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return Record("aclnnRecordAllKinds", workspaceSize, executor, self, optionalOther, alpha,
                betaOptional, flag, count, ratio, scale, dims, mask, weights, tensors, mode,
                cubeMathType, group, out);
}

EXPORT aclnnStatus aclnnRecordManyPointersGetWorkspaceSize(
    const aclTensor* a0, const aclTensor* a1, const aclTensor* a2, const aclTensor* a3,
    const aclTensor* a4, const aclTensor* a5, const aclTensor* a6, const aclTensor* a7,
    const aclTensor* a8, const aclTensor* a9, aclTensor* out0, aclTensor* out1,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  return Record("aclnnRecordManyPointers", workspaceSize, executor, a0, a1, a2, a3, a4, a5, a6,
                a7, a8, a9, out0, out1);
}

EXPORT aclnnStatus aclnnRecordInterleavedGetWorkspaceSize(
    const aclTensor* x, double d0, const aclTensor* y, float f0, int64_t i0, double d1, float f1,
    double d2, float f2, double d3, float f3, double d4, float f4, bool b0, double d5,
    aclTensor* out, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return Record("aclnnRecordInterleaved", workspaceSize, executor, x, d0, y, f0, i0, d1, f1, d2,
                f2, d3, f3, d4, f4, b0, d5, out);
}

EXPORT aclnnStatus aclnnRecordListsGetWorkspaceSize(const aclTensorList* inputs,
                                                    const aclTensor* bias,
                                                    aclTensorList* outputs,
                                                    uint64_t* workspaceSize,
                                                    aclOpExecutor** executor) {
  return Record("aclnnRecordLists", workspaceSize, executor, inputs, bias, outputs);
}

// PyTorch's softplus_backward, computed in float as ATen's CPU kernel does.
EXPORT aclnnStatus aclnnSoftplusBackwardGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* self, const aclScalar* beta,
    const aclScalar* threshold, aclTensor* gradInput, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  const char* op = "aclnnSoftplusBackward";
  if (beta == nullptr || threshold == nullptr || workspaceSize == nullptr || executor == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: a null argument", op);
  RETURN_IF_ERROR(CheckFloat32(op, "gradOutput", gradOutput));
  RETURN_IF_ERROR(CheckFloat32(op, "self", self));
  RETURN_IF_ERROR(CheckFloat32(op, "gradInput", gradInput));
  RETURN_IF_ERROR(CheckShape(op, "self", self, gradOutput->dims));
  RETURN_IF_ERROR(CheckShape(op, "gradInput", gradInput, gradOutput->dims));
  const int64_t n = Product(self->dims.data(), self->dims.size());
  const float b = static_cast<float>(beta->real), t = static_cast<float>(threshold->real);
  Kernel kernel = [op, n, b, t](const std::vector<Slot>& in,
                                const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, n, in, out));
    const float *g = Floats(in[0]), *x = Floats(in[1]);
    float* result = Floats(out[0]);
    for (int64_t i = 0; i < n; ++i) {
      const float z = std::exp(x[i] * b);
      result[i] = (x[i] * b) > t ? g[i] : g[i] * z / (z + 1.0f);
    }
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(gradOutput), SlotOf(self)}, {SlotOf(gradInput)},
                      std::move(kernel), workspaceSize, executor);
}

// RMSNorm's backward: x (rows..., D...), gamma (D...), rstd (rows..., 1...).
EXPORT aclnnStatus aclnnRmsNormGradGetWorkspaceSize(
    const aclTensor* dy, const aclTensor* x, const aclTensor* rstd, const aclTensor* gamma,
    const aclTensor* dxOut, const aclTensor* dgammaOut, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  const char* op = "aclnnRmsNormGrad";
  if (workspaceSize == nullptr || executor == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: workspaceSize or executor is null", op);
  const char* names[] = {"dy", "x", "rstd", "gamma", "dxOut", "dgammaOut"};
  const aclTensor* tensors[] = {dy, x, rstd, gamma, dxOut, dgammaOut};
  for (int i = 0; i < 6; ++i) RETURN_IF_ERROR(CheckFloat32(op, names[i], tensors[i]));
  const size_t rank = x->dims.size(), gamma_rank = gamma->dims.size();
  if (gamma_rank > rank)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: gamma %s has a higher rank than x %s", op,
                Shape(gamma).c_str(), Shape(x).c_str());
  const size_t lead = rank - gamma_rank;
  std::vector<int64_t> rstd_dims(x->dims.begin(), x->dims.begin() + lead);
  rstd_dims.resize(rank, 1);
  RETURN_IF_ERROR(CheckShape(op, "gamma", gamma, {x->dims.begin() + lead, x->dims.end()}));
  RETURN_IF_ERROR(CheckShape(op, "dy", dy, x->dims));
  RETURN_IF_ERROR(CheckShape(op, "rstd", rstd, rstd_dims));
  RETURN_IF_ERROR(CheckShape(op, "dxOut", dxOut, x->dims));
  RETURN_IF_ERROR(CheckShape(op, "dgammaOut", dgammaOut, gamma->dims));
  const int64_t rows = Product(x->dims.data(), lead);
  const int64_t n = Product(gamma->dims.data(), gamma_rank);
  Kernel kernel = [op, rows, n](const std::vector<Slot>& in,
                                const std::vector<Slot>& out) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, rows * n, in, out));
    const float *dy = Floats(in[0]), *x = Floats(in[1]), *rstd = Floats(in[2]),
                *gamma = Floats(in[3]);
    float *dx = Floats(out[0]), *dgamma = Floats(out[1]);
    std::vector<double> dgamma_sum(n, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const float *dy_r = dy + r * n, *x_r = x + r * n;
      const double rs = rstd[r];
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += double(dy_r[j]) * gamma[j] * x_r[j];
      const double mean = sum / n;
      for (int64_t j = 0; j < n; ++j) {
        dx[r * n + j] = float(rs * gamma[j] * dy_r[j] - x_r[j] * rs * rs * rs * mean);
        dgamma_sum[j] += double(dy_r[j]) * x_r[j] * rs;
      }
    }
    for (int64_t j = 0; j < n; ++j) dgamma[j] = float(dgamma_sum[j]);
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(dy), SlotOf(x), SlotOf(rstd), SlotOf(gamma)},
                      {SlotOf(dxOut), SlotOf(dgammaOut)}, std::move(kernel), workspaceSize,
                      executor);
}

std::atomic<void*> last_stream{nullptr};  // of the last second phase

#define SECOND_PHASE(Name)                                                                    \
  EXPORT aclnnStatus aclnn##Name(void*, uint64_t, aclOpExecutor* executor,                    \
                                 aclrtStream stream) {                                        \
    last_stream.store(stream);                                                                \
    return Run("aclnn" #Name, executor);                                                      \
  }
SECOND_PHASE(RecordAllKinds)
SECOND_PHASE(RecordManyPointers)
SECOND_PHASE(RecordInterleaved)
SECOND_PHASE(RecordLists)
SECOND_PHASE(SoftplusBackward)
SECOND_PHASE(RmsNormGrad)
#undef SECOND_PHASE

// ---- Test hooks.

// The log; valid until the next call of a recording first phase or jaxAclnnTestReset.
EXPORT const char* jaxAclnnTestRecorded(void) {
  std::lock_guard<std::mutex> lock(log_mutex);
  return log_text.c_str();
}

EXPORT void jaxAclnnTestReset(void) {
  std::lock_guard<std::mutex> lock(log_mutex);
  log_text.clear();
}

EXPORT int64_t jaxAclnnTestLiveDescriptors(void) { return live.load(); }

// The stream the last second phase was given.
EXPORT void* jaxAclnnTestLastStream(void) { return last_stream.load(); }
