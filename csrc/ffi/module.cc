// nanobind module jax_aclnn._aclnn_ffi: FFI handler capsules for
// registration, provider loading and runtime statistics.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <type_traits>

#include "ffi/arguments.h"
#include "ffi/handlers.h"
#include "ffi/provider.h"
#include "ffi/stats.h"
#include "operators.h"

namespace nb = nanobind;

namespace jax_aclnn {
namespace {

template <typename T>
nb::capsule EncapsulateFfiHandler(T* fn) {
  static_assert(std::is_invocable_r_v<XLA_FFI_Error*, T, XLA_FFI_CallFrame*>,
                "Encapsulated function must be an XLA FFI handler");
  return nb::capsule(reinterpret_cast<void*>(fn));
}

nb::dict StageCapsules(XLA_FFI_Handler* instantiate, XLA_FFI_Handler* execute) {
  nb::dict d;
  d["instantiate"] = EncapsulateFfiHandler(instantiate);
  d["execute"] = EncapsulateFfiHandler(execute);
  return d;
}

// The CPU platform's provider (null when not loaded) or, with `library`,
// that library's; throws when the library is refused.
const Provider* CpuProviderOf(const std::string& library) {
  const Provider& cpu = CpuProvider();
  if (cpu.api == nullptr || library.empty()) return cpu.api ? &cpu : nullptr;
  std::string error;
  const Provider* p = LibraryProvider(library, cpu, &error);
  if (p == nullptr) throw std::runtime_error(error);
  return p;
}

}  // namespace

NB_MODULE(_aclnn_ffi, m) {
  m.doc() = "XLA FFI handlers of jax_aclnn and the aclnn provider loader.";
  for (const char* name : kAclnnOpNames) OperatorCounters(name);  // listed from the start

  m.def(
      "registrations",
      [] {
        nb::dict platforms;
        platforms["cpu"] = StageCapsules(kHandlers.instantiate, kHandlers.cpu_execute);
        platforms["npu"] = StageCapsules(kHandlers.instantiate, kHandlers.npu_execute);
        return platforms;
      },
      "{platform: {stage: capsule}}: the handlers of every operator's custom-call target, "
      "for jax.ffi.register_ffi_target.");

  m.def(
      "operators",
      [] {
        nb::dict ops;
#define JAX_ACLNN_OPERATOR_ENTRY(Name, name) ops[#name] = "aclnn" #Name;
        JAX_ACLNN_OPERATORS(JAX_ACLNN_OPERATOR_ENTRY)
#undef JAX_ACLNN_OPERATOR_ENTRY
        return ops;
      },
      "{jax_aclnn function: aclnn operator}: the operators the host provider implements, "
      "the list of csrc/operators.h.");

  m.def(
      "argument_kinds",
      [] {
        nb::dict kinds;
#define JAX_ACLNN_KIND_ENTRY(kind, value, type, consumes) \
  kinds[#kind] = nb::make_tuple(value, type, consumes);
        JAX_ACLNN_ARGUMENT_KINDS(JAX_ACLNN_KIND_ENTRY)
#undef JAX_ACLNN_KIND_ENTRY
        return kinds;
      },
      "{kind: (code, C parameter type, what it takes from the attributes)}: the argument "
      "kinds of the custom call's 'kinds' attribute (csrc/ffi/arguments.h).");

  m.def(
      "provides",
      [](const std::string& name, const std::string& library) {
        const Provider* p = CpuProviderOf(library);
        if (p == nullptr) return false;
        const OperatorPhases& phases = FindOperator(*p, name);
        return phases.first_phase != nullptr && phases.second_phase != nullptr;
      },
      nb::arg("name"), nb::arg("library") = "",
      "Whether the CPU platform's provider (the host provider; with `library`, that library's "
      "provider, ffi/provider.h) exports aclnn operator `name`'s two phases. Raises "
      "RuntimeError when the library cannot be loaded or exports part of a set of the aclnn "
      "ABI's functions.");

  m.def(
      "library_lacks",
      [](const std::string& name, const std::string& library) {
        if (library.empty()) throw std::invalid_argument("library_lacks: no library given");
        const Provider* p = CpuProviderOf(library);
        if (p == nullptr) throw std::runtime_error("the host aclnn provider is not loaded");
        return LibraryLacks(*p, name);
      },
      nb::arg("name"), nb::arg("library"),
      "The symbols of aclnn operator `name`'s two phases ('<name>GetWorkspaceSize', "
      "'<name>', in that order) that `library` itself does not export, whatever the "
      "platform's provider does; [] when it exports both. Raises RuntimeError as provides() "
      "does.");

  m.def(
      "add_operator", [](const std::string& name) { OperatorCounters(name); }, nb::arg("name"),
      "Lists aclnn operator `name` in stats() from now on (with zero calls).");

  m.def(
      "operator_prototypes",
      [] {
        nb::dict ops;
#define JAX_ACLNN_STRING(...) #__VA_ARGS__
#define JAX_ACLNN_EXPANDED_STRING(...) JAX_ACLNN_STRING(__VA_ARGS__)
#define JAX_ACLNN_PROTOTYPE(A, Name, name, parameters)                         \
  ops[#name] = "aclnnStatus aclnn" #Name "GetWorkspaceSize" JAX_ACLNN_EXPANDED_STRING( \
      ACLNN_ABI_FIRST_PHASE parameters);
        JAX_ACLNN_OPERATORS_WITH(JAX_ACLNN_PROTOTYPE, _)
#undef JAX_ACLNN_PROTOTYPE
#undef JAX_ACLNN_EXPANDED_STRING
#undef JAX_ACLNN_STRING
        return ops;
      },
      "{jax_aclnn function: its aclnn first phase's prototype}, as csrc/operators.h "
      "declares it.");

  m.def(
      "state_type",
      [] {
        nb::dict d;
        d["type_id"] = nb::capsule(reinterpret_cast<void*>(CallStateTypeId()));
        d["type_info"] =
            nb::capsule(const_cast<void*>(static_cast<const void*>(CallStateTypeInfo())));
        return d;
      },
      "The FFI type registration of the per-call-site executor cache.");

  m.def(
      "load_host_provider",
      [](const std::string& path) {
        if (auto error = LoadHostProvider(path)) throw std::runtime_error(*error);
      },
      nb::arg("path"), "Loads the bundled host aclnn provider library.");

  m.def("load_cann", &LoadCann, nb::arg("root") = nb::none(),
        "Finds and loads CANN's aclnn libraries; returns the library directory.");
  m.def("default_cann_roots", &DefaultCannRoots);
  m.def("route_cpu_through_cann", &RouteCpuThroughCann, nb::arg("enable"),
        "Testing: serve the CPU platform with the provider loaded by load_cann.");
  m.def("executor_reuse", &ExecutorReuse, "Whether call sites keep repeatable executors.");
  m.def("set_executor_reuse", &SetExecutorReuse, nb::arg("enabled"),
        "Turns executor reuse on or off for calls from now on.");
  m.def("cpu_provider", [] { return CpuProvider().origin; });
  m.def("build_info", [] {
    std::string info = "compiler " __VERSION__ ", C++" + std::to_string(__cplusplus / 100 % 100);
#ifdef NDEBUG
    info += ", optimised (NDEBUG)";
#else
    info += ", debug (assertions on)";
#endif
#ifdef JAX_ACLNN_SANITIZERS
    info += ", sanitizers: " JAX_ACLNN_SANITIZERS;
#endif
    // The headers' FFI API version; the handlers run on runtimes of that
    // version or a newer one (XLA refuses handlers of a newer version than
    // its own), laying out their state calls for the runtime's version.
    const std::string ffi = "FFI API " + std::to_string(XLA_FFI_API_MAJOR) + "." +
                            std::to_string(XLA_FFI_API_MINOR);
    info += ", XLA " + ffi + " headers (runs on " + ffi + " on; executor reuse on " + ffi +
            (XLA_FFI_API_MINOR < 3 ? " to 0.3)" : ")");
    return info;
  });
  m.def(
      "ffi_api_version", [] { return std::make_pair(XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR); },
      "(major, minor): the XLA FFI API version of the headers the handlers were compiled "
      "against; they run on an XLA of that version or a newer minor one.");
  m.def(
      "package_version",
      []() -> std::optional<std::string> {
#ifdef JAX_ACLNN_VERSION
        return std::string(JAX_ACLNN_VERSION);
#else
        return std::nullopt;  // a build that does not record it (Bazel)
#endif
      },
      "jax_aclnn.__version__ of the sources this module was built from (None: not recorded).");

  m.def("stats", [] {
    RuntimeStats& s = Stats();
    nb::dict calls;
    for (const auto& [name, counters] : AllOperatorCounters()) {
      nb::dict c;
      c["get_workspace_size"] = counters->get_workspace_size.load();
      c["execute"] = counters->execute.load();
      calls[name.c_str()] = c;
    }
    nb::dict d;
    d["calls"] = calls;
    d["live_tensors"] = s.live_tensors.load();
    d["live_executors"] = s.live_executors.load();
    return d;
  });

  m.def("reset_stats", [] {
    for (const auto& [name, counters] : AllOperatorCounters()) {
      counters->get_workspace_size.store(0);
      counters->execute.store(0);
    }
  });
}

}  // namespace jax_aclnn
