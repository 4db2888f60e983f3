// The rotary position embedding operators' first phases on the host
// provider. aclnnRotaryPositionEmbedding and aclnnRotaryPositionEmbeddingGrad
// (the kernels: host/rope_kernel.cc), as CANN's ops-transformer pages give
// them (posembedding/rotary_position_embedding/docs/
// aclnnRotaryPositionEmbedding.md, posembedding/rotary_position_embedding_grad/
// docs/aclnnRotaryPositionEmbeddingGrad.md): x (B, S, N, D), cos and sin of
// one of the pages' shapes (each of the first three dimensions 1 or x's, D
// x's), every tensor of one type (FLOAT32, FLOAT16 or BFLOAT16); mode 0
// (half), 1 (interleave) or 2 (quarter); 3 (interleave-half) is refused
// here. Tensors contiguous (the host provider's kernels need them so).
#include <cstdint>

#include "host/provider.h"

namespace jax_aclnn::host {
namespace {

struct RopeParams {
  int32_t mode;
};

// The largest head size the pages allow (and the kernels' row buffers hold).
constexpr int64_t kMaxHeadSize = 1024;

// A contiguous tensor of `like`'s type and the given shape.
aclnnStatus CheckOperand(const char* op, const char* name, const aclTensor* t,
                         const char* like_name, const aclTensor* like, const View& shape) {
  if (aclnnStatus st = CheckTensor(op, name, t)) return st;
  if (aclnnStatus st = CheckSameType(op, like_name, like, name, t)) return st;
  if (aclnnStatus st = CheckDims(op, name, t, shape.dims, shape.rank)) return st;
  return CheckContiguous(op, name, t);
}

// x (B, S, N, D), cos and sin of one shape CANN lists (1 or x's size in
// each of the first three dimensions, x's D; not (1, S, N, D) with B, S and
// N above 1: the pages list 111D, BSND, B1ND, BS1D, 11ND, 1S1D, B11D), and
// the mode.
aclnnStatus CheckRope(const char* op, const char* x_name, const aclTensor* x,
                      const aclTensor* cos, const aclTensor* sin, int64_t mode) {
  if (aclnnStatus st = CheckTensor(op, x_name, x)) return st;
  if (mode < 0 || mode > 2)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: mode %lld is not 0 (half), 1 (interleave) or 2 "
                "(quarter), the modes the host provider implements", op,
                static_cast<long long>(mode));
  const View& xv = x->view;
  if (xv.rank != 4)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s; expected (B, S, N, D)", op,
                x_name, ShapeString(xv).c_str());
  if (aclnnStatus st = CheckContiguous(op, x_name, x)) return st;
  if (aclnnStatus st = CheckTensor(op, "cos", cos)) return st;
  if (aclnnStatus st = CheckSameType(op, x_name, x, "cos", cos)) return st;
  const View& cv = cos->view;
  bool ok = cv.rank == 4 && cv.dims[3] == xv.dims[3];
  for (int k = 0; ok && k < 3; ++k) ok = cv.dims[k] == 1 || cv.dims[k] == xv.dims[k];
  if (ok && cv.dims[0] == 1 && xv.dims[0] > 1 && cv.dims[1] > 1 && cv.dims[2] > 1)
    ok = false;  // (1, S, N, D)
  if (!ok)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: cos has shape %s; with %s %s (B, S, N, D) "
                "expected one of (1,1,1,D), (B,S,N,D), (B,1,N,D), (B,S,1,D), (1,1,N,D), "
                "(1,S,1,D), (B,1,1,D)", op, ShapeString(cv).c_str(), x_name,
                ShapeString(xv).c_str());
  if (aclnnStatus st = CheckContiguous(op, "cos", cos)) return st;
  if (aclnnStatus st = CheckOperand(op, "sin", sin, "cos", cos, cv)) return st;
  const int64_t d = xv.dims[3], multiple = mode == 2 ? 4 : 2;
  if (d > kMaxHeadSize || d % multiple != 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: D = %lld must be at most %lld and a multiple of "
                "%lld in mode %lld", op, static_cast<long long>(d),
                static_cast<long long>(kMaxHeadSize), static_cast<long long>(multiple),
                static_cast<long long>(mode));
  return ACLNN_SUCCESS;
}

void RunRopeExecutor(const aclOpExecutor& ex, void*, const JaxAclnnHostStream* stream) {
  RunRope(ex.inputs[0], ex.inputs[1], ex.inputs[2], ex.params.As<RopeParams>().mode,
          ex.outputs[0], stream);
}

void RunRopeGradExecutor(const aclOpExecutor& ex, void* workspace,
                         const JaxAclnnHostStream* stream) {
  const bool with_x = ex.input_tensors[3] != nullptr;
  RunRopeGrad(ex.inputs[0], ex.inputs[1], ex.inputs[2], with_x ? &ex.inputs[3] : nullptr,
              ex.params.As<RopeParams>().mode, ex.outputs[0],
              with_x ? &ex.outputs[1] : nullptr, with_x ? &ex.outputs[2] : nullptr, workspace,
              stream);
}

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the provider's common code

extern "C" aclnnStatus aclnnRotaryPositionEmbeddingGetWorkspaceSize(
    const aclTensor* x, const aclTensor* cos, const aclTensor* sin, int64_t mode, aclTensor* out,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnRotaryPositionEmbedding";
  if (aclnnStatus st = CheckRope(op, "x", x, cos, sin, mode)) return st;
  if (aclnnStatus st = CheckOperand(op, "out", out, "x", x, x->view)) return st;
  return MakeExecutor(op, RunRopeExecutor,
                      PointwiseParams::Of(RopeParams{static_cast<int32_t>(mode)}), {x, cos, sin},
                      {out}, 0, workspaceSize, executor);
}

// Without xOptional, dcosOut and dsinOut are not computed (CANN's page),
// but must be given.
extern "C" aclnnStatus aclnnRotaryPositionEmbeddingGradGetWorkspaceSize(
    const aclTensor* dy, const aclTensor* cos, const aclTensor* sin, const aclTensor* xOptional,
    int64_t mode, const aclTensor* dxOut, const aclTensor* dcosOut, const aclTensor* dsinOut,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnRotaryPositionEmbeddingGrad";
  if (aclnnStatus st = CheckRope(op, "dy", dy, cos, sin, mode)) return st;
  if (xOptional != nullptr)
    if (aclnnStatus st = CheckOperand(op, "xOptional", xOptional, "dy", dy, dy->view)) return st;
  if (aclnnStatus st = CheckOperand(op, "dxOut", dxOut, "dy", dy, dy->view)) return st;
  if (aclnnStatus st = CheckOperand(op, "dcosOut", dcosOut, "cos", cos, cos->view)) return st;
  if (aclnnStatus st = CheckOperand(op, "dsinOut", dsinOut, "cos", cos, cos->view)) return st;
  const uint64_t workspace =
      xOptional != nullptr ? RopeGradWorkspaceSize(dy->view, cos->view) : 0;
  return MakeExecutor(op, RunRopeGradExecutor,
                      PointwiseParams::Of(RopeParams{static_cast<int32_t>(mode)}),
                      {dy, cos, sin, xOptional}, {dxOut, dcosOut, dsinOut}, workspace,
                      workspaceSize, executor);
}
