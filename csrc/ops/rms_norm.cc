// The RMSNorm operators' first phases on the host provider. aclnnRmsNorm,
// aclnnAddRmsNorm and aclnnRmsNormGrad (the kernels:
// host/rms_norm_kernel.cc); shapes and data types as CANN's ops-nn pages
// give them (norm/rms_norm/docs/aclnnRmsNorm.md,
// norm/add_rms_norm/docs/aclnnAddRmsNorm.md,
// norm/rms_norm_grad/docs/aclnnRmsNormGrad.md): x in FLOAT32, FLOAT16 or
// BFLOAT16, rstd and dgamma FLOAT32; gamma in x's type or FLOAT32 (mixed
// precision) for RmsNorm and RmsNormGrad, in x1's for AddRmsNorm.
#include <cstdint>

#include "host/provider.h"
#include "host/rows.h"

namespace jax_aclnn::host {
namespace {

// The parameters the second phases take from the first.
struct RmsNormParams {
  int32_t lead;  // the rows' dimensions: x's first `lead`
  float epsilon;
};

// x (rank min_rank..8) and gamma, x's trailing dimensions (not empty unless
// `gamma_may_be_empty`), each walkable as rows of one stride (rows.h);
// `lead` = x's rank - gamma's.
aclnnStatus CheckNormalized(const char* op, const char* x_name, const aclTensor* x,
                            const aclTensor* gamma, int min_rank, bool gamma_may_be_empty,
                            int* lead) {
  const View &xv = x->view, &gv = gamma->view;
  if (xv.rank < min_rank)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s; its rank must be %d to 8", op,
                x_name, ShapeString(xv).c_str(), min_rank);
  if (gv.rank < 1 || gv.rank > xv.rank)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: gamma has shape %s; expected 1 to %d of %s's "
                "trailing dimensions (%s)", op, ShapeString(gv).c_str(), xv.rank, x_name,
                ShapeString(xv).c_str());
  *lead = xv.rank - gv.rank;
  if (aclnnStatus st = CheckDims(op, "gamma", gamma, xv.dims + *lead, gv.rank)) return st;
  if (!gamma_may_be_empty && gv.NumElements() == 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: gamma %s is empty", op, ShapeString(gv).c_str());
  return ACLNN_SUCCESS;
}

// The dimensions after the first `lead` of each of these tensors (the
// normalized ones) are walkable with one stride (the layout the host
// kernels take; any other is refused).
aclnnStatus CheckRowLayout(const char* op, std::initializer_list<Operand> tensors, int lead) {
  for (const Operand& o : tensors) {
    int64_t stride;
    if (o.tensor != nullptr && !RowElementStride(o.tensor->view, lead, &stride))
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s's normalized dimensions are not laid out "
                  "with one stride (the host provider's kernels need them so)", op, o.name);
  }
  return ACLNN_SUCCESS;
}

// A FLOAT32 tensor of x's first `lead` dimensions, then ones to x's rank
// (or, where `short_ok`, just the first `lead`: the gradient's page).
aclnnStatus CheckRstd(const char* op, const char* name, const aclTensor* rstd, const View& x,
                      int lead, bool short_ok) {
  if (aclnnStatus st = CheckTensor(op, name, rstd)) return st;
  if (aclnnStatus st = CheckDataType(op, name, rstd, {ACL_FLOAT})) return st;
  int64_t dims[kMaxRank];
  for (int d = 0; d < x.rank; ++d) dims[d] = d < lead ? x.dims[d] : 1;
  if (short_ok && rstd->view.rank == lead) return CheckDims(op, name, rstd, dims, lead);
  return CheckDims(op, name, rstd, dims, x.rank);
}

// x's type, or FLOAT32 where `mixed`.
aclnnStatus CheckGamma(const char* op, const aclTensor* gamma, aclDataType x, bool mixed) {
  if (aclnnStatus st = CheckTensor(op, "gamma", gamma)) return st;
  return mixed ? CheckDataType(op, "gamma", gamma, {x, ACL_FLOAT})
               : CheckDataType(op, "gamma", gamma, {x});
}

// A tensor of x's shape and type.
aclnnStatus CheckLikeX(const char* op, const char* name, const aclTensor* t, const aclTensor* x,
                       const char* x_name) {
  if (aclnnStatus st = CheckTensor(op, name, t)) return st;
  if (aclnnStatus st = CheckSameType(op, x_name, x, name, t)) return st;
  return CheckDims(op, name, t, x->view.dims, x->view.rank);
}

void RunRmsNormExecutor(const aclOpExecutor& ex, void* workspace,
                        const JaxAclnnHostStream* stream) {
  const auto p = ex.params.As<RmsNormParams>();
  const View* x2 = ex.num_inputs == 3 ? &ex.inputs[1] : nullptr;  // AddRmsNorm: x1, x2, gamma
  const View& gamma = ex.inputs[ex.num_inputs - 1];
  RunRmsNorm(ex.inputs[0], x2, gamma, p.lead, p.epsilon, ex.outputs[0],
             ex.has_output[1] ? &ex.outputs[1] : nullptr,
             ex.num_outputs == 3 && ex.has_output[2] ? &ex.outputs[2] : nullptr, workspace,
             stream);
}

void RunRmsNormGradExecutor(const aclOpExecutor& ex, void* workspace,
                            const JaxAclnnHostStream* stream) {
  RunRmsNormGrad(ex.inputs[0], ex.inputs[1], ex.inputs[2], ex.inputs[3],
                 ex.params.As<RmsNormParams>().lead, ex.outputs[0], ex.outputs[1], workspace,
                 stream);
}

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the provider's common code

extern "C" aclnnStatus aclnnRmsNormGetWorkspaceSize(const aclTensor* x, const aclTensor* gamma,
                                                    double epsilon, const aclTensor* yOut,
                                                    const aclTensor* rstdOut,
                                                    uint64_t* workspaceSize,
                                                    aclOpExecutor** executor) {
  const char* op = "aclnnRmsNorm";
  if (aclnnStatus st = CheckTensor(op, "x", x)) return st;
  if (aclnnStatus st = CheckGamma(op, gamma, x->view.dtype, /*mixed=*/true)) return st;
  int lead;
  if (aclnnStatus st = CheckNormalized(op, "x", x, gamma, 1, false, &lead)) return st;
  if (aclnnStatus st = CheckLikeX(op, "yOut", yOut, x, "x")) return st;
  if (aclnnStatus st = CheckRstd(op, "rstdOut", rstdOut, x->view, lead, false)) return st;
  if (aclnnStatus st = CheckRowLayout(op, {{"x", x}, {"yOut", yOut}}, lead)) return st;
  if (aclnnStatus st = CheckRowLayout(op, {{"gamma", gamma}}, 0)) return st;
  return MakeExecutor(op, RunRmsNormExecutor,
                      PointwiseParams::Of(RmsNormParams{lead, static_cast<float>(epsilon)}),
                      {x, gamma}, {yOut, rstdOut}, RmsNormWorkspaceSize(x->view, lead),
                      workspaceSize, executor);
}

// rstdOut and xOut may be null (not written), but not rstdOut alone
// (ACLNN_ERR_PARAM_NULLPTR, as the page says).
extern "C" aclnnStatus aclnnAddRmsNormGetWorkspaceSize(const aclTensor* x1, const aclTensor* x2,
                                                       const aclTensor* gamma, double epsilon,
                                                       aclTensor* yOut, aclTensor* rstdOut,
                                                       aclTensor* xOut, uint64_t* workspaceSize,
                                                       aclOpExecutor** executor) {
  const char* op = "aclnnAddRmsNorm";
  if (aclnnStatus st = CheckTensor(op, "x1", x1)) return st;
  if (aclnnStatus st = CheckLikeX(op, "x2", x2, x1, "x1")) return st;
  if (aclnnStatus st = CheckGamma(op, gamma, x1->view.dtype, /*mixed=*/false)) return st;
  int lead;
  if (aclnnStatus st = CheckNormalized(op, "x1", x1, gamma, 1, true, &lead)) return st;
  if (!(epsilon >= 0))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: epsilon is %g; it must be at least 0", op, epsilon);
  if (aclnnStatus st = CheckLikeX(op, "yOut", yOut, x1, "x1")) return st;
  if (rstdOut != nullptr && xOut == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: xOut is a null pointer while rstdOut is not", op);
  if (rstdOut != nullptr)
    if (aclnnStatus st = CheckRstd(op, "rstdOut", rstdOut, x1->view, lead, false)) return st;
  if (xOut != nullptr)
    if (aclnnStatus st = CheckLikeX(op, "xOut", xOut, x1, "x1")) return st;
  if (aclnnStatus st = CheckRowLayout(
          op, {{"x1", x1}, {"x2", x2}, {"yOut", yOut}, {"xOut", xOut}}, lead))
    return st;
  if (aclnnStatus st = CheckRowLayout(op, {{"gamma", gamma}}, 0)) return st;
  return MakeExecutor(op, RunRmsNormExecutor,
                      PointwiseParams::Of(RmsNormParams{lead, static_cast<float>(epsilon)}),
                      {x1, x2, gamma}, {yOut, rstdOut, xOut},
                      RmsNormWorkspaceSize(x1->view, lead), workspaceSize, executor);
}

// dy and x of rank 2 to 8; rstd x's rows (then ones, or not: both shapes
// CANN's pages print).
extern "C" aclnnStatus aclnnRmsNormGradGetWorkspaceSize(
    const aclTensor* dy, const aclTensor* x, const aclTensor* rstd, const aclTensor* gamma,
    const aclTensor* dxOut, const aclTensor* dgammaOut, uint64_t* workspaceSize,
    aclOpExecutor** executor) {
  const char* op = "aclnnRmsNormGrad";
  if (aclnnStatus st = CheckTensor(op, "x", x)) return st;
  if (aclnnStatus st = CheckLikeX(op, "dy", dy, x, "x")) return st;
  if (aclnnStatus st = CheckGamma(op, gamma, x->view.dtype, /*mixed=*/true)) return st;
  int lead;
  if (aclnnStatus st = CheckNormalized(op, "x", x, gamma, 2, true, &lead)) return st;
  if (aclnnStatus st = CheckRstd(op, "rstd", rstd, x->view, lead, true)) return st;
  if (aclnnStatus st = CheckLikeX(op, "dxOut", dxOut, x, "x")) return st;
  if (aclnnStatus st = CheckTensor(op, "dgammaOut", dgammaOut)) return st;
  if (aclnnStatus st = CheckDataType(op, "dgammaOut", dgammaOut, {ACL_FLOAT})) return st;
  if (aclnnStatus st = CheckDims(op, "dgammaOut", dgammaOut, gamma->view.dims, gamma->view.rank))
    return st;
  if (aclnnStatus st = CheckRowLayout(op, {{"dy", dy}, {"x", x}, {"dxOut", dxOut}}, lead))
    return st;
  if (aclnnStatus st = CheckRowLayout(op, {{"gamma", gamma}, {"dgammaOut", dgammaOut}}, 0))
    return st;
  return MakeExecutor(op, RunRmsNormGradExecutor,
                      PointwiseParams::Of(RmsNormParams{lead, 0.0f}), {dy, x, rstd, gamma},
                      {dxOut, dgammaOut}, RmsNormGradWorkspaceSize(x->view, lead),
                      workspaceSize, executor);
}
