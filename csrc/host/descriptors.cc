// The host provider's descriptor ABI: aclCreateTensor (checking the layout
// as CANN does), aclCreateScalar and their aclDestroy functions.
#include "host/descriptors.h"

#include <cstdint>
#include <new>

#include "aclnn_abi.h"
#include "host/dtype.h"
#include "host/kernels.h"
#include "host/provider.h"

namespace jax_aclnn::host {
namespace {

// The product of n dimensions, false when it overflows int64.
bool Product(const int64_t* dims, uint64_t n, int64_t* result) {
  int64_t p = 1;
  for (uint64_t d = 0; d < n; ++d)
    if (__builtin_mul_overflow(p, dims[d], &p)) return false;
  *result = p;
  return true;
}

// aclCreateTensor's checks, as CANN makes them: the view (dims, strides in
// elements, offset) must lie inside the storage (storageDims elements of
// dataType), with every size and address computation inside int64.
aclnnStatus CheckLayout(const int64_t* dims, uint64_t rank, aclDataType dtype,
                        const int64_t* strides, int64_t offset, const int64_t* storage_dims,
                        uint64_t storage_rank, View* view) {
  const char* fn = "aclCreateTensor";
  if (rank > kMaxRank || storage_rank > kMaxRank)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: rank %llu (storage rank %llu) is above %d", fn,
                static_cast<unsigned long long>(rank),
                static_cast<unsigned long long>(storage_rank), kMaxRank);
  if ((rank > 0 && dims == nullptr) || (storage_rank > 0 && storage_dims == nullptr))
    return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: viewDims or storageDims is a null pointer", fn);
  if (ElementSize(dtype) == 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: data type %d is not supported", fn,
                static_cast<int>(dtype));
  if (offset < 0)
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: offset %lld is negative", fn,
                static_cast<long long>(offset));
  for (uint64_t d = 0; d < rank; ++d)
    if (dims[d] < 0 || (strides != nullptr && strides[d] < 0))
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: dimension %llu has size %lld and stride %lld; "
                  "both must be non-negative", fn, static_cast<unsigned long long>(d),
                  static_cast<long long>(dims[d]),
                  static_cast<long long>(strides != nullptr ? strides[d] : 0));
  for (uint64_t d = 0; d < storage_rank; ++d)
    if (storage_dims[d] < 0)
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: storage dimension %llu is negative (%lld)", fn,
                  static_cast<unsigned long long>(d), static_cast<long long>(storage_dims[d]));
  int64_t elements, storage, storage_bytes;
  if (!Product(dims, rank, &elements) || !Product(storage_dims, storage_rank, &storage) ||
      __builtin_mul_overflow(storage, ElementSize(dtype), &storage_bytes))
    return Fail(ACLNN_ERR_PARAM_INVALID, "%s: the number of elements overflows int64", fn);
  view->dtype = dtype;
  view->rank = static_cast<int>(rank);
  int64_t contiguous = 1, last = offset;  // `last`: the highest element index the view reaches
  for (int d = view->rank - 1; d >= 0; --d) {
    view->dims[d] = dims[d];
    view->strides[d] = strides != nullptr ? strides[d] : contiguous;
    contiguous *= dims[d];  // no overflow: bounded by `elements`
    int64_t reach;
    if (elements > 0 && (__builtin_mul_overflow(dims[d] - 1, view->strides[d], &reach) ||
                         __builtin_add_overflow(last, reach, &last)))
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: the view's extent overflows int64", fn);
  }
  if (elements > 0 ? last >= storage : offset > storage)
    return Fail(ACLNN_ERR_PARAM_INVALID,
                "%s: the view (offset %lld, reaching element %lld) lies outside its storage of "
                "%lld elements", fn, static_cast<long long>(offset), static_cast<long long>(last),
                static_cast<long long>(storage));
  return ACLNN_SUCCESS;
}

}  // namespace
}  // namespace jax_aclnn::host

using namespace jax_aclnn::host;  // NOLINT: the exported C functions below

extern "C" {

aclTensor* aclCreateTensor(const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,
                           const int64_t* stride, int64_t offset, aclFormat format,
                           const int64_t* storageDims, uint64_t storageDimsNum,
                           void* tensorData) {
  (void)format;
  View view;
  if (CheckLayout(viewDims, viewDimsNum, dataType, stride, offset, storageDims, storageDimsNum,
                  &view) != ACLNN_SUCCESS)
    return nullptr;
  auto* t = new (std::nothrow) aclTensor{};
  if (t == nullptr) return nullptr;
  t->view = view;
  t->offset = offset;
  t->view.data = tensorData ? Advance(tensorData, offset, dataType) : nullptr;
  return t;
}

aclnnStatus aclDestroyTensor(const aclTensor* tensor) {
  delete tensor;
  return ACLNN_SUCCESS;
}

aclScalar* aclCreateScalar(void* value, aclDataType dataType) {
  if (value == nullptr) {
    Fail(ACLNN_ERR_PARAM_NULLPTR, "aclCreateScalar: value is a null pointer");
    return nullptr;
  }
  double v;
  switch (dataType) {
    case ACL_FLOAT: v = *static_cast<float*>(value); break;
    case ACL_DOUBLE: v = *static_cast<double*>(value); break;
    case ACL_FLOAT16: v = HalfToFloat(*static_cast<uint16_t*>(value)); break;
    case ACL_BF16: v = Bf16ToFloat(*static_cast<uint16_t*>(value)); break;
    case ACL_INT64: v = static_cast<double>(*static_cast<int64_t*>(value)); break;
    case ACL_INT32: v = *static_cast<int32_t*>(value); break;
    default:
      Fail(ACLNN_ERR_PARAM_INVALID, "aclCreateScalar: data type %s is not supported",
           DataTypeName(dataType));
      return nullptr;
  }
  return new (std::nothrow) aclScalar{v, dataType};
}

aclnnStatus aclDestroyScalar(const aclScalar* scalar) {
  delete scalar;
  return ACLNN_SUCCESS;
}

}  // extern "C"

namespace {

// An array descriptor holding a copy of `size` values (null `value`: only
// for an empty array).
template <typename Array, typename T>
Array* CreateArray(const char* fn, const T* value, uint64_t size) {
  if (value == nullptr && size > 0) {
    jax_aclnn::host::Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: value is a null pointer", fn);
    return nullptr;
  }
  auto* array = new (std::nothrow) Array;
  if (array == nullptr) return nullptr;
  array->values.assign(value, value + size);
  return array;
}

}  // namespace

extern "C" {

aclIntArray* aclCreateIntArray(const int64_t* value, uint64_t size) {
  return CreateArray<aclIntArray>("aclCreateIntArray", value, size);
}
aclnnStatus aclDestroyIntArray(const aclIntArray* array) {
  delete array;
  return ACLNN_SUCCESS;
}
aclBoolArray* aclCreateBoolArray(const bool* value, uint64_t size) {
  return CreateArray<aclBoolArray>("aclCreateBoolArray", value, size);
}
aclnnStatus aclDestroyBoolArray(const aclBoolArray* array) {
  delete array;
  return ACLNN_SUCCESS;
}
aclFloatArray* aclCreateFloatArray(const float* value, uint64_t size) {
  return CreateArray<aclFloatArray>("aclCreateFloatArray", value, size);
}
aclnnStatus aclDestroyFloatArray(const aclFloatArray* array) {
  delete array;
  return ACLNN_SUCCESS;
}
aclTensorList* aclCreateTensorList(const aclTensor* const* value, uint64_t size) {
  return CreateArray<aclTensorList>("aclCreateTensorList", value, size);
}
aclnnStatus aclDestroyTensorList(const aclTensorList* list) {
  if (list != nullptr)
    for (const aclTensor* t : list->values) aclDestroyTensor(t);
  delete list;
  return ACLNN_SUCCESS;
}

}  // extern "C"
