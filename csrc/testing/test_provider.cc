// A test-only aclnn provider (libaclnn_test_provider.so), self-contained: its
// own descriptors (aclnn_abi.h's ABI, array and executor-reuse functions,
// this file) and a few operators that are not in operators.h, for
// tests/test_declare.py and tests/test_library_provider.py:
//  - recording operators (aclnnRecord*, recording_operators.cc): each first
//    phase appends one line to a log describing every argument it received,
//    so a test can check that a generic caller (libffi, argument list
//    assembled at run time) delivers exactly the declared values; their
//    second phases do nothing;
//  - aclnnSoftplusBackward and aclnnRmsNormGrad, float32 on host memory
//    (test_operators.cc).
// jaxAclnnTestRecorded / jaxAclnnTestReset read and clear the log and
// jaxAclnnTestLiveDescriptors counts the descriptors and executors alive,
// jaxAclnnTestLastStream is the last second phase's stream.
//
// Variants of it, the same sources built with one of these defined, are
// user libraries that are providers of their own (ffi/provider.h):
//  - JAX_ACLNN_TEST_NO_EXECUTOR_REUSE (libaclnn_test_provider_no_reuse.so):
//    without the executor-reuse functions, so every call runs both phases;
//  - JAX_ACLNN_TEST_PARTIAL (libaclnn_test_partial_provider.so): without
//    aclDestroyScalar and aclCreateFloatArray, a provider the loader refuses.
#include "testing/test_provider.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace jax_aclnn::test_provider {
namespace {

std::atomic<int64_t> live{0};  // descriptors and executors not yet destroyed
std::atomic<void*> last_stream{nullptr};  // of the last second phase
thread_local std::string last_error;

std::string VFormat(const char* fmt, va_list args) {
  char buf[512];
  std::vsnprintf(buf, sizeof buf, fmt, args);
  return buf;
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

// Arrays: a null `value` only with size 0.
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

}  // namespace

Counted::Counted() { ++live; }
Counted::Counted(const Counted&) { ++live; }
Counted::~Counted() { --live; }

std::string Format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = VFormat(fmt, args);
  va_end(args);
  return s;
}

aclnnStatus Fail(aclnnStatus status, const char* fmt, ...) {
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

bool IsFloating(aclDataType d) {
  return d == ACL_FLOAT || d == ACL_DOUBLE || d == ACL_FLOAT16 || d == ACL_BF16;
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

Slot SlotOf(const aclTensor* t) {
  if (t == nullptr) return {nullptr, 0, nullptr};
  const size_t offset = t->OffsetBytes();
  return {t, offset, t->data ? static_cast<char*>(t->data) + offset : nullptr};
}

aclnnStatus MakeExecutor(const char* op, std::vector<Slot> inputs, std::vector<Slot> outputs,
                         Kernel kernel, uint64_t* workspace_size, aclOpExecutor** executor) {
  *executor =
      new aclOpExecutor{op, std::move(inputs), std::move(outputs), std::move(kernel), false, {}};
  *workspace_size = 0;
  return ACLNN_SUCCESS;
}

aclnnStatus Run(const char* op, aclOpExecutor* executor, aclrtStream stream) {
  last_stream.store(stream);
  if (executor == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: executor is null", op);
  const aclnnStatus status = executor->kernel(executor->inputs, executor->outputs);
  if (!executor->repeatable) delete executor;
  return status;
}

namespace {

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

}  // namespace
}  // namespace jax_aclnn::test_provider

using namespace jax_aclnn::test_provider;  // NOLINT: the C ABI's definitions below

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

#ifndef JAX_ACLNN_TEST_PARTIAL
aclnnStatus aclDestroyScalar(const aclScalar* scalar) { return Destroy(scalar); }
#endif

const char* aclGetRecentErrMsg(void) { return last_error.c_str(); }

aclIntArray* aclCreateIntArray(const int64_t* value, uint64_t size) {
  return CreateArray<aclIntArray>("aclCreateIntArray", value, size);
}
aclnnStatus aclDestroyIntArray(const aclIntArray* array) { return Destroy(array); }
aclBoolArray* aclCreateBoolArray(const bool* value, uint64_t size) {
  return CreateArray<aclBoolArray>("aclCreateBoolArray", value, size);
}
aclnnStatus aclDestroyBoolArray(const aclBoolArray* array) { return Destroy(array); }
#ifndef JAX_ACLNN_TEST_PARTIAL
aclFloatArray* aclCreateFloatArray(const float* value, uint64_t size) {
  return CreateArray<aclFloatArray>("aclCreateFloatArray", value, size);
}
#endif
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
#ifndef JAX_ACLNN_TEST_NO_EXECUTOR_REUSE

aclnnStatus aclSetAclOpExecutorRepeatable(aclOpExecutor* executor) {
  if (executor == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "aclSetAclOpExecutorRepeatable: executor is null");
  executor->repeatable = true;
  return ACLNN_SUCCESS;
}
aclnnStatus aclDestroyAclOpExecutor(aclOpExecutor* executor) { return Destroy(executor); }
ACLNN_DEFINE_SET_TENSOR_ADDR(SetTensorAddr)
#endif  // JAX_ACLNN_TEST_NO_EXECUTOR_REUSE

}  // extern "C"

// ---- Test hooks.

EXPORT int64_t jaxAclnnTestLiveDescriptors(void) { return live.load(); }

// The stream the last second phase was given.
EXPORT void* jaxAclnnTestLastStream(void) { return last_stream.load(); }
