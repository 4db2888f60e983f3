// The host provider's common code (provider.cc) that the operators' entry
// points (csrc/ops/<op>.cc) build on: the descriptor types (descriptors.h)
// and the executor type, argument checks with aclnn's error reporting, and
// the first phase of the element-wise operators.
#ifndef JAX_ACLNN_HOST_PROVIDER_H_
#define JAX_ACLNN_HOST_PROVIDER_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "aclnn_abi.h"
#include "host/descriptors.h"
#include "host/kernels.h"
#include "host_stream.h"
#include "operators.h"

namespace jax_aclnn::host {

constexpr int kMaxInputs = 12;  // aclnnFlashAttentionScoreGrad's
constexpr int kMaxOutputs = 4;

}  // namespace jax_aclnn::host

using jax_aclnn::host::View;

struct aclOpExecutor {
  const char* op_name;
  // The second phase's work on the executor's views (set by the first).
  void (*run)(const aclOpExecutor& ex, void* workspace, const JaxAclnnHostStream* stream);
  jax_aclnn::OpId pointwise;
  jax_aclnn::host::PointwiseParams params;
  View inputs[jax_aclnn::host::kMaxInputs];
  View outputs[jax_aclnn::host::kMaxOutputs];
  // The descriptors given to the first phase (aclSetInput/OutputTensorAddr's
  // `tensor` must be one of them).
  const aclTensor* input_tensors[jax_aclnn::host::kMaxInputs];
  const aclTensor* output_tensors[jax_aclnn::host::kMaxOutputs];
  bool has_output[jax_aclnn::host::kMaxOutputs];
  int num_inputs, num_outputs;
  uint64_t workspace_size;
  bool repeatable;
};

namespace jax_aclnn::host {

// Sets the last-error message (aclGetRecentErrMsg) and returns `status`.
aclnnStatus Fail(aclnnStatus status, const char* fmt, ...);
std::string ShapeString(const View& v);
// A floating-point tensor with data, or the status naming what is wrong.
aclnnStatus CheckTensor(const char* op, const char* name, const aclTensor* t);
aclnnStatus CheckSameType(const char* op, const char* a_name, const aclTensor* a,
                          const char* b_name, const aclTensor* b);
// A tensor argument of an aclnn function and its name there.
struct Operand {
  const char* name;
  const aclTensor* tensor;
};

// The tensor's data type is one of `allowed` (after CheckTensor).
aclnnStatus CheckDataType(const char* op, const char* name, const aclTensor* t,
                          std::initializer_list<aclDataType> allowed);
// The tensor's shape is `dims` (of rank `rank`).
aclnnStatus CheckDims(const char* op, const char* name, const aclTensor* t, const int64_t* dims,
                      int rank);
// The tensor's view is contiguous (row-major, no gaps).
aclnnStatus CheckContiguous(const char* op, const char* name, const aclTensor* t);
// The second phase's work on an executor's views.
using ExecutorRun = void (*)(const aclOpExecutor& ex, void* workspace,
                             const JaxAclnnHostStream* stream);
// The executor of `run` on these tensors (in the first phase's order; null:
// an optional tensor not given), with the operator's parameters and the
// workspace it needs.
aclnnStatus MakeExecutor(const char* op, ExecutorRun run, const PointwiseParams& params,
                         std::initializer_list<const aclTensor*> inputs,
                         std::initializer_list<const aclTensor*> outputs,
                         uint64_t workspace_size, uint64_t* workspaceSize,
                         aclOpExecutor** executor);

// The first phase of the element-wise operators: checks the tensors (the
// inputs broadcast to `out`, or have its shape if `same_shape`) and makes
// the executor.
aclnnStatus PointwiseGetWorkspaceSize(const char* op, OpId kind,
                                      const PointwiseParams& params,
                                      std::initializer_list<Operand> operands, Operand out,
                                      bool same_shape, uint64_t* workspace_size,
                                      aclOpExecutor** executor);

}  // namespace jax_aclnn::host

#endif  // JAX_ACLNN_HOST_PROVIDER_H_
