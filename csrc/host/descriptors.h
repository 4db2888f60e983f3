// The host provider's aclTensor and aclScalar descriptors, made and
// destroyed by aclCreateTensor/aclCreateScalar and their aclDestroy
// functions (descriptors.cc).
#ifndef JAX_ACLNN_HOST_DESCRIPTORS_H_
#define JAX_ACLNN_HOST_DESCRIPTORS_H_

#include <cstdint>
#include <vector>

#include "aclnn_abi.h"
#include "host/dtype.h"
#include "host/kernels.h"

struct aclTensor {
  jax_aclnn::host::View view;
  int64_t offset;  // view.data = tensorData + offset
};

struct aclScalar {
  double value;
  aclDataType dtype;
};

// The arrays and tensor lists: copies of the values given (a list owns its
// tensors, as CANN's does).
struct aclIntArray {
  std::vector<int64_t> values;
};
struct aclBoolArray {
  std::vector<bool> values;
};
struct aclFloatArray {
  std::vector<float> values;
};
struct aclTensorList {
  std::vector<const aclTensor*> values;  // owned
};

namespace jax_aclnn::host {

// The address of element `offset` of a `dtype` buffer at `base`.
inline void* Advance(void* base, int64_t offset, aclDataType dtype) {
  return static_cast<char*>(base) + offset * ElementSize(dtype);
}

}  // namespace jax_aclnn::host

#endif  // JAX_ACLNN_HOST_DESCRIPTORS_H_
