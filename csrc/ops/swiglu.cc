// The SwiGLU operators' first phases on the host provider. aclnnSwiGlu
// and aclnnSwiGluGrad (the kernels: host/swiglu_kernel.cc), as CANN's
// ops-nn pages give them (activation/swi_glu/docs/aclnnSwiGlu.md,
// activation/swi_glu_grad/docs/aclnnSwiGluGrad.md): x split in halves A
// and B along dim (in [-rank, rank - 1], of even size), every tensor of
// one type (FLOAT32, FLOAT16 or BFLOAT16) and contiguous.
#include <cstdint>

#include "host/provider.h"
#include "host/rows.h"

namespace jax_aclnn::host {
namespace {

// x viewed as [outer, 2, run]: block o holds A's run, then B's.
struct SwiGluParams {
  int64_t outer, run;
};

// x's split along dim, and x's shape with dim halved.
aclnnStatus CheckSplit(const char* op, const aclTensor* x, int64_t dim, SwiGluParams* p,
                       View* halved) {
  const View& v = x->view;
  if (v.rank < 1)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: x has shape []; its rank must be at least 1", op);
  if (dim < -v.rank || dim >= v.rank)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: dim %lld is out of range for x %s", op,
                static_cast<long long>(dim), ShapeString(v).c_str());
  const int d = static_cast<int>(dim < 0 ? dim + v.rank : dim);
  if (v.dims[d] % 2 != 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: x %s has an odd size along dim %lld", op,
                ShapeString(v).c_str(), static_cast<long long>(dim));
  *halved = v;
  halved->dims[d] /= 2;
  p->outer = DimsProduct(v, 0, d);
  p->run = DimsProduct(*halved, d, v.rank);
  return CheckContiguous(op, "x", x);
}

// A contiguous tensor of x's type and the given shape.
aclnnStatus CheckOperand(const char* op, const char* name, const aclTensor* t, const aclTensor* x,
                         const View& shape) {
  if (aclnnStatus st = CheckTensor(op, name, t)) return st;
  if (aclnnStatus st = CheckSameType(op, "x", x, name, t)) return st;
  if (aclnnStatus st = CheckDims(op, name, t, shape.dims, shape.rank)) return st;
  return CheckContiguous(op, name, t);
}

void RunSwiGluExecutor(const aclOpExecutor& ex, void*, const JaxAclnnHostStream* stream) {
  const auto p = ex.params.As<SwiGluParams>();
  RunSwiGlu(ex.inputs[0], p.outer, p.run, ex.outputs[0], stream);
}

void RunSwiGluGradExecutor(const aclOpExecutor& ex, void*, const JaxAclnnHostStream* stream) {
  const auto p = ex.params.As<SwiGluParams>();
  RunSwiGluGrad(ex.inputs[0], ex.inputs[1], p.outer, p.run, ex.outputs[0], stream);
}

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the provider's common code

extern "C" aclnnStatus aclnnSwiGluGetWorkspaceSize(const aclTensor* x, int64_t dim,
                                                   const aclTensor* out, uint64_t* workspaceSize,
                                                   aclOpExecutor** executor) {
  const char* op = "aclnnSwiGlu";
  if (aclnnStatus st = CheckTensor(op, "x", x)) return st;
  SwiGluParams p;
  View halved;
  if (aclnnStatus st = CheckSplit(op, x, dim, &p, &halved)) return st;
  if (aclnnStatus st = CheckOperand(op, "out", out, x, halved)) return st;
  return MakeExecutor(op, RunSwiGluExecutor, PointwiseParams::Of(p), {x}, {out}, 0,
                      workspaceSize, executor);
}

extern "C" aclnnStatus aclnnSwiGluGradGetWorkspaceSize(const aclTensor* yGrad, const aclTensor* x,
                                                       int64_t dim, const aclTensor* out,
                                                       uint64_t* workspaceSize,
                                                       aclOpExecutor** executor) {
  const char* op = "aclnnSwiGluGrad";
  if (aclnnStatus st = CheckTensor(op, "x", x)) return st;
  SwiGluParams p;
  View halved;
  if (aclnnStatus st = CheckSplit(op, x, dim, &p, &halved)) return st;
  if (aclnnStatus st = CheckOperand(op, "yGrad", yGrad, x, halved)) return st;
  if (aclnnStatus st = CheckOperand(op, "out", out, x, x->view)) return st;
  return MakeExecutor(op, RunSwiGluGradExecutor, PointwiseParams::Of(p), {yGrad, x}, {out}, 0,
                      workspaceSize, executor);
}
