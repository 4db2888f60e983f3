#include "ffi/stats.h"

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace jax_aclnn {

RuntimeStats& Stats() {
  static RuntimeStats stats;
  return stats;
}

namespace {

std::mutex counters_mutex;
std::vector<std::pair<std::string, std::unique_ptr<OpCounters>>>& CountersList() {
  static std::vector<std::pair<std::string, std::unique_ptr<OpCounters>>> list;
  return list;
}

}  // namespace

OpCounters& OperatorCounters(std::string_view name) {
  std::lock_guard<std::mutex> lock(counters_mutex);
  auto& list = CountersList();
  for (auto& [n, c] : list)
    if (n == name) return *c;
  return *list.emplace_back(std::string(name), std::make_unique<OpCounters>()).second;
}

std::vector<std::pair<std::string, OpCounters*>> AllOperatorCounters() {
  std::lock_guard<std::mutex> lock(counters_mutex);
  std::vector<std::pair<std::string, OpCounters*>> all;
  for (auto& [n, c] : CountersList()) all.emplace_back(n, c.get());
  return all;
}

}  // namespace jax_aclnn
