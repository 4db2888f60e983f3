// aclTensor / aclScalar descriptors of one call (Descriptors), made by the
// handlers for an operator's buffers and attributes.
#ifndef JAX_ACLNN_FFI_DESCRIPTORS_H_
#define JAX_ACLNN_FFI_DESCRIPTORS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "aclnn_abi.h"
#include "ffi/provider.h"
#include "ffi/stats.h"
#include "ffi/status.h"
#include "xla/ffi/api/ffi.h"

namespace jax_aclnn {

constexpr int kMaxInputs = 5, kMaxOutputs = 4;

// aclTensor / aclScalar descriptors of one call, destroyed together. The
// capacity covers every operator's buffers and attributes; running past it
// is an error, never a write out of bounds.
class Descriptors {
 public:
  explicit Descriptors(const AclnnApi& api) : api_(&api) {}
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    for (int i = 0; i < num_tensors_; ++i) api_->aclDestroyTensor(tensors_[i]);
    for (int i = 0; i < num_scalars_; ++i) api_->aclDestroyScalar(scalars_[i]);
    Count(Stats().live_tensors, -(num_tensors_ + num_scalars_));
  }

  // A contiguous ND descriptor of `buffer` (null buffer: null descriptor).
  ffi::ErrorOr<aclTensor*> Tensor(const ffi::AnyBuffer* buffer) {
    if (buffer == nullptr) return static_cast<aclTensor*>(nullptr);
    if (num_tensors_ == static_cast<int>(tensors_.size())) return ffi::Unexpected(Full("tensor"));
    ffi::ErrorOr<aclDataType> dtype = ToAclDataType(buffer->element_type());
    if (dtype.has_error()) return ffi::Unexpected(dtype.error());
    auto dims = buffer->dimensions();
    std::array<int64_t, 8> strides{};
    if (dims.size() > strides.size())
      return ffi::Unexpected(ffi::Error::InvalidArgument("jax_aclnn: rank above 8"));
    int64_t stride = 1;
    for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
      strides[d] = stride;
      stride *= dims[d];
    }
    aclTensor* t = api_->aclCreateTensor(dims.begin(), dims.size(), *dtype, strides.data(), 0,
                                         ACL_FORMAT_ND, dims.begin(), dims.size(),
                                         buffer->untyped_data());
    if (t == nullptr)
      return ffi::Unexpected(StatusError(*api_, "aclCreateTensor", ACLNN_ERR_INNER_NULLPTR));
    tensors_[num_tensors_++] = t;
    Count(Stats().live_tensors);
    return t;
  }

  // An attribute as an aclScalar. Called by an operator's first phase,
  // which can only answer with an aclnnStatus: the error is also kept for
  // failure().
  ffi::ErrorOr<aclScalar*> Scalar(float value) {
    if (num_scalars_ == static_cast<int>(scalars_.size())) {
      failure_ = Full("scalar");
      return ffi::Unexpected(*failure_);
    }
    aclScalar* s = api_->aclCreateScalar(&value, ACL_FLOAT);
    if (s == nullptr) {
      failure_ = StatusError(*api_, "aclCreateScalar", ACLNN_ERR_INNER_NULLPTR);
      return ffi::Unexpected(*failure_);
    }
    scalars_[num_scalars_++] = s;
    Count(Stats().live_tensors);
    return s;
  }

  const std::optional<ffi::Error>& failure() const { return failure_; }

 private:
  static ffi::Error Full(const char* what) {
    return ffi::Error::Internal(std::string("jax_aclnn: more ") + what +
                                " descriptors than one call has");
  }

  const AclnnApi* api_;
  std::array<aclTensor*, kMaxInputs + kMaxOutputs> tensors_{};
  std::array<aclScalar*, 2> scalars_{};
  int num_tensors_ = 0, num_scalars_ = 0;
  std::optional<ffi::Error> failure_;
};

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_FFI_DESCRIPTORS_H_
