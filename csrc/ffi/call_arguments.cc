#include "ffi/call_arguments.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace jax_aclnn {
namespace {

// The attributes' values, taken in parameter order.
class Values {
 public:
  explicit Values(const CallAttributes& a) : a_(a) {}
  ffi::ErrorOr<int64_t> Int() { return One<int64_t>(); }
  ffi::ErrorOr<double> Float() { return One<double>(); }
  // The next n values of ints (T = int64_t) or floats (T = double), in place.
  template <typename T>
  ffi::ErrorOr<const T*> Many(int64_t n) {
    constexpr bool kFloats = std::is_same_v<T, double>;
    const ffi::Span<const T>& span = Of<T>(a_.ints, a_.floats);
    size_t& next = Of<T>(next_int_, next_float_);
    if (n < 0 || static_cast<size_t>(n) > span.size() - next)
      return ffi::Unexpected(Short(kFloats ? "floats" : "ints"));
    const T* p = span.begin() + next;
    next += n;
    return p;
  }
  // The next NUL-terminated string of `strings`.
  ffi::ErrorOr<const char*> String() {
    const size_t end = a_.strings.find('\0', next_string_);
    if (end == std::string_view::npos) return ffi::Unexpected(Short("strings"));
    const char* s = a_.strings.data() + next_string_;
    next_string_ = end + 1;
    return s;
  }

 private:
  template <typename T>
  ffi::ErrorOr<T> One() {
    ffi::ErrorOr<const T*> p = Many<T>(1);
    if (p.has_error()) return ffi::Unexpected(p.error());
    return **p;
  }
  // The ints' member for T = int64_t, the floats' for T = double.
  template <typename T, typename Ints, typename Floats>
  static auto& Of(Ints& ints, Floats& floats) {
    if constexpr (std::is_same_v<T, double>) return floats;
    else return ints;
  }
  static ffi::Error Short(const char* what) {
    return Invalid(std::string("the custom call's '") + what +
                   "' attribute holds fewer values than its 'kinds' take");
  }
  const CallAttributes& a_;
  size_t next_int_ = 0, next_float_ = 0, next_string_ = 0;
};

#define JAX_ACLNN_TRY(var, expr)                 \
  auto var##_or = (expr);                        \
  if (var##_or.has_error()) return var##_or.error(); \
  auto var = *var##_or

// The next operand (result) buffer's descriptor, or null for a placeholder.
ffi::ErrorOr<aclTensor*> NextTensor(const Call& c, Built& b, bool output, bool absent,
                                    int* next) {
  const int i = (*next)++;
  const size_t count = output ? c.out.size() : c.in.size();
  if (i >= static_cast<int>(count))
    return ffi::Unexpected(Invalid(std::string("the custom call has fewer ") +
                                   (output ? "results" : "operands") + " than its 'kinds' take"));
  if (absent) return static_cast<aclTensor*>(nullptr);
  if (output) {
    auto r = c.out.get<ffi::AnyBuffer>(i);
    if (r.has_error()) return ffi::Unexpected(r.error());
    return b.d.Tensor(&**r);
  }
  auto a = c.in.get<ffi::AnyBuffer>(i);
  if (a.has_error()) return ffi::Unexpected(a.error());
  return b.d.Tensor(&*a);
}

// Room for n more bool or float array values: their offset in Built's arrays.
ffi::ErrorOr<int> ArrayStorage(Built& b, int64_t n) {
  if (n < 0 || n > kMaxArrayValues - b.num_array_values)
    return ffi::Unexpected(Invalid("more bool and float array values than one call takes (" +
                                   std::to_string(kMaxArrayValues) + ")"));
  const int offset = b.num_array_values;
  b.num_array_values += static_cast<int>(n);
  return offset;
}

// A plain C argument of `kind`: the integer kinds take `i`, the floating
// ones `f`.
void SetPlain(ArgKind kind, int64_t i, double f, Argument& arg) {
  using Type = Argument::Type;
  switch (kind) {
    case ArgKind::kBool: arg.type = Type::kBool, arg.value.b = i != 0; break;
    case ArgKind::kInt8: arg.type = Type::kInt8, arg.value.i8 = static_cast<int8_t>(i); break;
    case ArgKind::kInt32: arg.type = Type::kInt32, arg.value.i32 = static_cast<int32_t>(i); break;
    case ArgKind::kInt64: arg.type = Type::kInt64, arg.value.i64 = i; break;
    case ArgKind::kFloat: arg.type = Type::kFloat, arg.value.f = static_cast<float>(f); break;
    default: arg.type = Type::kDouble, arg.value.d = f; break;
  }
}

// An array argument: n, then n values of the attributes' T, made into an
// array of E by `make` (b.d's IntArray, BoolArray or FloatArray), converted
// in Built's storage where E is not T.
template <typename T, typename E, typename Array>
ffi::Error MakeArray(Values& v, Built& b,
                     ffi::ErrorOr<Array*> (Descriptors::*make)(const E*, uint64_t),
                     void** pointer) {
  JAX_ACLNN_TRY(n, v.Int());
  JAX_ACLNN_TRY(values, v.Many<T>(n));
  const E* elements;
  if constexpr (std::is_same_v<E, T>) {
    elements = values;
  } else {
    JAX_ACLNN_TRY(offset, ArrayStorage(b, n));
    E* converted;
    if constexpr (std::is_same_v<E, bool>) converted = b.bools + offset;
    else converted = b.floats + offset;
    for (int64_t i = 0; i < n; ++i) converted[i] = static_cast<E>(values[i]);
    elements = converted;
  }
  JAX_ACLNN_TRY(array, (b.d.*make)(elements, static_cast<uint64_t>(n)));
  *pointer = array;
  return ffi::Error::Success();
}

// One parameter's argument.
ffi::Error BuildOne(const Call& c, ArgKind kind, Values& v, Built& b, int* next_in,
                    int* next_out) {
  Argument& arg = b.args.items[b.args.size];
  arg.type = Argument::Type::kPointer;
  switch (kind) {
    case ArgKind::kInput:
    case ArgKind::kAbsentInput:
    case ArgKind::kOutput:
    case ArgKind::kAbsentOutput: {
      const bool output = kind == ArgKind::kOutput || kind == ArgKind::kAbsentOutput;
      const bool absent = kind == ArgKind::kAbsentInput || kind == ArgKind::kAbsentOutput;
      JAX_ACLNN_TRY(t, NextTensor(c, b, output, absent, output ? next_out : next_in));
      int& n = output ? b.num_outputs : b.num_inputs;
      (output ? b.outputs : b.inputs)[n++] = t;
      arg.value.pointer = t;
      break;
    }
    case ArgKind::kInOut:
    case ArgKind::kAbsentInOut: {
      // Updated in place (CANN's xxxRef): the operand's buffer is the
      // result's (input_output_aliases), described once, as an output. Its
      // executor is not re-targeted (CANN does not document at which index
      // an in-place tensor is an input and an output), as for tensor lists.
      const bool absent = kind == ArgKind::kAbsentInOut;
      JAX_ACLNN_TRY(in, NextTensor(c, b, false, true, next_in));
      (void)in;
      JAX_ACLNN_TRY(t, NextTensor(c, b, true, absent, next_out));
      b.outputs[b.num_outputs++] = t;
      b.one_shot = true;
      arg.value.pointer = t;
      break;
    }
    case ArgKind::kNull: arg.value.pointer = nullptr; break;
    case ArgKind::kScalar: {
      JAX_ACLNN_TRY(dtype, v.Int());
      const bool floating = dtype == ACL_FLOAT || dtype == ACL_DOUBLE;
      double value = 0;
      int64_t integer = 0;
      if (floating) {
        JAX_ACLNN_TRY(f, v.Float());
        value = f;
      } else {
        JAX_ACLNN_TRY(i, v.Int());
        integer = i;
      }
      JAX_ACLNN_TRY(s, b.d.Scalar(static_cast<aclDataType>(dtype), value, integer));
      arg.value.pointer = s;
      break;
    }
    case ArgKind::kBool:
    case ArgKind::kInt8:
    case ArgKind::kInt32:
    case ArgKind::kInt64: {
      JAX_ACLNN_TRY(i, v.Int());
      SetPlain(kind, i, 0, arg);
      break;
    }
    case ArgKind::kDouble:
    case ArgKind::kFloat: {
      JAX_ACLNN_TRY(f, v.Float());
      SetPlain(kind, 0, f, arg);
      break;
    }
    case ArgKind::kIntArray:
    case ArgKind::kBoolArray:
    case ArgKind::kFloatArray: {
      void** a = &arg.value.pointer;
      ffi::Error e = kind == ArgKind::kIntArray    ? MakeArray<int64_t>(v, b, &Descriptors::IntArray, a)
                     : kind == ArgKind::kBoolArray ? MakeArray<int64_t>(v, b, &Descriptors::BoolArray, a)
                                                   : MakeArray<double>(v, b, &Descriptors::FloatArray, a);
      if (e.failure()) return e;
      break;
    }
    case ArgKind::kInputList:
    case ArgKind::kOutputList: {
      JAX_ACLNN_TRY(n, v.Int());
      if (n < 0 || n > kMaxTensors) return Invalid("a tensor list of " + std::to_string(n));
      const bool output = kind == ArgKind::kOutputList;
      for (int64_t i = 0; i < n; ++i) {
        JAX_ACLNN_TRY(t, NextTensor(c, b, output, false, output ? next_out : next_in));
        (void)t;
      }
      JAX_ACLNN_TRY(list, b.d.TensorList(static_cast<int>(n)));
      b.one_shot = true;
      arg.value.pointer = list;
      break;
    }
    case ArgKind::kString: {
      JAX_ACLNN_TRY(s, v.String());
      arg.value.pointer = const_cast<char*>(s);
      break;
    }
    default:
      return Invalid("unknown argument kind " + std::to_string(static_cast<int64_t>(kind)));
  }
  ++b.args.size;
  return ffi::Error::Success();
}

#undef JAX_ACLNN_TRY

}  // namespace

ffi::Error Build(const Call& c, Built& b) {
  if (c.attrs.kinds.size() > static_cast<size_t>(kMaxParameters))
    return Invalid("more than " + std::to_string(kMaxParameters) + " parameters");
  Values v(c.attrs);
  int next_in = 0, next_out = 0;
  for (int64_t k : c.attrs.kinds)
    if (ffi::Error e = BuildOne(c, static_cast<ArgKind>(k), v, b, &next_in, &next_out);
        e.failure())
      return e;
  if (next_in != static_cast<int>(c.in.size()) || next_out != static_cast<int>(c.out.size()))
    return Invalid("the custom call's buffers are not those its 'kinds' take");
  return ffi::Error::Success();
}

}  // namespace jax_aclnn
