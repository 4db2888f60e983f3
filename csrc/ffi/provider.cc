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

void* Lookup(const std::vector<void*>& handles, const char* name) {
  for (void* h : handles)
    if (void* p = dlsym(h, name)) return p;
  return nullptr;
}

// One of the ABI's function sets (aclnn_abi.h) as some handles export it.
struct SetExports {
  int found = 0;
  std::vector<const char*> missing;  // the names not exported
  bool whole() const { return missing.empty(); }
  bool none() const { return found == 0; }
  std::string Missing() const {
    std::string names;
    for (const char* name : missing) names += (names.empty() ? "" : ", ") + std::string(name);
    return names;
  }
};

template <typename Function>
void ResolveOne(const std::vector<void*>& handles, const char* name, Function*& slot,
                SetExports& set) {
  slot = reinterpret_cast<Function*>(Lookup(handles, name));
  if (slot != nullptr) ++set.found;
  else set.missing.push_back(name);
}

// The ABI's sets: descriptors (required), arrays and executor reuse.
struct Exports {
  SetExports descriptors, arrays, reuse;
  bool none() const { return descriptors.none() && arrays.none() && reuse.none(); }
};

// Resolves every ABI function from the first handle that exports it;
// executor reuse is on when its whole set resolved.
Exports Resolve(const std::vector<void*>& handles, AclnnApi* api) {
  Exports e;
#define JAX_ACLNN_DESCRIPTOR(ret, name, params) ResolveOne(handles, #name, api->name, e.descriptors);
#define JAX_ACLNN_ARRAY(ret, name, params) ResolveOne(handles, #name, api->name, e.arrays);
#define JAX_ACLNN_REUSE(ret, name, params) ResolveOne(handles, #name, api->name, e.reuse);
  ACLNN_ABI_REQUIRED_FUNCTIONS(JAX_ACLNN_DESCRIPTOR)
  ACLNN_ABI_ARRAY_FUNCTIONS(JAX_ACLNN_ARRAY)
  ACLNN_ABI_EXECUTOR_REUSE_FUNCTIONS(JAX_ACLNN_REUSE)
#undef JAX_ACLNN_REUSE
#undef JAX_ACLNN_ARRAY
#undef JAX_ACLNN_DESCRIPTOR
  api->supports_executor_reuse = e.reuse.whole();
  return e;
}

// What a library that is a provider of its own lacks: every required
// function, and each optional set whole or not at all (the handlers call a
// set's functions on each other's descriptors and executors). Empty when
// it lacks nothing.
std::string Incomplete(const Exports& e) {
  std::string lacks;
  auto add = [&](const SetExports& set, const char* what) {
    lacks += (lacks.empty() ? "" : "; ") + set.Missing() + " (" + what + ")";
  };
  if (!e.descriptors.whole()) add(e.descriptors, "descriptor functions, all required");
  if (!e.arrays.whole() && !e.arrays.none()) add(e.arrays, "array functions, all or none");
  if (!e.reuse.whole() && !e.reuse.none()) add(e.reuse, "executor-reuse functions, all or none");
  return lacks;
}

bool IsFile(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

}  // namespace

std::optional<std::string> LoadHostProvider(const std::string& path) {
  std::lock_guard<std::mutex> lock(load_mutex);
  if (host_loaded.load()) return std::nullopt;
  if (path.empty() || path[0] != '/') return "the host provider path must be absolute: " + path;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return std::string("cannot load the host provider: ") + dlerror();
  const Exports e = Resolve({handle}, &host_api);
  if (!e.descriptors.whole()) return path + " does not export " + e.descriptors.missing.front();
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
      const Exports e = Resolve(handles, &cann_api);
      if (!e.descriptors.whole())
        throw std::runtime_error("the CANN libraries in " + dir + " do not export " +
                                 e.descriptors.missing.front());
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
  // Both phases from the first library that exports the first: a second
  // phase is given the executor of its own library's first phase.
  for (void* h : provider.handles)
    if ((phases.first_phase = dlsym(h, first.c_str())) != nullptr) {
      phases.second_phase = reinterpret_cast<SecondPhase>(dlsym(h, second.c_str()));
      break;
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
  const Exports e = Resolve({handle}, &l->api);
  if (e.none()) {
    // Operators only (a custom operator package on CANN): the platform's
    // descriptors and executors, its operators over the platform's.
    l->provider.api = platform.api;
    l->provider.origin = "library:" + path + " over " + platform.origin;
    l->provider.handles = {handle};
    l->provider.handles.insert(l->provider.handles.end(), platform.handles.begin(),
                               platform.handles.end());
  } else if (std::string lacks = Incomplete(e); !lacks.empty()) {
    // Never completed from the platform's: its functions would be given
    // this library's descriptors and executors.
    dlclose(handle);
    *error = "jax_aclnn: the operator library " + path +
             " exports functions of the aclnn ABI (descriptors, arrays or executors), so it is "
             "a provider of its own and must export each set whole, but it does not export " +
             lacks;
    return nullptr;
  } else {
    // A provider of its own: descriptors, arrays, executors and operators
    // all from the library.
    l->provider.api = &l->api;
    l->provider.origin = "library:" + path;
    l->provider.handles = {handle};
  }
  return &loaded.emplace(std::move(key), std::move(l)).first->second->provider;
}

std::vector<std::string> LibraryLacks(const Provider& library, std::string_view name) {
  std::vector<std::string> lacks;
  for (const std::string& symbol : {std::string(name) + "GetWorkspaceSize", std::string(name)})
    if (dlsym(library.handles.front(), symbol.c_str()) == nullptr) lacks.push_back(symbol);
  return lacks;
}

}  // namespace jax_aclnn
