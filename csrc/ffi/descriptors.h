// The aclnn descriptors of one call (Descriptors): aclTensor for the
// buffers, aclScalar, aclIntArray, aclBoolArray, aclFloatArray and
// aclTensorList for the other arguments, all destroyed together.
#ifndef JAX_ACLNN_FFI_DESCRIPTORS_H_
#define JAX_ACLNN_FFI_DESCRIPTORS_H_

#include <array>
#include <cstdint>
#include <string>

#include "aclnn_abi.h"
#include "ffi/arguments.h"
#include "ffi/provider.h"
#include "ffi/stats.h"
#include "ffi/status.h"
#include "xla/ffi/api/ffi.h"

namespace jax_aclnn {

// Descriptors of one call, destroyed together (a tensor list destroys its
// own tensors, as CANN's aclDestroyTensorList does). The capacities bound
// every call (ffi/arguments.h); running past them is an error, never a
// write out of bounds.
class Descriptors {
 public:
  explicit Descriptors(const AclnnApi& api) : api_(&api) {}
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    for (int i = 0; i < num_tensors_; ++i)
      if (!listed_[i]) api_->aclDestroyTensor(tensors_[i]);
    for (int i = 0; i < num_others_; ++i) others_[i].destroy(*api_, others_[i].handle);
    Count(Stats().live_tensors, -(num_tensors_ + num_others_));
  }

  // A contiguous ND descriptor of `buffer` (null buffer: null descriptor).
  ffi::ErrorOr<aclTensor*> Tensor(const ffi::AnyBuffer* buffer) {
    if (buffer == nullptr) return static_cast<aclTensor*>(nullptr);
    if (num_tensors_ == kMaxTensors) return ffi::Unexpected(Full("tensor"));
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
    if (t == nullptr) return ffi::Unexpected(Failed("aclCreateTensor"));
    listed_[num_tensors_] = false;
    tensors_[num_tensors_++] = t;
    Count(Stats().live_tensors);
    return t;
  }

  // An aclScalar of `dtype` holding `value` (an integer dtype takes
  // `integer`).
  ffi::ErrorOr<aclScalar*> Scalar(aclDataType dtype, double value, int64_t integer) {
    union {
      float f;
      double d;
      int64_t i64;
      int32_t i32;
      int8_t i8;
      bool b;
    } v{};
    switch (dtype) {
      case ACL_FLOAT: v.f = static_cast<float>(value); break;
      case ACL_DOUBLE: v.d = value; break;
      case ACL_INT64: v.i64 = integer; break;
      case ACL_INT32: v.i32 = static_cast<int32_t>(integer); break;
      case ACL_INT8: v.i8 = static_cast<int8_t>(integer); break;
      case ACL_BOOL: v.b = integer != 0; break;
      default:
        return ffi::Unexpected(ffi::Error::InvalidArgument(
            "jax_aclnn: aclScalar of aclDataType " + std::to_string(dtype) +
            " (supported: ACL_FLOAT, ACL_DOUBLE, ACL_INT64, ACL_INT32, ACL_INT8, ACL_BOOL)"));
    }
    return Other<aclScalar>("aclCreateScalar", api_->aclCreateScalar, api_->aclDestroyScalar,
                            static_cast<void*>(&v), dtype);
  }

  ffi::ErrorOr<aclIntArray*> IntArray(const int64_t* values, uint64_t n) {
    return Other<aclIntArray>("aclCreateIntArray", api_->aclCreateIntArray,
                              api_->aclDestroyIntArray, values, n);
  }
  ffi::ErrorOr<aclBoolArray*> BoolArray(const bool* values, uint64_t n) {
    return Other<aclBoolArray>("aclCreateBoolArray", api_->aclCreateBoolArray,
                               api_->aclDestroyBoolArray, values, n);
  }
  ffi::ErrorOr<aclFloatArray*> FloatArray(const float* values, uint64_t n) {
    return Other<aclFloatArray>("aclCreateFloatArray", api_->aclCreateFloatArray,
                                api_->aclDestroyFloatArray, values, n);
  }

  // A list of the last `n` tensors made, which it owns from then on.
  ffi::ErrorOr<aclTensorList*> TensorList(int n) {
    if (n > num_tensors_) return ffi::Unexpected(ffi::Error::Internal("jax_aclnn: tensor list"));
    const int first = num_tensors_ - n;
    auto list = Other<aclTensorList>("aclCreateTensorList", api_->aclCreateTensorList,
                                     api_->aclDestroyTensorList,
                                     const_cast<const aclTensor* const*>(tensors_ + first),
                                     static_cast<uint64_t>(n));
    if (list.has_value())
      for (int i = first; i < num_tensors_; ++i) listed_[i] = true;
    return list;
  }

 private:
  struct Owned {
    void* handle;
    void (*destroy)(const AclnnApi& api, void* handle);
  };

  // Makes a descriptor with `create(args...)` and keeps it for `destroy`.
  template <typename T, typename Create, typename Destroy, typename... Args>
  ffi::ErrorOr<T*> Other(const char* name, Create create, Destroy destroy, Args... args) {
    if (create == nullptr || destroy == nullptr)
      return ffi::Unexpected(ffi::Error(ffi::ErrorCode::kUnimplemented,
                                        std::string("jax_aclnn: the aclnn provider does not "
                                                    "export ") + name));
    if (num_others_ == kMaxOtherDescriptors) return ffi::Unexpected(Full("argument"));
    T* made = create(args...);
    if (made == nullptr) return ffi::Unexpected(Failed(name));
    others_[num_others_++] = {made, &DestroyAs<T>};
    Count(Stats().live_tensors);
    return made;
  }

  template <typename T>
  static void DestroyAs(const AclnnApi& api, void* handle) {
    const T* h = static_cast<const T*>(handle);
    if constexpr (std::is_same_v<T, aclScalar>) api.aclDestroyScalar(h);
    else if constexpr (std::is_same_v<T, aclIntArray>) api.aclDestroyIntArray(h);
    else if constexpr (std::is_same_v<T, aclBoolArray>) api.aclDestroyBoolArray(h);
    else if constexpr (std::is_same_v<T, aclFloatArray>) api.aclDestroyFloatArray(h);
    else api.aclDestroyTensorList(h);
  }

  ffi::Error Failed(const char* name) const {
    return StatusError(*api_, name, ACLNN_ERR_INNER_NULLPTR);
  }
  static ffi::Error Full(const char* what) {
    return ffi::Error::InvalidArgument(std::string("jax_aclnn: more ") + what +
                                       " descriptors than one call takes");
  }

  // Only the first num_tensors_ (num_others_) entries are set: no call pays
  // for clearing the rest.
  const AclnnApi* api_;
  aclTensor* tensors_[kMaxTensors];
  bool listed_[kMaxTensors];  // owned by a tensor list
  Owned others_[kMaxOtherDescriptors];
  int num_tensors_ = 0, num_others_ = 0;
};

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_FFI_DESCRIPTORS_H_
