// The test provider's recording operator of any prototype,
// aclnnRecordDynamic (tests/test_declare_fuzz.py): its parameter list is set
// at run time by jaxAclnnTestSetDynamicPrototype, one letter per parameter
// before workspaceSize and executor:
//   t const aclTensor*    T aclTensor*      l const aclTensorList*  L aclTensorList*
//   s const aclScalar*    I const aclIntArray*  B const aclBoolArray*  F const aclFloatArray*
//   b bool  1 int8_t  4 int32_t  8 int64_t  d double  f float  c const char*
// Its first phase is one libffi closure of that signature, re-prepared for
// each prototype at the same code address: the exported symbol is a GNU
// indirect function whose resolver (dlsym calls it) returns that address, so
// a caller that looked the symbol up once calls the current prototype. Like
// the other recording operators (recording.h) it logs every argument it
// receives; its second phase writes into each output tensor k (a list's
// tensors counted one by one) at every element the value
//   float(k + 1) + the sum, in input order, of the float32 input tensors that
//   broadcast to the output's shape (NumPy's rule), each at that element,
// added in float and rounded to the output's dtype (f32, f16, bf16, f64).
#include <ffi.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ffi/arguments.h"
#include "testing/recording.h"

namespace jax_aclnn::test_provider {
namespace {

constexpr const char* kOperator = "aclnnRecordDynamic";
constexpr const char* kLetters = "tTlLsIBFb148dfc";

ffi_type* TypeOf(char letter) {
  switch (letter) {
    case 'b': return &ffi_type_uint8;  // C's bool: one byte, 0 or 1
    case '1': return &ffi_type_sint8;
    case '4': return &ffi_type_sint32;
    case '8': return &ffi_type_sint64;
    case 'd': return &ffi_type_double;
    case 'f': return &ffi_type_float;
    default: return &ffi_type_pointer;
  }
}

// The prototype now, and the closure of its first phase.
struct Dynamic {
  std::mutex mutex;
  std::string kinds;
  ffi_type* types[kMaxParameters + 2];
  ffi_cif cif;
  ffi_closure* closure = nullptr;
  void* code = nullptr;  // the closure's address, the same for every prototype
};

Dynamic& State() {
  static Dynamic state;  // made on first use: the resolver may come first
  return state;
}

template <typename T>
T Arg(void* const* args, size_t i) {
  T v;
  std::memcpy(&v, args[i], sizeof v);
  return v;
}

// ---- The second phase.

uint16_t FloatToHalf(float value) {  // rounded to nearest even
  uint32_t x;
  std::memcpy(&x, &value, sizeof x);
  const uint16_t sign = (x >> 16) & 0x8000;
  x &= 0x7fffffff;
  if (x > 0x7f800000) return sign | 0x7e00;     // NaN
  if (x >= 0x477ff000) return sign | 0x7c00;    // 65520 and up round to infinity
  if (x < 0x38800000) {                         // below 2^-14: a subnormal half
    float magnitude;
    std::memcpy(&magnitude, &x, sizeof magnitude);
    return sign | static_cast<uint16_t>(__builtin_nearbyintf(magnitude * 16777216.0f));
  }
  x += 0xfff + ((x >> 13) & 1);
  return sign | static_cast<uint16_t>((x - 0x38000000) >> 13);  // exponent bias 127 -> 15
}

uint16_t FloatToBf16(float value) {  // rounded to nearest even
  uint32_t x;
  std::memcpy(&x, &value, sizeof x);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // NaN
  return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

aclnnStatus Store(const Slot& out, int64_t i, float v) {
  switch (out.tensor->dtype) {
    case ACL_FLOAT: static_cast<float*>(out.data)[i] = v; break;
    case ACL_DOUBLE: static_cast<double*>(out.data)[i] = v; break;
    case ACL_FLOAT16: static_cast<uint16_t*>(out.data)[i] = FloatToHalf(v); break;
    case ACL_BF16: static_cast<uint16_t*>(out.data)[i] = FloatToBf16(v); break;
    default:
      return Fail(ACLNN_ERR_PARAM_INVALID, "%s: an output of data type %s", kOperator,
                  DtypeName(out.tensor->dtype).c_str());
  }
  return ACLNN_SUCCESS;
}

// An input's element strides along the output's dimensions (0 where it
// broadcasts), or false when it does not broadcast to them.
bool BroadcastStrides(const aclTensor* in, const std::vector<int64_t>& dims,
                      std::vector<int64_t>* strides) {
  const size_t rank = dims.size(), in_rank = in->dims.size();
  if (in_rank > rank) return false;
  strides->assign(rank, 0);
  int64_t stride = 1;
  for (size_t d = in_rank; d-- > 0;) {
    const int64_t n = in->dims[d], axis = d + rank - in_rank;
    if (n != dims[axis] && n != 1) return false;
    (*strides)[axis] = n == 1 ? 0 : stride;
    stride *= n;
  }
  return true;
}

aclnnStatus Fill(const std::vector<Slot>& in, const std::vector<Slot>& out) {
  for (size_t k = 0; k < out.size(); ++k) {
    const Slot& o = out[k];
    if (o.tensor == nullptr) continue;
    const std::vector<int64_t>& dims = o.tensor->dims;
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<const float*> sources;
    std::vector<std::vector<int64_t>> strides;
    for (const Slot& s : in) {
      std::vector<int64_t> st;
      if (s.tensor != nullptr && s.tensor->dtype == ACL_FLOAT &&
          BroadcastStrides(s.tensor, dims, &st)) {
        sources.push_back(Floats(s));
        strides.push_back(std::move(st));
      }
    }
    if (n > 0 && o.data == nullptr)
      return Fail(ACLNN_ERR_PARAM_NULLPTR, "%s: output %zu has no data", kOperator, k);
    std::vector<int64_t> index(dims.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
      float v = static_cast<float>(k + 1);
      for (size_t j = 0; j < sources.size(); ++j) {
        int64_t at = 0;
        for (size_t d = 0; d < dims.size(); ++d) at += index[d] * strides[j][d];
        v += sources[j][at];
      }
      RETURN_IF_ERROR(Store(o, i, v));
      for (size_t d = dims.size(); d-- > 0 && ++index[d] == dims[d];) index[d] = 0;
    }
  }
  return ACLNN_SUCCESS;
}

// ---- The first phase: the closure's function.

void FirstPhase(ffi_cif*, void* result, void** args, void*) {
  const std::string& kinds = State().kinds;  // the closure's cif is this prototype's
  const size_t n = kinds.size();
  Recorder r;
  for (size_t i = 0; i < n; ++i) {
    switch (kinds[i]) {
      case 't': r.Arg(Arg<const aclTensor*>(args, i)); break;
      case 'T': r.Arg(Arg<aclTensor*>(args, i)); break;
      case 'l': r.Arg(Arg<const aclTensorList*>(args, i)); break;
      case 'L': r.Arg(Arg<aclTensorList*>(args, i)); break;
      case 's': r.Arg(Arg<const aclScalar*>(args, i)); break;
      case 'I': r.Arg(Arg<const aclIntArray*>(args, i)); break;
      case 'B': r.Arg(Arg<const aclBoolArray*>(args, i)); break;
      case 'F': r.Arg(Arg<const aclFloatArray*>(args, i)); break;
      case 'b': r.Arg(Arg<uint8_t>(args, i) != 0); break;
      case '1': r.Arg(Arg<int8_t>(args, i)); break;
      case '4': r.Arg(Arg<int32_t>(args, i)); break;
      case '8': r.Arg(Arg<int64_t>(args, i)); break;
      case 'd': r.Arg(Arg<double>(args, i)); break;
      case 'f': r.Arg(Arg<float>(args, i)); break;
      case 'c': r.Arg(Arg<const char*>(args, i)); break;
    }
  }
  const aclnnStatus status = MakeRecordingExecutor(
      kOperator, std::move(r), Fill, Arg<uint64_t*>(args, n), Arg<aclOpExecutor**>(args, n + 1));
  *static_cast<ffi_sarg*>(result) = status;  // a narrower return value fills an ffi_sarg
}

// Prepares the closure for `kinds` (state.mutex held); false if libffi cannot.
bool Prepare(Dynamic& state, std::string kinds) {
  if (state.closure == nullptr) {
    state.closure = static_cast<ffi_closure*>(ffi_closure_alloc(sizeof(ffi_closure), &state.code));
    if (state.closure == nullptr) return false;
  }
  const unsigned n = kinds.size();
  for (unsigned i = 0; i < n; ++i) state.types[i] = TypeOf(kinds[i]);
  state.types[n] = state.types[n + 1] = &ffi_type_pointer;  // workspaceSize, executor
  state.kinds = std::move(kinds);
  if (ffi_prep_cif(&state.cif, FFI_DEFAULT_ABI, n + 2, &ffi_type_sint32, state.types) != FFI_OK)
    return false;
  // Again for every prototype: the entry libffi chooses depends on it (one
  // that saves the vector registers where there are floating arguments).
  return ffi_prep_closure_loc(state.closure, &state.cif, FirstPhase, nullptr, state.code) ==
         FFI_OK;
}

}  // namespace
}  // namespace jax_aclnn::test_provider

using FirstPhaseFunction = aclnnStatus (*)(void);

// The resolver of the indirect function below (dlsym calls it): the
// closure, prepared for no parameters until a prototype is set.
extern "C" FirstPhaseFunction jaxAclnnTestResolveRecordDynamic(void) {
  using namespace jax_aclnn::test_provider;  // NOLINT
  Dynamic& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.code == nullptr && !Prepare(state, "")) return nullptr;
  return reinterpret_cast<FirstPhaseFunction>(state.code);
}

// aclnnStatus aclnnRecordDynamicGetWorkspaceSize(<the prototype set>,
//     uint64_t* workspaceSize, aclOpExecutor** executor)
EXPORT aclnnStatus aclnnRecordDynamicGetWorkspaceSize(void)
    __attribute__((ifunc("jaxAclnnTestResolveRecordDynamic")));

JAX_ACLNN_TEST_SECOND_PHASE(RecordDynamic)

// Sets aclnnRecordDynamicGetWorkspaceSize's parameters before workspaceSize
// and executor (the letters above); returns 0, or -1 for a letter that is
// none of them or more than kMaxParameters parameters, or when libffi cannot
// prepare the closure. A call in flight keeps the prototype it was made with
// only if none is set meanwhile: set it between calls.
EXPORT int jaxAclnnTestSetDynamicPrototype(const char* kinds) {
  using namespace jax_aclnn::test_provider;  // NOLINT
  const std::string k = kinds ? kinds : "";
  if (k.size() > static_cast<size_t>(jax_aclnn::kMaxParameters) ||
      k.find_first_not_of(kLetters) != std::string::npos)
    return -1;
  Dynamic& state = State();
  std::lock_guard<std::mutex> lock(state.mutex);
  return Prepare(state, k) ? 0 : -1;
}
