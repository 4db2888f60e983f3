// aclnnBatchNormReduceBackward on the host provider: its first phase and the
// work of its second (the second phase itself is the same for every
// operator, host/provider.cc).
#include "host/dtype.h"
#include "host/provider.h"

namespace jax_aclnn::host {
namespace {

// A (C,) vector of the batch-norm reduction: in the input's dtype, FLOAT or
// FLOAT16, each vector on its own (mixed precision: CANN takes FLOAT and
// FLOAT16 statistics, weight and results whatever the input's dtype).
aclnnStatus CheckChannelVector(const char* op, const char* name, const aclTensor* t,
                               int64_t channels, aclDataType dtype) {
  if (aclnnStatus st = CheckTensor(op, name, t)) return st;
  if (t->view.rank != 1 || t->view.dims[0] != channels)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s, expected [%lld]", op, name,
                ShapeString(t->view).c_str(), static_cast<long long>(channels));
  const aclDataType d = t->view.dtype;
  if (d != dtype && d != ACL_FLOAT && d != ACL_FLOAT16)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has data type %s, expected %s, %s or %s", op,
                name, DataTypeName(d), DataTypeName(dtype), DataTypeName(ACL_FLOAT),
                DataTypeName(ACL_FLOAT16));
  return ACLNN_SUCCESS;
}

// Dimensions 2.. of an (N, C, ...) tensor must be walkable with one stride.
bool InnerDimsCollapse(const View& v) {
  for (int d = 2; d + 1 < v.rank; ++d)
    if (v.strides[d] != v.strides[d + 1] * v.dims[d + 1]) return false;
  return true;
}

void RunBatchNormReduceExecutor(const aclOpExecutor& ex, void* workspace,
                                const JaxAclnnHostStream* stream) {
  const View* outs[kMaxOutputs];
  for (int k = 0; k < kMaxOutputs; ++k) outs[k] = ex.has_output[k] ? &ex.outputs[k] : nullptr;
  RunBatchNormReduce(ex.inputs[0], ex.inputs[1], ex.inputs[2], ex.inputs[3], outs, workspace,
                     stream);
}

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn;        // NOLINT: the operator list
using namespace jax_aclnn::host;  // NOLINT: the provider's common code

extern "C" aclnnStatus aclnnBatchNormReduceBackwardGetWorkspaceSize(
    const aclTensor* gradOut, const aclTensor* input, const aclTensor* mean,
    const aclTensor* invstd, const aclTensor* weight, const bool inputG, const bool weightG,
    const bool biasG, aclTensor* sumDy, aclTensor* sumDyXmu, aclTensor* gradWeight,
    aclTensor* gradBias, uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = kAclnnOpNames[kBatchNormReduceBackward];
  if (workspaceSize == nullptr || executor == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: workspaceSize or executor is a null pointer", op);
  if (aclnnStatus st = CheckTensor(op, "gradOut", gradOut)) return st;
  if (aclnnStatus st = CheckTensor(op, "input", input)) return st;
  if (aclnnStatus st = CheckSameType(op, "gradOut", gradOut, "input", input)) return st;
  const View& x = input->view;
  if (x.rank < 2)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: input must have rank 2 to 8, got shape %s", op,
                ShapeString(x).c_str());
  bool same = gradOut->view.rank == x.rank;
  for (int d = 0; same && d < x.rank; ++d) same = gradOut->view.dims[d] == x.dims[d];
  if (!same)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: gradOut%s and input%s must have the same shape",
                op, ShapeString(gradOut->view).c_str(), ShapeString(x).c_str());
  if (!InnerDimsCollapse(x) || !InnerDimsCollapse(gradOut->view))
    return Fail(ACLNN_ERR_PARAM_INVALID,
                "%s: dimensions 2.. of input and gradOut must be laid out contiguously", op);
  const int64_t C = x.dims[1];
  const char* vec_names[] = {"mean", "invstd", "weight"};
  const aclTensor* vecs[] = {mean, invstd, weight};
  for (int k = 0; k < 3; ++k) {
    if (k == 2 && weight == nullptr) continue;  // weight is optional
    if (aclnnStatus st = CheckChannelVector(op, vec_names[k], vecs[k], C, x.dtype)) return st;
  }
  const char* out_names[] = {"sumDy", "sumDyXmu", "gradWeight", "gradBias"};
  aclTensor* outs[] = {sumDy, sumDyXmu, gradWeight, gradBias};
  const bool wanted[] = {inputG, inputG, weightG, biasG};
  for (int k = 0; k < 4; ++k) {
    if (!wanted[k]) continue;
    if (outs[k] == nullptr)
      return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is a null pointer but its mask is set", op,
                  out_names[k]);
    if (aclnnStatus st = CheckChannelVector(op, out_names[k], outs[k], C, x.dtype)) return st;
  }
  auto* ex = new (std::nothrow) aclOpExecutor{};
  if (ex == nullptr) return Fail(ACLNN_ERR_INNER, "%s: out of memory", op);
  ex->op_name = op;
  ex->run = RunBatchNormReduceExecutor;
  ex->num_inputs = 5;
  ex->num_outputs = 4;
  const aclTensor* all_inputs[] = {gradOut, input, mean, invstd, weight};
  for (int k = 0; k < 5; ++k)
    if (all_inputs[k] != nullptr) ex->inputs[k] = all_inputs[k]->view;
  std::copy(all_inputs, all_inputs + 5, ex->input_tensors);
  std::copy(outs, outs + 4, ex->output_tensors);
  for (int k = 0; k < 4; ++k) {
    ex->has_output[k] = wanted[k];
    if (wanted[k]) ex->outputs[k] = outs[k]->view;
  }
  ex->workspace_size = BatchNormReduceWorkspaceSize(x);
  *workspaceSize = ex->workspace_size;
  *executor = ex;
  return ACLNN_SUCCESS;
}
