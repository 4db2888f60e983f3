// The handlers' dtype mapping and aclnn status errors (status.h).
#include "ffi/status.h"

#include <string>

namespace jax_aclnn {

ffi::ErrorOr<aclDataType> ToAclDataType(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return ACL_FLOAT;
    case ffi::DataType::F16: return ACL_FLOAT16;
    case ffi::DataType::BF16: return ACL_BF16;
    case ffi::DataType::F64: return ACL_DOUBLE;
    case ffi::DataType::S8: return ACL_INT8;
    case ffi::DataType::S16: return ACL_INT16;
    case ffi::DataType::S32: return ACL_INT32;
    case ffi::DataType::S64: return ACL_INT64;
    case ffi::DataType::U8: return ACL_UINT8;
    case ffi::DataType::U16: return ACL_UINT16;
    case ffi::DataType::U32: return ACL_UINT32;
    case ffi::DataType::U64: return ACL_UINT64;
    case ffi::DataType::PRED: return ACL_BOOL;
    default:
      return ffi::Unexpected(ffi::Error::InvalidArgument(
          "jax_aclnn: element type " + std::to_string(static_cast<int>(t)) +
          " has no aclDataType here (supported: floating types but float8, signed and "
          "unsigned integers, bool)"));
  }
}

namespace {

const char* StatusName(aclnnStatus status) {
  switch (status) {
    case ACLNN_SUCCESS: return "ACLNN_SUCCESS";
    case ACLNN_ERR_PARAM_NULLPTR: return "ACLNN_ERR_PARAM_NULLPTR";
    case ACLNN_ERR_PARAM_INVALID: return "ACLNN_ERR_PARAM_INVALID";
    case ACLNN_ERR_RUNTIME_ERROR: return "ACLNN_ERR_RUNTIME_ERROR";
    case ACLNN_ERR_INNER: return "ACLNN_ERR_INNER";
    case ACLNN_ERR_INNER_NULLPTR: return "ACLNN_ERR_INNER_NULLPTR";
    default: return "unknown aclnnStatus";
  }
}

}  // namespace

ffi::Error StatusError(const AclnnApi& api, const std::string& call, aclnnStatus status) {
  const char* msg = api.aclGetRecentErrMsg ? api.aclGetRecentErrMsg() : nullptr;
  const bool parameter_error =
      status == ACLNN_ERR_PARAM_NULLPTR || status == ACLNN_ERR_PARAM_INVALID;
  return ffi::Error(parameter_error ? ffi::ErrorCode::kInvalidArgument : ffi::ErrorCode::kInternal,
                    call + " failed: aclnnStatus " + std::to_string(status) + " (" +
                        StatusName(status) + "): " + (msg && *msg ? msg : "no message"));
}

}  // namespace jax_aclnn
