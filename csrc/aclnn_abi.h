// The subset of the Ascend CANN aclnn / ACL C ABI that jax_aclnn uses,
// declared by this project so that no CANN header is needed to build.
//
// Handles are opaque; every function is resolved at run time (dlsym) from an
// aclnn provider: CANN's libopapi.so / libnnopbase.so on an Ascend NPU, or
// the bundled host provider (libaclnn_host.so) on the CPU. The host provider
// exports exactly these symbols with C linkage.
#ifndef JAX_ACLNN_ACLNN_ABI_H_
#define JAX_ACLNN_ACLNN_ABI_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JAX_ACLNN_OPERATOR_LIST_ONLY
#include "operators.h"  // the operators' parameter lists
#undef JAX_ACLNN_OPERATOR_LIST_ONLY

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aclTensor aclTensor;
typedef struct aclScalar aclScalar;
typedef struct aclIntArray aclIntArray;
typedef struct aclBoolArray aclBoolArray;
typedef struct aclFloatArray aclFloatArray;
typedef struct aclTensorList aclTensorList;
typedef struct aclOpExecutor aclOpExecutor;
typedef void* aclrtStream;
typedef int32_t aclnnStatus;

typedef enum {
  ACL_DT_UNDEFINED = -1,
  ACL_FLOAT = 0,
  ACL_FLOAT16 = 1,
  ACL_INT8 = 2,
  ACL_INT32 = 3,
  ACL_UINT8 = 4,
  ACL_INT16 = 6,
  ACL_UINT16 = 7,
  ACL_UINT32 = 8,
  ACL_INT64 = 9,
  ACL_UINT64 = 10,
  ACL_DOUBLE = 11,
  ACL_BOOL = 12,
  ACL_BF16 = 27,
} aclDataType;

typedef enum {
  ACL_FORMAT_UNDEFINED = -1,
  ACL_FORMAT_NCHW = 0,
  ACL_FORMAT_NHWC = 1,
  ACL_FORMAT_ND = 2,
} aclFormat;

// aclnnStatus codes (0 = success).
enum {
  ACLNN_SUCCESS = 0,
  ACLNN_ERR_PARAM_NULLPTR = 161001,
  ACLNN_ERR_PARAM_INVALID = 161002,
  ACLNN_ERR_RUNTIME_ERROR = 361001,
  ACLNN_ERR_INNER = 561000,
  ACLNN_ERR_INNER_NULLPTR = 561103,
};

// X-macros over the ABI functions: X(return type, name, parameter list).
// The loader builds its function table from them and the host provider's
// definitions are checked against them, so the list lives in one place.
// Required: descriptors, errors and each operator's two phases.
#define ACLNN_ABI_REQUIRED_FUNCTIONS(X)                                                 \
  /* descriptors (nnopbase) */                                                 \
  X(aclTensor*, aclCreateTensor,                                               \
    (const int64_t* viewDims, uint64_t viewDimsNum, aclDataType dataType,      \
     const int64_t* stride, int64_t offset, aclFormat format,                  \
     const int64_t* storageDims, uint64_t storageDimsNum, void* tensorData))   \
  X(aclnnStatus, aclDestroyTensor, (const aclTensor* tensor))                  \
  X(aclScalar*, aclCreateScalar, (void* value, aclDataType dataType))          \
  X(aclnnStatus, aclDestroyScalar, (const aclScalar* scalar))                  \
  X(const char*, aclGetRecentErrMsg, (void))

// Each operator's two functions (the list in operators.h): the first phase,
// aclnn<Name>GetWorkspaceSize(<its parameters>, workspaceSize, executor),
// and the second phase aclnn<Name>, the same for every operator.
#define ACLNN_ABI_OPERATOR_FUNCTIONS(X, Name, name, parameters)                      \
  X(aclnnStatus, aclnn##Name##GetWorkspaceSize, ACLNN_ABI_FIRST_PHASE parameters)    \
  X(aclnnStatus, aclnn##Name,                                                        \
    (void* workspace, uint64_t workspaceSize, aclOpExecutor* executor,               \
     aclrtStream stream))
// The same for the catalogue's operators that the host provider implements
// (JAX_ACLNN_HOST_CATALOGUE_WITH in operators.h).
#define ACLNN_ABI_CATALOGUE_FUNCTIONS(X, Name, parameters) \
  ACLNN_ABI_OPERATOR_FUNCTIONS(X, Name, _, parameters)
#define ACLNN_ABI_FIRST_PHASE(...) \
  (__VA_ARGS__, uint64_t* workspaceSize, aclOpExecutor** executor)

// The other argument descriptors (nnopbase): integer, bool and float arrays
// and tensor lists. A tensor list owns its tensors: aclDestroyTensorList
// destroys them too. Optional: only an operator that takes one needs them.
#define ACLNN_ABI_ARRAY_FUNCTIONS(X)                                              \
  X(aclIntArray*, aclCreateIntArray, (const int64_t* value, uint64_t size))       \
  X(aclnnStatus, aclDestroyIntArray, (const aclIntArray* array))                  \
  X(aclBoolArray*, aclCreateBoolArray, (const bool* value, uint64_t size))        \
  X(aclnnStatus, aclDestroyBoolArray, (const aclBoolArray* array))                \
  X(aclFloatArray*, aclCreateFloatArray, (const float* value, uint64_t size))     \
  X(aclnnStatus, aclDestroyFloatArray, (const aclFloatArray* array))              \
  X(aclTensorList*, aclCreateTensorList, (const aclTensor* const* value, uint64_t size)) \
  X(aclnnStatus, aclDestroyTensorList, (const aclTensorList* array))

// Optional: making an executor repeatable and re-targeting it at new buffer
// addresses. Without them every call runs both phases.
#define ACLNN_ABI_EXECUTOR_REUSE_FUNCTIONS(X)                                  \
  X(aclnnStatus, aclSetAclOpExecutorRepeatable, (aclOpExecutor * executor))    \
  X(aclnnStatus, aclDestroyAclOpExecutor, (aclOpExecutor * executor))          \
  X(aclnnStatus, aclSetInputTensorAddr,                                        \
    (aclOpExecutor * executor, const size_t index, aclTensor* tensor,          \
     void* addr))                                                              \
  X(aclnnStatus, aclSetOutputTensorAddr,                                       \
    (aclOpExecutor * executor, const size_t index, aclTensor* tensor,          \
     void* addr))

// The functions a provider's table holds (ffi/provider.h); an operator's
// two phases are looked up by name when it is called.
#define ACLNN_ABI_FUNCTIONS(X)      \
  ACLNN_ABI_REQUIRED_FUNCTIONS(X)   \
  ACLNN_ABI_ARRAY_FUNCTIONS(X)      \
  ACLNN_ABI_EXECUTOR_REUSE_FUNCTIONS(X)

// Declared with C linkage and visible: what the host provider exports (its
// definitions are checked against these declarations).
#define ACLNN_DECLARE_FUNCTION(ret, name, params) \
  __attribute__((visibility("default"))) ret name params;
ACLNN_ABI_FUNCTIONS(ACLNN_DECLARE_FUNCTION)
JAX_ACLNN_OPERATORS_WITH(ACLNN_ABI_OPERATOR_FUNCTIONS, ACLNN_DECLARE_FUNCTION)
JAX_ACLNN_HOST_CATALOGUE_WITH(ACLNN_ABI_CATALOGUE_FUNCTIONS, ACLNN_DECLARE_FUNCTION)
#undef ACLNN_DECLARE_FUNCTION

// A provider's aclSetInputTensorAddr and aclSetOutputTensorAddr, both its
// set_tensor_addr(function name, executor, index, tensor, addr, is_output).
#define ACLNN_DEFINE_SET_TENSOR_ADDR(set_tensor_addr)                                    \
  aclnnStatus aclSetInputTensorAddr(aclOpExecutor* executor, const size_t index,         \
                                    aclTensor* tensor, void* addr) {                     \
    return set_tensor_addr("aclSetInputTensorAddr", executor, index, tensor, addr, false); \
  }                                                                                      \
  aclnnStatus aclSetOutputTensorAddr(aclOpExecutor* executor, const size_t index,        \
                                     aclTensor* tensor, void* addr) {                    \
    return set_tensor_addr("aclSetOutputTensorAddr", executor, index, tensor, addr, true); \
  }

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // JAX_ACLNN_ACLNN_ABI_H_
