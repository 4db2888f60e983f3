// nanobind module jax_aclnn._ffi_testing (test-only): drives FFI handlers as
// XLA does on a device platform. A Handler is registered from its stage
// capsules (with XLA's metadata query) with a runtime of FFI API 0.1, 0.2 or
// 0.3; Handler.instantiate makes a call site of attributes (scalars, 1-D
// arrays, strings) and runs its INSTANTIATE stage, which sets the site's
// state; CallSite.execute builds an XLA_FFI_CallFrame of buffers and
// attributes laid out as XLA lays them out and calls the EXECUTE stage on a
// Device's stream and memory; freeing the call site destroys its state, as
// freeing an XLA executable does.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "testing/attributes.h"
#include "testing/ffi_runtime.h"

namespace nb = nanobind;

namespace jax_aclnn::testing {
namespace {

// The FFI API versions the runtime speaks: 0.1 (jaxlib 0.7), 0.2 (jaxlib 0.8
// and 0.9.0) and 0.3 (jaxlib 0.9.1 on).
constexpr int kNewestApiMinorVersion = 3;

using ErrorInfo = std::optional<std::pair<std::string, std::string>>;  // (code, message)
using BufferSpec = std::tuple<uintptr_t, std::string, std::vector<int64_t>>;

// The XLA_FFI_Buffer structs of one call's arguments or results.
class Buffers {
 public:
  explicit Buffers(const std::vector<BufferSpec>& specs) : dims_(specs.size()) {
    buffers_.reserve(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto& [address, dtype, dims] = specs[i];
      dims_[i] = dims;
      buffers_.push_back({XLA_FFI_Buffer_STRUCT_SIZE, nullptr, DataTypeOf(dtype),
                          reinterpret_cast<void*>(address), static_cast<int64_t>(dims.size()),
                          dims_[i].data()});
    }
    for (XLA_FFI_Buffer& b : buffers_) pointers_.push_back(&b);
  }
  int64_t size() const { return static_cast<int64_t>(buffers_.size()); }
  void** pointers() { return pointers_.data(); }

 private:
  std::vector<std::vector<int64_t>> dims_;
  std::vector<XLA_FFI_Buffer> buffers_;
  std::vector<void*> pointers_;
};

ErrorInfo ToErrorInfo(XLA_FFI_Error* error) {
  if (error == nullptr) return std::nullopt;
  auto [code, message] = TakeError(error);
  return std::make_pair(std::string(ErrorCodeName(code)), std::move(message));
}

// Calls a handler as XLA's runtime does: a C++ exception is an UNKNOWN
// error, and synchronous handlers only (no future).
XLA_FFI_Error* Call(XLA_FFI_Handler* handler, XLA_FFI_CallFrame* frame) {
  XLA_FFI_Error* error = nullptr;
  try {
    error = handler(frame);
  } catch (const std::exception& e) {
    return MakeError(XLA_FFI_Error_Code_UNKNOWN, std::string("XLA FFI call failed: ") + e.what());
  }
  if (error == nullptr && frame->future != nullptr)
    return MakeError(XLA_FFI_Error_Code_UNIMPLEMENTED, "asynchronous handlers (futures)");
  return error;
}

XLA_FFI_CallFrame MakeFrame(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx,
                            XLA_FFI_ExecutionStage stage, Buffers* args, Buffers* rets,
                            Attributes* attrs) {
  static XLA_FFI_ArgType arg_types[16];
  static XLA_FFI_RetType ret_types[16];
  static const bool init = [] {
    std::fill(std::begin(arg_types), std::end(arg_types), XLA_FFI_ArgType_BUFFER);
    std::fill(std::begin(ret_types), std::end(ret_types), XLA_FFI_RetType_BUFFER);
    return true;
  }();
  (void)init;
  const int64_t num_args = args ? args->size() : 0, num_rets = rets ? rets->size() : 0;
  if (num_args > 16 || num_rets > 16) throw std::invalid_argument("at most 16 buffers each");
  XLA_FFI_CallFrame frame{};
  frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  frame.api = api;
  frame.ctx = ctx;
  frame.stage = stage;
  frame.args = {XLA_FFI_Args_STRUCT_SIZE, nullptr, num_args, arg_types,
                args ? args->pointers() : nullptr};
  frame.rets = {XLA_FFI_Rets_STRUCT_SIZE, nullptr, num_rets, ret_types,
                rets ? rets->pointers() : nullptr};
  frame.attrs = attrs->Frame();
  return frame;
}

// What XLA asks a handler at registration (its metadata extension), in the
// runtime's XLA_FFI_Metadata. As XLA, the runtime takes handlers of its own
// FFI API version or an older one. FFI API 0.1's metadata ends at `traits`:
// there the state's type id is 0 (unknown), and the bytes after the struct
// must be left alone.
Metadata QueryMetadata(const XLA_FFI_Api* api, XLA_FFI_Handler* handler) {
  const bool v01 = api->api_version.minor_version < 2;
  constexpr int64_t kUntouched = 0x0dd0'5eed'0dd0'5eed;
  Metadata metadata{v01 ? XLA_FFI_STRUCT_SIZE(Metadata, traits)
                        : XLA_FFI_STRUCT_SIZE(Metadata, state_type_id),
                    XLA_FFI_Api_Version{XLA_FFI_Api_Version_STRUCT_SIZE}, 0,
                    XLA_FFI_TypeId{v01 ? kUntouched : 0}};
  XLA_FFI_Metadata_Extension extension{
      XLA_FFI_Extension_Base{XLA_FFI_Metadata_Extension_STRUCT_SIZE, XLA_FFI_Extension_Metadata},
      reinterpret_cast<XLA_FFI_Metadata*>(&metadata)};
  XLA_FFI_CallFrame frame{};
  frame.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
  frame.extension_start = &extension.extension_base;
  frame.api = api;
  frame.stage = XLA_FFI_ExecutionStage_EXECUTE;
  frame.args.struct_size = XLA_FFI_Args_STRUCT_SIZE;
  frame.rets.struct_size = XLA_FFI_Rets_STRUCT_SIZE;
  frame.attrs.struct_size = XLA_FFI_Attrs_STRUCT_SIZE;
  if (ErrorInfo e = ToErrorInfo(Call(handler, &frame)))
    throw std::runtime_error("metadata query failed: " + e->first + ": " + e->second);
  if (v01) {
    if (metadata.state_type_id.type_id != kUntouched)
      throw std::runtime_error("the handler wrote past FFI API 0.1's XLA_FFI_Metadata");
    metadata.state_type_id = XLA_FFI_UNKNOWN_TYPE_ID;
  }
  const XLA_FFI_Api_Version& v = metadata.api_version;
  const XLA_FFI_Api_Version& runtime = api->api_version;
  if (v.major_version != runtime.major_version || v.minor_version > runtime.minor_version)
    throw std::runtime_error("handler API version " + std::to_string(v.major_version) + "." +
                             std::to_string(v.minor_version) + " is newer than the runtime's");
  return metadata;
}

XLA_FFI_Handler* HandlerOf(const nb::dict& bundle, const char* stage) {
  if (!bundle.contains(stage)) return nullptr;
  return reinterpret_cast<XLA_FFI_Handler*>(nb::cast<nb::capsule>(bundle[stage]).data());
}

struct Handler {
  const XLA_FFI_Api* api;  // of the runtime the handler is registered with
  XLA_FFI_Handler* instantiate = nullptr;
  XLA_FFI_Handler* execute = nullptr;
  int64_t state_type_id = 0;  // of the state the instantiate stage makes (0 on FFI API 0.1)

  Handler(const nb::dict& bundle, int api_minor_version)
      : api(Api(api_minor_version)),
        instantiate(HandlerOf(bundle, "instantiate")),
        execute(HandlerOf(bundle, "execute")) {
    if (execute == nullptr) throw std::invalid_argument("a handler needs an execute stage");
    QueryMetadata(api, execute);
    if (instantiate != nullptr)
      state_type_id = QueryMetadata(api, instantiate).state_type_id.type_id;
  }
};

class CallSite {
 public:
  CallSite(const Handler& handler, const nb::dict& attrs)
      : api_(handler.api), execute_(handler.execute), attrs_(attrs) {
    if (handler.instantiate == nullptr) return;
    XLA_FFI_ExecutionContext ctx{nullptr, &state_};
    XLA_FFI_CallFrame frame =
        MakeFrame(api_, &ctx, XLA_FFI_ExecutionStage_INSTANTIATE, nullptr, nullptr, &attrs_);
    if (ErrorInfo e = ToErrorInfo(Call(handler.instantiate, &frame)))
      throw std::runtime_error("instantiate failed: " + e->first + ": " + e->second);
  }

  ErrorInfo Execute(Device& device, const std::vector<BufferSpec>& args,
                    const std::vector<BufferSpec>& rets) {
    Buffers in(args), out(rets);
    XLA_FFI_ExecutionContext ctx{&device, &state_};
    XLA_FFI_CallFrame frame =
        MakeFrame(api_, &ctx, XLA_FFI_ExecutionStage_EXECUTE, &in, &out, &attrs_);
    XLA_FFI_Error* error;
    {
      nb::gil_scoped_release release;
      error = Call(execute_, &frame);
    }
    return ToErrorInfo(error);
  }

  void Free() { state_.Reset(); }
  bool has_state() const { return state_.has_state(); }

 private:
  const XLA_FFI_Api* api_;
  XLA_FFI_Handler* execute_;
  Attributes attrs_;
  ExecutionState state_;
};

// Registers the type as jaxlib does (with its info: the deleter of FFI API
// 0.2 on, which a runtime of 0.1 ignores).
int64_t RegisterStateType(const std::string& name, const nb::dict& state_type) {
  auto* type_id = static_cast<XLA_FFI_TypeId*>(nb::cast<nb::capsule>(state_type["type_id"]).data());
  auto* info = static_cast<const TypeInfo*>(nb::cast<nb::capsule>(state_type["type_info"]).data());
  if (ErrorInfo e = ToErrorInfo(RegisterType(name, type_id, info)))
    throw std::runtime_error("type registration failed: " + e->first + ": " + e->second);
  return type_id->type_id;
}

}  // namespace

NB_MODULE(_ffi_testing, m) {
  m.doc() = "Test-only minimal XLA FFI runtime for the device-platform (NPU) handlers.";

  m.def("register_type", &RegisterStateType, nb::arg("name"), nb::arg("state_type"),
        "Registers an FFI type ({'type_id': capsule, 'type_info': capsule}); returns its id.");

  nb::class_<Device>(m, "Device", "A fake device: its stream and counted memory.")
      .def(nb::init<>())
      .def_prop_ro("stream",
                   [](Device& d) { return reinterpret_cast<uintptr_t>(d.stream()); })
      .def("memory_stats",
           [](Device& d) {
             Device::MemoryStats s = d.Stats();
             nb::dict r;
             r["allocations"] = s.allocations;
             r["frees"] = s.frees;
             r["live"] = s.live;
             r["live_bytes"] = s.live_bytes;
             r["bytes"] = s.bytes;
             r["last_size"] = s.last_size;
             r["last_alignment"] = s.last_alignment;
             r["last_address"] = s.last_address;
             return r;
           })
      .def("set_memory_limit", &Device::SetMemoryLimit, nb::arg("bytes").none());

  nb::class_<Handler>(m, "Handler", "An FFI handler bundle, registered as XLA does.")
      .def(nb::init<const nb::dict&, int>(), nb::arg("bundle"),
           nb::arg("api_minor_version") = kNewestApiMinorVersion,
           "Registers a handler with the runtime of FFI API 0.`api_minor_version` (1, 2 or 3).")
      .def_prop_ro("api_version",
                   [](const Handler& h) {
                     return std::make_pair(h.api->api_version.major_version,
                                           h.api->api_version.minor_version);
                   })
      .def_ro("state_type_id", &Handler::state_type_id)
      .def(
          "instantiate",
          [](const Handler& h, const nb::dict& attrs) { return new CallSite(h, attrs); },
          nb::arg("attrs"), nb::rv_policy::take_ownership,
          "A call site with attributes {name: value}, a value (dtype, scalar), a 1-D numpy\n"
          "array or a str or bytes (a string): runs the INSTANTIATE stage.");

  nb::class_<CallSite>(m, "CallSite", "One custom call of a compiled program.")
      .def("execute", &CallSite::Execute, nb::arg("device"), nb::arg("args"), nb::arg("rets"),
           "EXECUTE stage with buffers (address, dtype, dims); None or (code, message).")
      .def("free", &CallSite::Free, "Destroys the state, as freeing the program does.")
      .def_prop_ro("has_state", &CallSite::has_state);
}

}  // namespace jax_aclnn::testing
