// Run-time loading of an aclnn provider (dlopen/dlsym): the bundled host
// provider on the CPU, CANN's libraries on an Ascend NPU. Both fill the same
// function table, so the handlers have one code path.
#ifndef JAX_ACLNN_FFI_PROVIDER_H_
#define JAX_ACLNN_FFI_PROVIDER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aclnn_abi.h"
#include "ffi/stats.h"

namespace jax_aclnn {

struct AclnnApi {
#define JAX_ACLNN_API_MEMBER(ret, name, params) ret(*name) params = nullptr;
  ACLNN_ABI_FUNCTIONS(JAX_ACLNN_API_MEMBER)
#undef JAX_ACLNN_API_MEMBER
  // True when the executor-reuse calls (aclSetAclOpExecutorRepeatable,
  // aclSetInput/OutputTensorAddr, aclDestroyAclOpExecutor) all resolved.
  bool supports_executor_reuse = false;
};

// A loaded provider; `api` is null until loading succeeded.
struct Provider {
  const AclnnApi* api = nullptr;
  std::string origin;  // "host:<library>", "cann:<library directory>" or "library:<path>"
  std::vector<void*> handles;  // its libraries (dlopen), searched in order
};

// The second phase, the same for every operator.
using SecondPhase = aclnnStatus (*)(void* workspace, uint64_t workspaceSize,
                                    aclOpExecutor* executor, aclrtStream stream);

// An operator's two phases in a provider, looked up by name (dlsym) once
// and then kept; null where the provider does not export them.
struct OperatorPhases {
  std::string_view name;  // aclnnXxx
  void* first_phase = nullptr;  // aclnnXxxGetWorkspaceSize, called through libffi
  SecondPhase second_phase = nullptr;
  OpCounters* counters = nullptr;  // runtime_stats()'s of the operator
};
const OperatorPhases& FindOperator(const Provider& provider, std::string_view name);

// The provider of a library that exports operators (`path` absolute) on
// the platform's provider `platform`. Descriptors, arrays and executors come
// from one provider: a library that exports none of the ABI's functions
// (ACLNN_ABI_FUNCTIONS) takes them all from the platform, its operators
// looked up in it first and then in the platform (a custom operator package
// on CANN); a library that exports any is a provider of its own, every
// function and operator taken from it alone, which must export the
// descriptor functions all and the array and executor-reuse sets each all or
// none (without the executor-reuse set, every call runs both phases).
// Loaded once per library and platform provider. Returns null with `error`
// set when the library cannot be loaded or exports part of a set (the error
// names what it lacks).
const Provider* LibraryProvider(const std::string& path, const Provider& platform,
                                std::string* error);

// Which of operator `name`'s two phases (nameGetWorkspaceSize, name) the
// library of `library` (LibraryProvider's) itself does not export, whatever
// the platform's provider exports: a user who names a library means its
// operator. (Its first handle is the library's.)
std::vector<std::string> LibraryLacks(const Provider& library, std::string_view name);

// Loads the host provider library at `path` (absolute). Returns an error
// message on failure. Thread-safe; loading again replaces nothing.
std::optional<std::string> LoadHostProvider(const std::string& path);

// Finds and loads CANN's aclnn libraries: from `root` if given, else
// $ASCEND_HOME_PATH, else the standard install location. On success returns
// the library directory used; on failure throws std::runtime_error naming
// every location searched and the library missing there. A given root that
// is relative, empty or holds a NUL byte throws std::invalid_argument before
// anything is opened.
std::string LoadCann(const std::optional<std::string>& root);

// The provider serving the CPU platform (the host provider, or CANN when
// RouteCpuThroughCann(true) was called, for testing the NPU loader path).
const Provider& CpuProvider();
// The provider serving the NPU platform, loading CANN on first use. Returns
// null with `error` set when CANN cannot be found.
const Provider* NpuProvider(std::string* error);
void RouteCpuThroughCann(bool enable);

// Where CANN is searched when no root is given.
std::vector<std::string> DefaultCannRoots();

}  // namespace jax_aclnn

#endif  // JAX_ACLNN_FFI_PROVIDER_H_
