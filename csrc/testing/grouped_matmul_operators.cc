// The test provider's grouped matrix product (test_provider.h), float32 on
// host memory accumulating in double. aclnnGroupedMatmulV4 from
// hicann/ops-transformer gmm/grouped_matmul/op_host/op_api/aclnn_grouped_matmul_v4.h
// and its page gmm/grouped_matmul/docs/aclnnGroupedMatmulV4.md (the full
// text at yuanfang-chen/ops-transformer 0423d4e9, the hicann copy being a
// stub), its non-quantized single-tensor forms:
//  - groupType 0 (groups along M): x [M, K], weight [E, K, N] (a transposed
//    view too), biasOptional [E, N] or absent, out [M, N]: rows of group e
//    are x[rows] @ weight[e] (+ bias[e]); rows past the groups' total are not
//    written (the page: "not updated");
//  - groupType 2 (groups along K): x [M, K] (CANN takes it transposed, a
//    view with strides [1, M]; any strides here), weight [K, N] not
//    transposed, no bias, out [E, M, N]: out[e] = x[:, ks_e] @ weight[ks_e]
//    (0 for an empty group).
// groupListOptional is int64 [E] (E <= 1024): groupListType 0 cumulative
// sums (non-decreasing), 1 counts, their total at most the grouped
// dimension; splitItem 2 or 3 (one output tensor). Refused: groupType -1
// and the multi-tensor forms, groupListType 2, actType != 0, the
// quantization and activation lists (null or empty lists only).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "testing/operator_checks.h"
#include "testing/test_provider.h"

namespace jax_aclnn::test_provider::ops {
namespace {

size_t Length(const aclTensorList* l) { return l == nullptr ? 0 : l->tensors.size(); }

// The group boundaries [starts[e], starts[e + 1]) along a dimension of
// `size`, from the groupList's data; an error for values CANN refuses.
aclnnStatus Bounds(const char* op, const Slot& list, int64_t groups, int64_t list_type,
                   int64_t size, std::vector<int64_t>* starts) {
  starts->assign(1, 0);
  for (int64_t e = 0; e < groups; ++e) {
    const int64_t v = IntAt(list, e);
    const int64_t end = list_type == 0 ? v : starts->back() + v;
    if (v < 0 || end < starts->back())
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: groupListOptional[%lld] = %lld: %s", op,
                  static_cast<long long>(e), static_cast<long long>(v),
                  list_type == 0 ? "cumulative sums must be non-negative and non-decreasing"
                                 : "counts must be non-negative");
    starts->push_back(end);
  }
  if (starts->back() > size)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: the groups cover %lld rows; the grouped dimension "
                "has %lld", op, static_cast<long long>(starts->back()),
                static_cast<long long>(size));
  return ACLNN_SUCCESS;
}

}  // namespace
}  // namespace jax_aclnn::test_provider::ops

using namespace jax_aclnn::test_provider;       // NOLINT: the C ABI's definitions below
using namespace jax_aclnn::test_provider::ops;  // NOLINT

EXPORT aclnnStatus aclnnGroupedMatmulV4GetWorkspaceSize(
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
  RETURN_IF_ERROR(CheckNotNull(op, "workspaceSize", workspaceSize));
  RETURN_IF_ERROR(CheckNotNull(op, "executor", executor));
  RETURN_IF_ERROR(CheckNotNull(op, "x", x));
  RETURN_IF_ERROR(CheckNotNull(op, "weight", weight));
  RETURN_IF_ERROR(CheckNotNull(op, "out", out));
  const char* unused[] = {"scaleOptional", "offsetOptional", "antiquantScaleOptional",
                          "antiquantOffsetOptional", "perTokenScaleOptional",
                          "activationInputOptional", "activationQuantScaleOptional",
                          "activationQuantOffsetOptional", "activationFeatureOutOptional",
                          "dynQuantScaleOutOptional"};
  const aclTensorList* unused_lists[] = {
      scaleOptional, offsetOptional, antiquantScaleOptional, antiquantOffsetOptional,
      perTokenScaleOptional, activationInputOptional, activationQuantScaleOptional,
      activationQuantOffsetOptional, activationFeatureOutOptional, dynQuantScaleOutOptional};
  for (int i = 0; i < 10; ++i)
    if (Length(unused_lists[i]) != 0)
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: %s is given: only the non-quantized forms "
                  "without activation are implemented here (pass null)", op, unused[i]);
  if (actType != 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: actType %lld: only 0 (none) is supported without "
                "quantization", op, static_cast<long long>(actType));
  if (groupType != 0 && groupType != 2)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: groupType %lld is not implemented here (0: groups "
                "along M, 2: along K are)", op, static_cast<long long>(groupType));
  if (splitItem != 2 && splitItem != 3)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: splitItem %lld: the single-tensor forms take 2 or "
                "3", op, static_cast<long long>(splitItem));
  if (Length(x) != 1 || Length(weight) != 1 || Length(out) != 1)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: x, weight and out have %zu, %zu and %zu tensors: "
                "only single tensors are implemented here", op, Length(x), Length(weight),
                Length(out));
  if (groupListType != 0 && groupListType != 1)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: groupListType %lld: 0 (cumulative sums) or 1 "
                "(counts) without quantization", op, static_cast<long long>(groupListType));
  const aclTensor *x0 = x->tensors[0].get(), *w0 = weight->tensors[0].get(),
                  *y0 = out->tensors[0].get();
  const aclTensor* bias = Length(biasOptional) ? biasOptional->tensors[0].get() : nullptr;
  RETURN_IF_ERROR(CheckFloat32(op, "x[0]", x0, /*strided_ok=*/groupType == 2));
  RETURN_IF_ERROR(CheckFloat32(op, "weight[0]", w0, /*strided_ok=*/groupType == 0));
  RETURN_IF_ERROR(CheckFloat32(op, "out[0]", y0));
  RETURN_IF_ERROR(CheckTensor(op, "groupListOptional", groupListOptional, {ACL_INT64}));
  RETURN_IF_ERROR(CheckRank(op, "groupListOptional", groupListOptional, 1, 1));
  const int64_t groups = groupListOptional->dims[0];
  if (groups < 1 || groups > 1024)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: groupListOptional has %lld groups; 1 to 1024", op,
                static_cast<long long>(groups));
  RETURN_IF_ERROR(CheckRank(op, "x[0]", x0, 2, 2));
  const int64_t m = x0->dims[0], k = x0->dims[1];
  int64_t n;
  if (groupType == 0) {
    RETURN_IF_ERROR(CheckRank(op, "weight[0]", w0, 3, 3));
    n = w0->dims[2];
    RETURN_IF_ERROR(CheckShape(op, "weight[0]", w0, {groups, k, n}));
    RETURN_IF_ERROR(CheckShape(op, "out[0]", y0, {m, n}));
    if (Length(biasOptional) > 1)
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: biasOptional has %zu tensors; weight has 1", op,
                  Length(biasOptional));
    if (bias != nullptr) {
      RETURN_IF_ERROR(CheckFloat32(op, "biasOptional[0]", bias, true));
      RETURN_IF_ERROR(CheckShape(op, "biasOptional[0]", bias, {groups, n}));
    }
  } else {
    RETURN_IF_ERROR(CheckRank(op, "weight[0]", w0, 2, 2));
    n = w0->dims[1];
    RETURN_IF_ERROR(CheckShape(op, "weight[0]", w0, {k, n}));
    RETURN_IF_ERROR(CheckShape(op, "out[0]", y0, {groups, m, n}));
    if (Length(biasOptional) != 0)
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: biasOptional must be null with groupType 2", op);
  }
  if ((groupType == 0 ? k : m) >= 65536 || n >= 65536)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: x's and weight's last dimensions must be below "
                "65536 (x %s, weight %s)", op, Shape(x0).c_str(), Shape(w0).c_str());
  Kernel kernel = [=](const std::vector<Slot>& in, const std::vector<Slot>& outs) -> aclnnStatus {
    RETURN_IF_ERROR(CheckData(op, in, outs));
    std::vector<int64_t> starts;
    RETURN_IF_ERROR(Bounds(op, in[3], groups, groupListType, groupType == 0 ? m : k, &starts));
    const Dense xs(in[0]), ws(in[1]), bs(in[2]);
    float* y = Floats(outs[0]);
    std::vector<double> acc(n);
    for (int64_t e = 0; e < groups; ++e) {
      if (groupType == 0) {
        for (int64_t r = starts[e]; r < starts[e + 1]; ++r) {
          for (int64_t j = 0; j < n; ++j) acc[j] = bs.get() ? bs[e * n + j] : 0.0;
          for (int64_t c = 0; c < k; ++c) {
            const double xv = xs[r * k + c];
            for (int64_t j = 0; j < n; ++j) acc[j] += xv * ws[(e * k + c) * n + j];
          }
          for (int64_t j = 0; j < n; ++j) y[r * n + j] = float(acc[j]);
        }
      } else {
        for (int64_t r = 0; r < m; ++r) {
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t c = starts[e]; c < starts[e + 1]; ++c) {
            const double xv = xs[r * k + c];
            for (int64_t j = 0; j < n; ++j) acc[j] += xv * ws[c * n + j];
          }
          for (int64_t j = 0; j < n; ++j) y[(e * m + r) * n + j] = float(acc[j]);
        }
      }
    }
    return ACLNN_SUCCESS;
  };
  return MakeExecutor(op, {SlotOf(x0), SlotOf(w0), SlotOf(bias), SlotOf(groupListOptional)},
                      {SlotOf(y0)}, std::move(kernel), workspaceSize, executor);
}

JAX_ACLNN_TEST_SECOND_PHASE(GroupedMatmulV4)
