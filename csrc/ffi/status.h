// The handlers' dtype mapping and aclnn status errors: an XLA element type
// as an aclDataType, a non-zero aclnnStatus as an ffi::Error.
#ifndef JAX_ACLNN_FFI_STATUS_H_
#define JAX_ACLNN_FFI_STATUS_H_

#include <string>

#include "aclnn_abi.h"
#include "ffi/provider.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jax_aclnn {

// The single dtype dispatch: FFI element type -> aclDataType.
ffi::ErrorOr<aclDataType> ToAclDataType(ffi::DataType t);

// A non-zero aclnnStatus as an ffi::Error naming the call, the status and
// the provider's last-error message: INVALID_ARGUMENT for parameter errors
// (161001, 161002), INTERNAL for runtime and inner errors.
ffi::Error StatusError(const AclnnApi& api, const std::string& call, aclnnStatus status);

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_FFI_STATUS_H_
