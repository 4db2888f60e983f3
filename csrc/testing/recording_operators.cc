// The test provider's recording operators (aclnnRecord*, test_provider.h):
// each first phase appends one line to a log describing every argument it
// received, so a test can check that a generic caller (libffi, argument
// list assembled at run time) delivers exactly the declared values; their
// second phases do nothing. jaxAclnnTestRecorded / jaxAclnnTestReset read
// and clear the log.
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "testing/recording.h"

namespace jax_aclnn::test_provider {
namespace {

std::mutex log_mutex;
std::string log_text;  // the recording operators' lines, separated by '\n'

template <typename Vector>
std::string Join(const Vector& values) {
  return test_provider::Join(values, [](auto value) { return Describe(value); });
}

}  // namespace

// ---- The log format: Describe(argument).

std::string Describe(bool v) { return v ? "true" : "false"; }
std::string Describe(int8_t v) { return Format("%lld", static_cast<long long>(v)); }
std::string Describe(int32_t v) { return Format("%lld", static_cast<long long>(v)); }
std::string Describe(int64_t v) { return Format("%lld", static_cast<long long>(v)); }
std::string Describe(double v) { return Format("%.17g", v); }
std::string Describe(float v) { return Format("%.9g", static_cast<double>(v)); }
std::string Describe(const char* s) { return s ? "\"" + std::string(s) + "\"" : "null"; }

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

aclnnStatus MakeRecordingExecutor(const char* op, Recorder recorded, Kernel kernel,
                                  uint64_t* workspace_size, aclOpExecutor** executor) {
  if (workspace_size == nullptr || executor == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: workspaceSize or executor is null", op);
  {
    std::lock_guard<std::mutex> lock(log_mutex);
    log_text += (log_text.empty() ? "" : "\n") + recorded.line;
  }
  return MakeExecutor(op, std::move(recorded.inputs), std::move(recorded.outputs),
                      std::move(kernel), workspace_size, executor);
}

namespace {

template <typename... Args>
aclnnStatus Record(const char* op, uint64_t* workspace_size, aclOpExecutor** executor,
                   Args... args) {
  Recorder r;
  (r.Arg(args), ...);
  return MakeRecordingExecutor(
      op, std::move(r), [](const std::vector<Slot>&, const std::vector<Slot>&) { return 0; },
      workspace_size, executor);
}

}  // namespace
}  // namespace jax_aclnn::test_provider

using jax_aclnn::test_provider::Record;

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

JAX_ACLNN_TEST_SECOND_PHASE(RecordAllKinds)
JAX_ACLNN_TEST_SECOND_PHASE(RecordManyPointers)
JAX_ACLNN_TEST_SECOND_PHASE(RecordInterleaved)
JAX_ACLNN_TEST_SECOND_PHASE(RecordLists)

// The log; valid until the next call of a recording first phase or jaxAclnnTestReset.
EXPORT const char* jaxAclnnTestRecorded(void) {
  std::lock_guard<std::mutex> lock(jax_aclnn::test_provider::log_mutex);
  return jax_aclnn::test_provider::log_text.c_str();
}

EXPORT void jaxAclnnTestReset(void) {
  std::lock_guard<std::mutex> lock(jax_aclnn::test_provider::log_mutex);
  jax_aclnn::test_provider::log_text.clear();
}
