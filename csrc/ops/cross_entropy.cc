// The cross-entropy operators' first phases on the host provider.
// aclnnCrossEntropyLoss and aclnnCrossEntropyLossGrad (the kernels:
// host/cross_entropy_kernel.cc), as CANN's ops-nn pages give them
// (loss/cross_entropy_loss/docs/aclnnCrossEntropyLoss.md,
// loss/cross_entropy_loss_grad/docs/aclnnCrossEntropyLossGrad.md): input
// (N, C) in FLOAT32, FLOAT16 or BFLOAT16 and the outputs in its type, target
// (N) INT64 or INT32, weightOptional (C) FLOAT32; reduction "mean" (also
// for a null one), "sum" or "none"; labelSmoothing in [0, 1]. The z-loss
// (lseSquareScaleForZloss, returnZloss and its tensors) is not computed,
// as the pages say of CANN's: its outputs must be given, 0 elements or
// their documented shapes.
#include <cstdint>
#include <cstring>

#include "host/provider.h"
#include "host/rows.h"

namespace jax_aclnn::host {
namespace {

aclnnStatus ParseReduction(const char* op, const char* s, Reduction* r) {
  if (s == nullptr || std::strcmp(s, "mean") == 0) *r = Reduction::kMean;
  else if (std::strcmp(s, "sum") == 0) *r = Reduction::kSum;
  else if (std::strcmp(s, "none") == 0) *r = Reduction::kNone;
  else
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: reductionOptional \"%s\" is not \"mean\", \"sum\" "
                "or \"none\"", op, s);
  return ACLNN_SUCCESS;
}

// The attributes both operators take.
aclnnStatus CheckAttributes(const char* op, const char* reduction, int64_t ignore_index,
                            double label_smoothing, CrossEntropyAttrs* a) {
  if (aclnnStatus st = ParseReduction(op, reduction, &a->reduction)) return st;
  if (!(label_smoothing >= 0 && label_smoothing <= 1))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: labelSmoothing %g is outside [0, 1]", op,
                label_smoothing);
  a->ignore_index = ignore_index;
  a->label_smoothing = static_cast<float>(label_smoothing);
  return ACLNN_SUCCESS;
}

// logits (N, C) with C > 0, rows walkable with one stride; target (N) of
// INT64 or INT32 (the grad's page lists INT64: JAX without x64 has int32
// class indices); weight (C) FLOAT32 or null.
aclnnStatus CheckClasses(const char* op, const char* name, const aclTensor* logits,
                         const aclTensor* target, const aclTensor* weight) {
  if (aclnnStatus st = CheckTensor(op, name, logits)) return st;
  const View& v = logits->view;
  if (v.rank != 2 || v.dims[1] == 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s; expected (N, C) with C > 0", op,
                name, ShapeString(v).c_str());
  int64_t stride;
  if (!RowElementStride(v, 1, &stride))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s's rows are not laid out with one stride", op,
                name);
  if (target == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: target is a null pointer", op);
  const aclDataType t = target->view.dtype;
  if (t != ACL_INT64 && t != ACL_INT32)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: target has data type %s; expected INT64 or INT32",
                op, DataTypeName(t));
  if (target->view.NumElements() > 0 && target->view.data == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: target has no data", op);
  if (aclnnStatus st = CheckDims(op, "target", target, v.dims, 1)) return st;
  if (weight == nullptr) return ACLNN_SUCCESS;
  if (aclnnStatus st = CheckTensor(op, "weightOptional", weight)) return st;
  if (aclnnStatus st = CheckDataType(op, "weightOptional", weight, {ACL_FLOAT})) return st;
  return CheckDims(op, "weightOptional", weight, v.dims + 1, 1);
}

// A tensor of `like`'s type and the given shape (rank `rank`), each row of
// it walkable with one stride.
aclnnStatus CheckOutput(const char* op, const char* name, const aclTensor* t, const char* like_name,
                        const aclTensor* like, const int64_t* dims, int rank) {
  if (aclnnStatus st = CheckTensor(op, name, t)) return st;
  if (aclnnStatus st = CheckSameType(op, like_name, like, name, t)) return st;
  if (aclnnStatus st = CheckDims(op, name, t, dims, rank)) return st;
  int64_t stride;
  if (!RowElementStride(t->view, rank > 1 ? 1 : 0, &stride))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s's rows are not laid out with one stride", op,
                name);
  return ACLNN_SUCCESS;
}

// A z-loss tensor: given, of input's type, 0 elements or of its shape.
aclnnStatus CheckZloss(const char* op, const char* name, const aclTensor* t, const char* like_name,
                       const aclTensor* like, int64_t size, bool given) {
  if (!given && t == nullptr) return ACLNN_SUCCESS;
  if (aclnnStatus st = CheckTensor(op, name, t)) return st;
  if (aclnnStatus st = CheckSameType(op, like_name, like, name, t)) return st;
  if (t->view.NumElements() == 0) return ACLNN_SUCCESS;
  return CheckDims(op, name, t, &size, 1);
}

void RunLossExecutor(const aclOpExecutor& ex, void* workspace, const JaxAclnnHostStream* stream) {
  RunCrossEntropyLoss(ex.inputs[0], ex.inputs[1],
                      ex.input_tensors[2] != nullptr ? &ex.inputs[2] : nullptr,
                      ex.params.As<CrossEntropyAttrs>(), ex.outputs[0], ex.outputs[1], workspace,
                      stream);
}

void RunGradExecutor(const aclOpExecutor& ex, void* workspace, const JaxAclnnHostStream* stream) {
  RunCrossEntropyLossGrad(ex.inputs[0], ex.inputs[1], ex.inputs[2],
                          ex.input_tensors[3] != nullptr ? &ex.inputs[3] : nullptr,
                          ex.params.As<CrossEntropyAttrs>(), ex.outputs[0], workspace, stream);
}

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the provider's common code

// lossOut = the rows' losses ("none", (N)) or their sum or weighted mean
// ((1)); logProbOut = log_softmax(input) (kernels: cross_entropy_kernel.cc).
extern "C" aclnnStatus aclnnCrossEntropyLossGetWorkspaceSize(
    const aclTensor* input, const aclTensor* target, const aclTensor* weightOptional,
    char* reductionOptional, int64_t ignoreIndex, double labelSmoothing,
    double lseSquareScaleForZloss, bool returnZloss, const aclTensor* lossOut,
    const aclTensor* logProbOut, const aclTensor* zlossOut, const aclTensor* lseForZlossOut,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnCrossEntropyLoss";
  (void)returnZloss;
  if (aclnnStatus st = CheckClasses(op, "input", input, target, weightOptional)) return st;
  CrossEntropyAttrs a;
  if (aclnnStatus st = CheckAttributes(op, reductionOptional, ignoreIndex, labelSmoothing, &a))
    return st;
  if (!(lseSquareScaleForZloss >= 0 && lseSquareScaleForZloss < 1))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: lseSquareScaleForZloss %g is outside [0, 1)", op,
                lseSquareScaleForZloss);
  const View& v = input->view;
  const int64_t loss_size = a.reduction == Reduction::kNone ? v.dims[0] : 1;
  if (aclnnStatus st = CheckOutput(op, "lossOut", lossOut, "input", input, &loss_size, 1))
    return st;
  if (aclnnStatus st = CheckOutput(op, "logProbOut", logProbOut, "input", input, v.dims, 2))
    return st;
  if (aclnnStatus st = CheckZloss(op, "zlossOut", zlossOut, "input", input, loss_size, true))
    return st;
  if (aclnnStatus st =
          CheckZloss(op, "lseForZlossOut", lseForZlossOut, "input", input, v.dims[0], true))
    return st;
  return MakeExecutor(op, RunLossExecutor, PointwiseParams::Of(a),
                      {input, target, weightOptional},
                      {lossOut, logProbOut, zlossOut, lseForZlossOut},
                      CrossEntropyWorkspaceSize(v, /*forward=*/true), workspaceSize, executor);
}

// out = the gradient of the loss with respect to input, from logProb
// (kernels: cross_entropy_kernel.cc). gradLoss in logProb's type: (N) for
// "none", else 0-D (the page) or (1) (torch_npu's loss).
extern "C" aclnnStatus aclnnCrossEntropyLossGradGetWorkspaceSize(
    const aclTensor* gradLoss, const aclTensor* logProb, const aclTensor* target,
    const aclTensor* weightOptional, const aclTensor* gradZlossOptional,
    const aclTensor* lseForZlossOptional, char* reductionOptional, int64_t ignoreIndex,
    double labelSmoothing, double lseSquareScaleForZloss, const aclTensor* out,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnCrossEntropyLossGrad";
  (void)lseSquareScaleForZloss;
  if (aclnnStatus st = CheckClasses(op, "logProb", logProb, target, weightOptional)) return st;
  CrossEntropyAttrs a;
  if (aclnnStatus st = CheckAttributes(op, reductionOptional, ignoreIndex, labelSmoothing, &a))
    return st;
  const View& v = logProb->view;
  if (aclnnStatus st = CheckTensor(op, "gradLoss", gradLoss)) return st;
  if (aclnnStatus st = CheckSameType(op, "logProb", logProb, "gradLoss", gradLoss)) return st;
  const int64_t one = 1;
  if (a.reduction == Reduction::kNone) {
    if (aclnnStatus st = CheckOutput(op, "gradLoss", gradLoss, "logProb", logProb, v.dims, 1))
      return st;
  } else if (gradLoss->view.rank != 0) {
    if (aclnnStatus st = CheckDims(op, "gradLoss", gradLoss, &one, 1)) return st;
  }
  if (aclnnStatus st = CheckOutput(op, "out", out, "logProb", logProb, v.dims, 2)) return st;
  if (aclnnStatus st = CheckZloss(op, "gradZlossOptional", gradZlossOptional, "logProb", logProb,
                                  a.reduction == Reduction::kNone ? v.dims[0] : 1, false))
    return st;
  if (aclnnStatus st = CheckZloss(op, "lseForZlossOptional", lseForZlossOptional, "logProb",
                                  logProb, v.dims[0], false))
    return st;
  return MakeExecutor(op, RunGradExecutor, PointwiseParams::Of(a),
                      {gradLoss, logProb, target, weightOptional, gradZlossOptional,
                       lseForZlossOptional},
                      {out}, CrossEntropyWorkspaceSize(v, /*forward=*/false), workspaceSize,
                      executor);
}
