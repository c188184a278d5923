#include "csrc/dispatch/retire.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "csrc/device/runtime.h"
#include "csrc/dispatch/env_setting.h"

namespace torch_tpu {
namespace {

// Retired executables are destroyed in batches: waiting for in-flight work once per batch.
constexpr size_t kRetireBatch = 256;

std::mutex retired_mutex;
auto& retired = *new std::vector<std::shared_ptr<pjrt::Executable>>();  // leaked, like the caches

}  // namespace

size_t max_cached_ops() {
  static const size_t limit = count_setting("TORCH_TPU_MAX_CACHED_OPS", 4096, 1);
  return limit;
}

size_t max_cached_graphs() {
  static const size_t limit = count_setting("TORCH_TPU_MAX_CACHED_GRAPHS", 1024, 1);
  return limit;
}

namespace {

size_t count_lines(const char* path) {
  std::FILE* file = std::fopen(path, "r");
  if (file == nullptr) return 0;
  size_t lines = 0;
  char chunk[1 << 16];
  for (size_t n; (n = std::fread(chunk, 1, sizeof(chunk), file)) > 0;) {
    lines += static_cast<size_t>(std::count(chunk, chunk + n, '\n'));
  }
  std::fclose(file);
  return lines;
}

size_t mapping_budget() {
  if (std::getenv("TORCH_TPU_MAX_MAPPINGS") != nullptr) {
    return count_setting("TORCH_TPU_MAX_MAPPINGS", 0, 1);
  }
  size_t limit = 65530;  // Linux's default vm.max_map_count
  if (std::FILE* file = std::fopen("/proc/sys/vm/max_map_count", "r")) {
    unsigned long long value = 0;
    if (std::fscanf(file, "%llu", &value) == 1 && value > 0) limit = value;
    std::fclose(file);
  }
  return limit / 2;
}

}  // namespace

bool mappings_near_limit() {
  static const size_t budget = mapping_budget();
  static std::atomic<unsigned> calls{0};
  static std::atomic<bool> near{false};
  if (calls++ % 16 == 0) near = count_lines("/proc/self/maps") > budget;
  return near;
}

void retire(std::shared_ptr<pjrt::Executable> executable) {
  if (!executable) return;
  std::vector<std::shared_ptr<pjrt::Executable>> batch;
  {
    std::lock_guard<std::mutex> lock(retired_mutex);
    retired.push_back(std::move(executable));
    if (retired.size() < kRetireBatch) return;
    batch.swap(retired);
  }
  await_in_flight();
  batch.clear();  // destroyed here, with nothing running
}

}  // namespace torch_tpu
