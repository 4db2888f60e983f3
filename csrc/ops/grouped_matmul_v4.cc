// aclnnGroupedMatmulV4's first phase on the host provider (the kernel:
// host/grouped_matmul_kernel.cc). The prototype is ops-transformer's
// gmm/grouped_matmul/op_host/op_api/aclnn_grouped_matmul_v4.h; semantics
// from its page gmm/grouped_matmul/docs/aclnnGroupedMatmulV4.md, the
// non-quantized single-tensor forms jax_aclnn.nn.ragged_dot calls:
//  - groupType 0 (groups along M): x [M, K], weight [E, K, N] (any
//    strides), biasOptional [E, N] or absent, out [M, N]: the rows of group
//    e are x[rows] @ weight[e] (+ bias[e]); rows past the groups' total are
//    zeros (the page: not updated, their values unspecified);
//  - groupType 2 (groups along K): x [M, K] (any strides: CANN takes it
//    transposed), weight [K, N], no bias, out [E, M, N]: out[e] =
//    x[:, ks of e] @ weight[ks of e], zeros for an empty group.
// x, weight and out of one type, FLOAT32, FLOAT16 or BFLOAT16; the bias
// FLOAT16 with FLOAT16 x, else FLOAT32. groupListOptional: INT64 [E], 1 <=
// E <= 1024, counts (groupListType 1) or cumulative sums (0); splitItem 2
// or 3. Refused: the multi-tensor forms, groupType -1, the quantization
// and activation lists, actType != 0.
#include <cstdint>

#include "host/provider.h"

namespace jax_aclnn::host {
namespace {

struct GroupedMatmulParams {
  int32_t along_k;  // groupType 2
  int32_t counts;   // groupListType 1
};

size_t Length(const aclTensorList* l) { return l == nullptr ? 0 : l->values.size(); }

// The list's one tensor, or the status naming it.
aclnnStatus Single(const char* op, const char* name, const aclTensorList* list,
                   const aclTensor** t) {
  if (Length(list) != 1)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s holds %zu tensors; the host provider "
                "implements the single-tensor forms (1)", op, name, Length(list));
  *t = list->values[0];
  return ACLNN_SUCCESS;
}

aclnnStatus CheckRank(const char* op, const char* name, const aclTensor* t, int rank) {
  if (t->view.rank == rank) return ACLNN_SUCCESS;
  return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s; its rank must be %d", op, name,
              ShapeString(t->view).c_str(), rank);
}

aclnnStatus CheckGroupList(const char* op, const aclTensor* g) {
  const char* name = "groupListOptional";
  if (g == nullptr)
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s is a null pointer: the single-tensor forms "
                "need it", op, name);
  if (aclnnStatus st = CheckDataType(op, name, g, {ACL_INT64})) return st;
  if (aclnnStatus st = CheckRank(op, name, g, 1)) return st;
  if (g->view.dims[0] < 1 || g->view.dims[0] > 1024)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s has %lld groups; 1 to 1024", op, name,
                static_cast<long long>(g->view.dims[0]));
  if (g->view.data == nullptr) return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: %s has no data", op, name);
  return ACLNN_SUCCESS;
}

// The bias (x's type for FLOAT16, else FLOAT32) of shape [E, N].
aclnnStatus CheckBias(const char* op, const aclTensor* bias, const aclTensor* x, int64_t groups,
                      int64_t n) {
  const char* name = "biasOptional[0]";
  if (aclnnStatus st = CheckTensor(op, name, bias)) return st;
  const aclDataType want = x->view.dtype == ACL_FLOAT16 ? ACL_FLOAT16 : ACL_FLOAT;
  if (aclnnStatus st = CheckDataType(op, name, bias, {want})) return st;
  const int64_t dims[] = {groups, n};
  return CheckDims(op, name, bias, dims, 2);
}

void RunGroupedMatmulExecutor(const aclOpExecutor& ex, void*, const JaxAclnnHostStream* stream) {
  const auto p = ex.params.As<GroupedMatmulParams>();
  RunGroupedMatmul(ex.inputs[0], ex.inputs[1], ex.input_tensors[2] ? &ex.inputs[2] : nullptr,
                   ex.inputs[3], p.counts != 0, p.along_k != 0, ex.outputs[0], stream);
}

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the provider's common code

extern "C" aclnnStatus aclnnGroupedMatmulV4GetWorkspaceSize(
    const aclTensorList* x, const aclTensorList* weight, const aclTensorList* biasOptional,
    const aclTensorList* scaleOptional, const aclTensorList* offsetOptional,
    const aclTensorList* antiquantScaleOptional, const aclTensorList* antiquantOffsetOptional,
    const aclTensorList* perTokenScaleOptional, const aclTensor* groupListOptional,
    const aclTensorList* activationInputOptional,
    const aclTensorList* activationQuantScaleOptional,
    const aclTensorList* activationQuantOffsetOptional, int64_t splitItem, int64_t groupType,
    int64_t groupListType, int64_t actType, aclTensorList* out,
    aclTensorList* activationFeatureOutOptional, aclTensorList* dynQuantScaleOutOptional,
    uint64_t* workspaceSize, aclOpExecutor** executor) {
  const char* op = "aclnnGroupedMatmulV4";
  const struct {
    const char* name;
    const aclTensorList* list;
  } unused[] = {{"scaleOptional", scaleOptional},
                {"offsetOptional", offsetOptional},
                {"antiquantScaleOptional", antiquantScaleOptional},
                {"antiquantOffsetOptional", antiquantOffsetOptional},
                {"perTokenScaleOptional", perTokenScaleOptional},
                {"activationInputOptional", activationInputOptional},
                {"activationQuantScaleOptional", activationQuantScaleOptional},
                {"activationQuantOffsetOptional", activationQuantOffsetOptional},
                {"activationFeatureOutOptional", activationFeatureOutOptional},
                {"dynQuantScaleOutOptional", dynQuantScaleOutOptional}};
  for (const auto& u : unused)
    if (Length(u.list) != 0)
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s is given: the host provider implements the "
                  "non-quantized forms without activation (pass null)", op, u.name);
  if (actType != 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: actType %lld: only 0 (none) without quantization",
                op, static_cast<long long>(actType));
  if (groupType != 0 && groupType != 2)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: groupType %lld: the single-tensor forms take 0 "
                "(groups along M) or 2 (along K)", op, static_cast<long long>(groupType));
  if (splitItem != 2 && splitItem != 3)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: splitItem %lld: the single-tensor forms take 2 or "
                "3", op, static_cast<long long>(splitItem));
  if (groupListType != 0 && groupListType != 1)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: groupListType %lld: 0 (cumulative sums) or 1 "
                "(counts)", op, static_cast<long long>(groupListType));
  const aclTensor *x0 = nullptr, *w0 = nullptr, *y0 = nullptr, *bias = nullptr;
  if (aclnnStatus st = Single(op, "x", x, &x0)) return st;
  if (aclnnStatus st = Single(op, "weight", weight, &w0)) return st;
  if (aclnnStatus st = Single(op, "out", out, &y0)) return st;
  if (Length(biasOptional) != 0)
    if (aclnnStatus st = Single(op, "biasOptional", biasOptional, &bias)) return st;
  if (aclnnStatus st = CheckTensor(op, "x[0]", x0)) return st;
  if (aclnnStatus st = CheckTensor(op, "weight[0]", w0)) return st;
  if (aclnnStatus st = CheckTensor(op, "out[0]", y0)) return st;
  if (aclnnStatus st = CheckSameType(op, "x[0]", x0, "weight[0]", w0)) return st;
  if (aclnnStatus st = CheckSameType(op, "x[0]", x0, "out[0]", y0)) return st;
  if (aclnnStatus st = CheckGroupList(op, groupListOptional)) return st;
  if (aclnnStatus st = CheckRank(op, "x[0]", x0, 2)) return st;
  const bool along_k = groupType == 2;
  const int64_t groups = groupListOptional->view.dims[0];
  const int64_t m = x0->view.dims[0], k = x0->view.dims[1];
  if (aclnnStatus st = CheckRank(op, "weight[0]", w0, along_k ? 2 : 3)) return st;
  const int64_t n = w0->view.dims[w0->view.rank - 1];
  const int64_t weight_dims[] = {groups, k, n};
  const int64_t* wd = along_k ? weight_dims + 1 : weight_dims;
  if (aclnnStatus st = CheckDims(op, "weight[0]", w0, wd, along_k ? 2 : 3)) return st;
  const int64_t out_dims[] = {groups, m, n};
  const int64_t* od = along_k ? out_dims : out_dims + 1;
  if (aclnnStatus st = CheckDims(op, "out[0]", y0, od, along_k ? 3 : 2)) return st;
  if (aclnnStatus st = CheckContiguous(op, "out[0]", y0)) return st;
  if (bias != nullptr && along_k)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: biasOptional must be null with groupType 2", op);
  if (bias != nullptr)
    if (aclnnStatus st = CheckBias(op, bias, x0, groups, n)) return st;
  if ((along_k ? m : k) >= 65536 || n >= 65536)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: x's and weight's last dimensions must be below "
                "65536 (x %s, weight %s)", op, ShapeString(x0->view).c_str(),
                ShapeString(w0->view).c_str());
  const GroupedMatmulParams p{along_k ? 1 : 0, groupListType == 1 ? 1 : 0};
  return MakeExecutor(op, RunGroupedMatmulExecutor, PointwiseParams::Of(p),
                      {x0, w0, bias, groupListOptional}, {y0}, 0, workspaceSize, executor);
}
