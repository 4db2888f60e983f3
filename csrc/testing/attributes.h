// The attributes of a call frame of the test-only XLA FFI runtime
// (jax_aclnn._ffi_testing, module.cc), made from Python values and laid out
// as XLA lays them out.
#ifndef JAX_ACLNN_TESTING_ATTRIBUTES_H_
#define JAX_ACLNN_TESTING_ATTRIBUTES_H_

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "xla/ffi/api/c_api.h"

namespace nb = nanobind;

namespace jax_aclnn::testing {

inline XLA_FFI_DataType DataTypeOf(const std::string& name) {
  static const std::pair<const char*, XLA_FFI_DataType> kTypes[] = {
      {"float32", XLA_FFI_DataType_F32}, {"float16", XLA_FFI_DataType_F16},
      {"bfloat16", XLA_FFI_DataType_BF16}, {"float64", XLA_FFI_DataType_F64},
      {"int8", XLA_FFI_DataType_S8},     {"int16", XLA_FFI_DataType_S16},
      {"int32", XLA_FFI_DataType_S32},   {"int64", XLA_FFI_DataType_S64},
      {"uint8", XLA_FFI_DataType_U8},    {"uint16", XLA_FFI_DataType_U16},
      {"uint32", XLA_FFI_DataType_U32},  {"uint64", XLA_FFI_DataType_U64},
      {"bool", XLA_FFI_DataType_PRED}};
  for (const auto& [n, t] : kTypes)
    if (name == n) return t;
  throw std::invalid_argument("unsupported data type " + name);
}

// The size of an element of an array attribute of type `t`; 0 for a type an
// array attribute cannot have. (XLA's call frames make arrays of intN_t, float
// and double; ffi.h decodes uintN_t ones too; bool ones are this runtime's.)
inline size_t AttributeElementSize(XLA_FFI_DataType t) {
  switch (t) {
    case XLA_FFI_DataType_PRED:
    case XLA_FFI_DataType_S8:
    case XLA_FFI_DataType_U8: return 1;
    case XLA_FFI_DataType_S16:
    case XLA_FFI_DataType_U16: return 2;
    case XLA_FFI_DataType_S32:
    case XLA_FFI_DataType_U32:
    case XLA_FFI_DataType_F32: return 4;
    case XLA_FFI_DataType_S64:
    case XLA_FFI_DataType_U64:
    case XLA_FFI_DataType_F64: return 8;
    default: return 0;
  }
}

// Attributes sorted by name (bytewise), as XLA passes them to a handler, in
// the structs of XLA's call frames (xla/ffi/call_frame.cc): a scalar an
// XLA_FFI_Scalar {dtype, value}, a 1-D array an XLA_FFI_Array {dtype, size,
// data} (data null when empty, as an empty std::vector's), a string an
// XLA_FFI_ByteSpan {ptr, len} (its length is len: its bytes may include NULs).
// The object owns all the storage they point to.
class Attributes {
 public:
  // `attrs`: {name: value}, a value being
  //   (dtype name, value)      a scalar: "bool", "int8" ... "int64",
  //                            "uint8" ... "uint64", "float32" or "float64";
  //   a 1-D numpy array        an array of the array's dtype (one of those);
  //   str or bytes             a string (a str's UTF-8 bytes), its byte length
  //                            from Python, embedded NULs kept.
  explicit Attributes(const nb::dict& attrs) {
    for (auto [key, item] : attrs) {
      Attr& a = attrs_.emplace_back();
      a.name = nb::cast<std::string>(key);
      try {
        Parse(a, item);
      } catch (const nb::python_error&) {
        throw;
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("attribute " + a.name + ": " + e.what());
      } catch (const nb::cast_error&) {
        throw nb::type_error(("attribute " + a.name + ": a value of the wrong type or range: " +
                              nb::repr(item).c_str())
                                 .c_str());
      }
    }
    std::sort(attrs_.begin(), attrs_.end(),
              [](const Attr& x, const Attr& y) { return x.name < y.name; });
    // Pointers into attrs_ (and into the storage its elements own), which no
    // longer moves.
    for (Attr& a : attrs_) {
      a.span = {a.name.data(), a.name.size()};
      types_.push_back(a.type);
      names_.push_back(&a.span);
      switch (a.type) {
        case XLA_FFI_AttrType_SCALAR:
          a.scalar.value = a.value;
          pointers_.push_back(&a.scalar);
          break;
        case XLA_FFI_AttrType_ARRAY:
          a.array.data = a.array.size == 0 ? nullptr : a.elements.data();
          pointers_.push_back(&a.array);
          break;
        default:  // XLA_FFI_AttrType_STRING
          a.string = {a.bytes.data(), a.bytes.size()};
          pointers_.push_back(&a.string);
          break;
      }
    }
  }
  Attributes(const Attributes&) = delete;
  Attributes& operator=(const Attributes&) = delete;

  XLA_FFI_Attrs Frame() {
    return {XLA_FFI_Attrs_STRUCT_SIZE, nullptr, static_cast<int64_t>(attrs_.size()),
            types_.data(), names_.data(), pointers_.data()};
  }

 private:
  struct Attr {
    std::string name;
    XLA_FFI_ByteSpan span;  // the name
    XLA_FFI_AttrType type;
    // SCALAR
    XLA_FFI_Scalar scalar;
    alignas(8) unsigned char value[8];
    // ARRAY: the elements in words, aligned for any element type
    XLA_FFI_Array array;
    std::vector<uint64_t> elements;
    // STRING
    XLA_FFI_ByteSpan string;
    std::string bytes;
  };

  static void Parse(Attr& a, nb::handle item) {
    if (nb::isinstance<nb::str>(item)) {
      a.type = XLA_FFI_AttrType_STRING;
      a.bytes = nb::cast<std::string>(item);  // UTF-8, of the str's byte length
    } else if (nb::isinstance<nb::bytes>(item)) {
      a.type = XLA_FFI_AttrType_STRING;
      nb::bytes b = nb::borrow<nb::bytes>(item);
      a.bytes.assign(b.c_str(), b.size());
    } else if (nb::isinstance<nb::tuple>(item)) {
      a.type = XLA_FFI_AttrType_SCALAR;
      ParseScalar(a, item);
    } else if (nb::hasattr(item, "dtype") && nb::hasattr(item, "tobytes")) {
      a.type = XLA_FFI_AttrType_ARRAY;
      ParseArray(a, item);
    } else {
      throw nb::type_error(("attribute " + a.name +
                            ": expected (dtype, scalar), a 1-D numpy array, str or bytes")
                               .c_str());
    }
  }

  static void ParseScalar(Attr& a, nb::handle item) {
    auto [dtype, value] = nb::cast<std::pair<std::string, nb::object>>(item);
    a.scalar.dtype = DataTypeOf(dtype);
    switch (a.scalar.dtype) {
      case XLA_FFI_DataType_PRED: Store(a, nb::cast<bool>(value)); break;
      case XLA_FFI_DataType_S8: Store(a, nb::cast<int8_t>(value)); break;
      case XLA_FFI_DataType_S16: Store(a, nb::cast<int16_t>(value)); break;
      case XLA_FFI_DataType_S32: Store(a, nb::cast<int32_t>(value)); break;
      case XLA_FFI_DataType_S64: Store(a, nb::cast<int64_t>(value)); break;
      case XLA_FFI_DataType_U8: Store(a, nb::cast<uint8_t>(value)); break;
      case XLA_FFI_DataType_U16: Store(a, nb::cast<uint16_t>(value)); break;
      case XLA_FFI_DataType_U32: Store(a, nb::cast<uint32_t>(value)); break;
      case XLA_FFI_DataType_U64: Store(a, nb::cast<uint64_t>(value)); break;
      case XLA_FFI_DataType_F32: Store(a, nb::cast<float>(value)); break;
      case XLA_FFI_DataType_F64: Store(a, nb::cast<double>(value)); break;
      default: throw std::invalid_argument("unsupported scalar type " + dtype);
    }
  }

  // A numpy array (or one with its `ndim`, `dtype` and `tobytes`): its
  // elements in C order, in the process's byte order.
  static void ParseArray(Attr& a, nb::handle item) {
    nb::object dtype = item.attr("dtype");
    const std::string name = nb::cast<std::string>(dtype.attr("name"));
    if (nb::cast<int64_t>(item.attr("ndim")) != 1) {
      nb::object shape = item.attr("shape");
      throw std::invalid_argument(std::string("an array attribute is 1-D, not of shape ") +
                                  nb::str(shape).c_str());
    }
    if (!nb::cast<bool>(dtype.attr("isnative")))
      throw std::invalid_argument("an array of non-native byte order (" + name + ")");
    a.array.dtype = DataTypeOf(name);
    const size_t element_size = AttributeElementSize(a.array.dtype);
    if (element_size == 0) throw std::invalid_argument("unsupported array type " + name);
    nb::bytes data = nb::cast<nb::bytes>(item.attr("tobytes")());
    if (data.size() % element_size != 0)
      throw std::invalid_argument("an array of " + std::to_string(data.size()) + " bytes (" +
                                  name + ")");
    a.array.size = data.size() / element_size;
    a.elements.resize((data.size() + sizeof(uint64_t) - 1) / sizeof(uint64_t));
    if (data.size() != 0) std::memcpy(a.elements.data(), data.c_str(), data.size());
  }

  template <typename T>
  static void Store(Attr& a, T v) {
    static_assert(sizeof(T) <= sizeof(a.value));
    std::memcpy(a.value, &v, sizeof(T));
  }

  std::vector<Attr> attrs_;
  std::vector<XLA_FFI_AttrType> types_;
  std::vector<XLA_FFI_ByteSpan*> names_;
  std::vector<void*> pointers_;
};

}  // namespace jax_aclnn::testing

#endif  // JAX_ACLNN_TESTING_ATTRIBUTES_H_
