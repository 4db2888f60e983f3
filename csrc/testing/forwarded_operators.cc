// A test-only user library of operators only (libaclnn_test_operators.so),
// as a custom operator package on CANN is: no descriptor, array or executor
// function of its own, so the handler gives its operators the platform's
// descriptors and executors (ffi/provider.h). Its operators forward to the
// host provider beside it (libaclnn_host.so, the CPU platform's provider),
// which makes and checks those descriptors and executors itself:
//  - aclnnForwardedSwishBackward: both phases, the host's aclnnSwishBackward;
//  - aclnnSwishBackwardGetWorkspaceSize, a first phase without its second:
//    the host's second phase is never paired with it.
#include <dlfcn.h>

#include <string>

#include "aclnn_abi.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// The host provider's `symbol`: libaclnn_host.so of this library's
// directory, the one the package loads (the same handle: loaded already).
void* Host(const char* symbol) {
  static void* const host = [] {
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&Host), &info) == 0 || info.dli_fname == nullptr)
      return static_cast<void*>(nullptr);
    const std::string self = info.dli_fname;
    return dlopen((self.substr(0, self.rfind('/') + 1) + "libaclnn_host.so").c_str(),
                  RTLD_NOW | RTLD_LOCAL);
  }();
  return host != nullptr ? dlsym(host, symbol) : nullptr;
}

aclnnStatus SwishBackwardFirstPhase(const aclTensor* gradOutput, const aclTensor* self,
                                    const aclScalar* betaOptional, aclTensor* gradInput,
                                    uint64_t* workspaceSize, aclOpExecutor** executor) {
  auto host = reinterpret_cast<decltype(&aclnnSwishBackwardGetWorkspaceSize)>(
      Host("aclnnSwishBackwardGetWorkspaceSize"));
  if (host == nullptr) return ACLNN_ERR_INNER_NULLPTR;
  return host(gradOutput, self, betaOptional, gradInput, workspaceSize, executor);
}

}  // namespace

EXPORT aclnnStatus aclnnForwardedSwishBackwardGetWorkspaceSize(
    const aclTensor* gradOutput, const aclTensor* self, const aclScalar* betaOptional,
    aclTensor* gradInput, uint64_t* workspaceSize, aclOpExecutor** executor) {
  return SwishBackwardFirstPhase(gradOutput, self, betaOptional, gradInput, workspaceSize,
                                 executor);
}

EXPORT aclnnStatus aclnnForwardedSwishBackward(void* workspace, uint64_t workspaceSize,
                                               aclOpExecutor* executor, aclrtStream stream) {
  auto host = reinterpret_cast<decltype(&aclnnSwishBackward)>(Host("aclnnSwishBackward"));
  if (host == nullptr) return ACLNN_ERR_INNER_NULLPTR;
  return host(workspace, workspaceSize, executor, stream);
}

// The host's first phase under the host's name, without a second phase.
aclnnStatus aclnnSwishBackwardGetWorkspaceSize(const aclTensor* gradOutput, const aclTensor* self,
                                               const aclScalar* betaOptional,
                                               aclTensor* gradInput, uint64_t* workspaceSize,
                                               aclOpExecutor** executor) {
  return SwishBackwardFirstPhase(gradOutput, self, betaOptional, gradInput, workspaceSize,
                                 executor);
}
