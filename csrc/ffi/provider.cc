#include "ffi/provider.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace jax_aclnn {
namespace {

// The CANN libraries that together export the ABI: the operators (opapi),
// descriptors and executors (nnopbase), and the runtime (ascendcl).
const char* const kCannLibraries[] = {"libascendcl.so", "libnnopbase.so", "libopapi.so"};
const char* const kCannStandardRoot = "/usr/local/Ascend/ascend-toolkit/latest";

std::mutex load_mutex;
// Written once under load_mutex, then published through the atomics.
Provider host_provider, cann_provider;
AclnnApi host_api, cann_api;
std::atomic<const Provider*> host_loaded{nullptr}, cann_loaded{nullptr};
std::atomic<bool> route_cpu_through_cann{false};

// Resolves every ABI symbol from the first handle that has it. Returns the
// name of a missing required symbol, or an empty string.
std::string Resolve(const std::vector<void*>& handles, AclnnApi* api) {
  auto lookup = [&](const char* name) -> void* {
    for (void* h : handles)
      if (void* p = dlsym(h, name)) return p;
    return nullptr;
  };
#define JAX_ACLNN_RESOLVE(ret, name, params) \
  api->name = reinterpret_cast<ret(*) params>(lookup(#name));
  ACLNN_ABI_FUNCTIONS(JAX_ACLNN_RESOLVE)
#undef JAX_ACLNN_RESOLVE
  api->supports_executor_reuse = true;
#define JAX_ACLNN_OPTIONAL(ret, name, params) \
  api->supports_executor_reuse = api->supports_executor_reuse && api->name != nullptr;
  ACLNN_ABI_EXECUTOR_REUSE_FUNCTIONS(JAX_ACLNN_OPTIONAL)
#undef JAX_ACLNN_OPTIONAL
#define JAX_ACLNN_REQUIRE(ret, name, params) \
  if (api->name == nullptr) return #name;
  ACLNN_ABI_REQUIRED_FUNCTIONS(JAX_ACLNN_REQUIRE)
#undef JAX_ACLNN_REQUIRE
  return "";
}

bool IsFile(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

}  // namespace

std::optional<std::string> LoadHostProvider(const std::string& path) {
  std::lock_guard<std::mutex> lock(load_mutex);
  if (host_loaded.load()) return std::nullopt;
  if (path.empty() || path[0] != '/') return "the host provider path must be absolute: " + path;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return std::string("cannot load the host provider: ") + dlerror();
  std::string missing = Resolve({handle}, &host_api);
  if (!missing.empty()) return path + " does not export " + missing;
  host_provider.api = &host_api;
  host_provider.origin = "host:" + path;
  host_provider.handles = {handle};
  host_loaded.store(&host_provider);
  return std::nullopt;
}

std::vector<std::string> DefaultCannRoots() {
  std::vector<std::string> roots;
  if (const char* env = std::getenv("ASCEND_HOME_PATH"); env != nullptr && env[0] != '\0')
    roots.emplace_back(env);
  roots.emplace_back(kCannStandardRoot);
  return roots;
}

std::string LoadCann(const std::optional<std::string>& root) {
  // A given root must be absolute (never the working directory) and whole
  // (a NUL byte would cut the path short).
  if (root && root->find('\0') != std::string::npos)
    throw std::invalid_argument("the CANN path contains a NUL byte");
  if (root && (root->empty() || (*root)[0] != '/'))
    throw std::invalid_argument(
        "the CANN path must be absolute (CANN is never loaded from the working directory), "
        "got '" + *root + "'");
  std::lock_guard<std::mutex> lock(load_mutex);
  if (const Provider* p = cann_loaded.load()) return p->origin.substr(5);
  std::vector<std::string> roots = root ? std::vector<std::string>{*root} : DefaultCannRoots();
  std::string searched;
  for (const std::string& r : roots) {
    if (r.empty() || r[0] != '/') {  // never the working directory
      searched += "\n  " + r + " (not an absolute path)";
      continue;
    }
    for (const char* sub : {"/lib64", "/lib"}) {
      const std::string dir = r + sub;
      std::string missing;
      for (const char* lib : kCannLibraries)
        if (!IsFile(dir + "/" + lib)) missing += std::string(missing.empty() ? "" : ", ") + lib;
      if (!missing.empty()) {
        searched += "\n  " + dir + " (missing " + missing + ")";
        continue;
      }
      std::vector<void*> handles;
      for (const char* lib : kCannLibraries) {
        void* h = dlopen((dir + "/" + lib).c_str(), RTLD_NOW | RTLD_GLOBAL);
        if (h == nullptr) throw std::runtime_error(std::string("cannot load CANN: ") + dlerror());
        handles.push_back(h);
      }
      std::string missing_symbol = Resolve(handles, &cann_api);
      if (!missing_symbol.empty())
        throw std::runtime_error("the CANN libraries in " + dir + " do not export " +
                                 missing_symbol);
      cann_provider.api = &cann_api;
      cann_provider.origin = "cann:" + dir;
      cann_provider.handles = handles;
      cann_loaded.store(&cann_provider);
      return dir;
    }
  }
  throw std::runtime_error(
      "CANN aclnn libraries not found (set ASCEND_HOME_PATH or pass a path); searched:" +
      searched);
}

const Provider& CpuProvider() {
  if (route_cpu_through_cann.load(std::memory_order_relaxed))
    if (const Provider* p = cann_loaded.load()) return *p;
  static const Provider none{nullptr, "none"};
  const Provider* p = host_loaded.load();
  return p ? *p : none;
}

const Provider* NpuProvider(std::string* error) {
  if (const Provider* p = cann_loaded.load()) return p;
  try {
    LoadCann(std::nullopt);
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
  return cann_loaded.load();
}

void RouteCpuThroughCann(bool enable) { route_cpu_through_cann.store(enable); }

const OperatorPhases& FindOperator(const Provider& provider, std::string_view name) {
  // Providers live as long as the process; so do the entries.
  static std::mutex mutex;
  static std::map<const Provider*, std::map<std::string, OperatorPhases, std::less<>>> found;
  std::lock_guard<std::mutex> lock(mutex);
  auto& of_provider = found[&provider];
  if (auto it = of_provider.find(name); it != of_provider.end()) return it->second;
  OperatorPhases phases;
  const std::string second(name), first = second + "GetWorkspaceSize";
  for (void* h : provider.handles) {
    if (phases.first_phase == nullptr) phases.first_phase = dlsym(h, first.c_str());
    if (phases.second_phase == nullptr)
      phases.second_phase = reinterpret_cast<SecondPhase>(dlsym(h, second.c_str()));
  }
  phases.counters = &OperatorCounters(name);
  auto entry = of_provider.emplace(second, phases).first;
  entry->second.name = entry->first;  // the map's key: as long-lived as the entry
  return entry->second;
}

const Provider* LibraryProvider(const std::string& path, const Provider& platform,
                                std::string* error) {
  struct Loaded {
    Provider provider;
    AclnnApi api;
  };
  static std::map<std::pair<std::string, const Provider*>, std::unique_ptr<Loaded>> loaded;
  std::lock_guard<std::mutex> lock(load_mutex);
  auto key = std::make_pair(path, &platform);
  if (auto it = loaded.find(key); it != loaded.end()) return &it->second->provider;
  if (path.empty() || path[0] != '/' || path.find('\0') != std::string::npos) {
    *error = "jax_aclnn: an operator library's path must be absolute, got '" + path + "'";
    return nullptr;
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    *error = std::string("jax_aclnn: cannot load the operator library: ") + dlerror();
    return nullptr;
  }
  auto l = std::make_unique<Loaded>();
  l->provider.handles = {handle};
  l->provider.handles.insert(l->provider.handles.end(), platform.handles.begin(),
                             platform.handles.end());
  std::string missing = Resolve(l->provider.handles, &l->api);
  if (!missing.empty()) {
    *error = "jax_aclnn: neither " + path + " nor the " + platform.origin + " provider exports " +
             missing;
    return nullptr;
  }
  l->provider.api = &l->api;
  l->provider.origin = "library:" + path;
  return &loaded.emplace(std::move(key), std::move(l)).first->second->provider;
}

}  // namespace jax_aclnn
