// What the test-only aclnn provider's files share (libaclnn_test_provider.so:
// test_provider.cc, recording_operators.cc, test_operators.cc): its
// descriptor and executor types, its error reporting, and the executor its
// first phases make and its second phases run.
#ifndef JAX_ACLNN_TESTING_TEST_PROVIDER_H_
#define JAX_ACLNN_TESTING_TEST_PROVIDER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "aclnn_abi.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace jax_aclnn::test_provider {

// A member of every descriptor and executor: keeps the count of those alive
// (jaxAclnnTestLiveDescriptors) up to date.
struct Counted {
  Counted();
  Counted(const Counted&);
  ~Counted();
};

size_t ElementSize(aclDataType dtype);
bool IsFloating(aclDataType dtype);
std::string DtypeName(aclDataType dtype);  // f32, f16, ..., or the number

// printf into a std::string; Fail also makes it the last error message
// (aclGetRecentErrMsg) and returns `status`.
__attribute__((format(printf, 1, 2))) std::string Format(const char* fmt, ...);
__attribute__((format(printf, 2, 3))) aclnnStatus Fail(aclnnStatus status, const char* fmt, ...);

}  // namespace jax_aclnn::test_provider

// The descriptors and the executor (the ABI's opaque structs).
struct aclTensor {
  aclDataType dtype;
  std::vector<int64_t> dims, strides;  // strides empty: contiguous
  int64_t offset;                      // in elements, from `data`
  void* data;                          // the storage (aclCreateTensor's tensorData)
  jax_aclnn::test_provider::Counted counted;
  size_t OffsetBytes() const {
    return static_cast<size_t>(offset) * jax_aclnn::test_provider::ElementSize(dtype);
  }
};
struct aclScalar {
  aclDataType dtype;
  double real;      // floating types
  int64_t integer;  // integer types and bool
  jax_aclnn::test_provider::Counted counted;
};
struct aclIntArray { std::vector<int64_t> values; jax_aclnn::test_provider::Counted counted; };
struct aclBoolArray { std::vector<bool> values; jax_aclnn::test_provider::Counted counted; };
struct aclFloatArray { std::vector<float> values; jax_aclnn::test_provider::Counted counted; };
struct aclTensorList {  // owns its tensors
  std::vector<std::unique_ptr<const aclTensor>> tensors;
  jax_aclnn::test_provider::Counted counted;
};

namespace jax_aclnn::test_provider {

// One tensor parameter of an executor: the tensor and where its data is.
struct Slot {
  const aclTensor* tensor;
  size_t offset_bytes;
  void* data;  // element 0 of the view
};
Slot SlotOf(const aclTensor* t);
inline float* Floats(const Slot& s) { return static_cast<float*>(s.data); }

using Kernel =
    std::function<aclnnStatus(const std::vector<Slot>& in, const std::vector<Slot>& out)>;

}  // namespace jax_aclnn::test_provider

struct aclOpExecutor {
  const char* op;
  std::vector<jax_aclnn::test_provider::Slot> inputs, outputs;  // prototype order, nulls included
  jax_aclnn::test_provider::Kernel kernel;                      // the second phase
  bool repeatable = false;
  jax_aclnn::test_provider::Counted counted;
};

namespace jax_aclnn::test_provider {

// A first phase's executor: `kernel` runs on the tensors' data in the second.
aclnnStatus MakeExecutor(const char* op, std::vector<Slot> inputs, std::vector<Slot> outputs,
                         Kernel kernel, uint64_t* workspace_size, aclOpExecutor** executor);

// The second phase of every operator: notes `stream` (jaxAclnnTestLastStream),
// runs the kernel and frees a one-shot executor.
aclnnStatus Run(const char* op, aclOpExecutor* executor, aclrtStream stream);

template <typename Vector, typename Describe>
std::string Join(const Vector& values, const Describe& describe) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += (i ? "," : "") + describe(values[i]);
  return s;
}

}  // namespace jax_aclnn::test_provider

#define JAX_ACLNN_TEST_SECOND_PHASE(Name)                                                  \
  EXPORT aclnnStatus aclnn##Name(void*, uint64_t, aclOpExecutor* executor,                 \
                                 aclrtStream stream) {                                     \
    return jax_aclnn::test_provider::Run("aclnn" #Name, executor, stream);                 \
  }

#define RETURN_IF_ERROR(expr) \
  if (aclnnStatus status_ = (expr); status_ != ACLNN_SUCCESS) return status_

#endif  // JAX_ACLNN_TESTING_TEST_PROVIDER_H_
