#include "csrc/dispatch/retire.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "csrc/device/runtime.h"

namespace torch_tpu {
namespace {

// Retired executables are destroyed in batches: waiting for in-flight work once per batch.
constexpr size_t kRetireBatch = 256;

std::mutex retired_mutex;
auto& retired = *new std::vector<std::shared_ptr<pjrt::Executable>>();  // leaked, like the caches

size_t limit_from_env(const char* name, size_t fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  unsigned long long parsed = std::strtoull(value, &end, 10);
  TORCH_CHECK(end != nullptr && *end == '\0' && parsed > 0, "torch_tpu: ", name,
              " must be a positive integer, got '", value, "'");
  return static_cast<size_t>(parsed);
}

}  // namespace

size_t max_cached_ops() {
  static const size_t limit = limit_from_env("TORCH_TPU_MAX_CACHED_OPS", 4096);
  return limit;
}

size_t max_cached_graphs() {
  static const size_t limit = limit_from_env("TORCH_TPU_MAX_CACHED_GRAPHS", 1024);
  return limit;
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
