#include "csrc/dispatch/runtime_checks.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "csrc/pjrt/error.h"

namespace torch_tpu {
namespace {

struct Watched {
  std::shared_ptr<pjrt::Buffer> flag;
  hlo::ElementType type;
  std::vector<CheckedOp> ops;
};

// Past this many unread flags they are read at the next watch, so a loop that never syncs
// keeps a bounded list; a failure found then waits for the next sync point.
constexpr size_t kMaxWatched = 256;

std::mutex watched_mutex;
auto& watched = *new std::vector<Watched>();  // leaked, like the caches
std::optional<CheckedOp> failed_op;           // under watched_mutex
// Whether `watched` or `failed_op` may hold anything: host reads check it without the lock.
std::atomic<bool> anything_watched{false};

// Reads every watched flag, keeping the first failure; under watched_mutex. Flags in host
// memory are read in place; the others' transfers start together and each waits for its
// producer. A producer that failed outright is reported as an asynchronous error instead.
void read_watched() {
  constexpr const char* kWhat = "reading an index check";
  std::vector<int32_t> values(watched.size(), 0);  // an i1 flag fills the low byte
  std::vector<bool> known(watched.size(), false);  // values[i] holds flag i
  std::vector<std::optional<pjrt::Event>> transfers(watched.size());
  for (size_t i = 0; i < watched.size(); ++i) {
    const size_t bytes = watched[i].type == hlo::ElementType::Pred ? 1 : sizeof(int32_t);
    try {
      known[i] = watched[i].flag->read_in_place(&values[i], bytes, kWhat);
      if (!known[i]) transfers[i] = watched[i].flag->copy_to_host(&values[i], bytes);
    } catch (const pjrt::Error&) {
      // Its producer failed: an asynchronous error.
    }
  }
  for (size_t i = 0; i < watched.size(); ++i) {
    if (transfers[i]) {
      try {
        transfers[i]->await(kWhat);
        known[i] = true;
      } catch (const pjrt::Error&) {
        // As above.
      }
    }
    const Watched& w = watched[i];
    if (!known[i] || failed_op) continue;
    if (w.type == hlo::ElementType::Pred && values[i] == 0) failed_op = w.ops.front();
    if (w.type != hlo::ElementType::Pred && values[i] >= 0) {
      failed_op = w.ops.at(static_cast<size_t>(values[i]));
    }
  }
  watched.clear();
}

}  // namespace

bool runtime_checks_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TORCH_TPU_INDEX_CHECKS");
    return value == nullptr || std::string(value) != "0";
  }();
  return enabled;
}

void watch_runtime_check(std::shared_ptr<pjrt::Buffer> flag, hlo::ElementType type,
                         std::vector<CheckedOp> ops) {
  std::lock_guard<std::mutex> lock(watched_mutex);
  watched.push_back({std::move(flag), type, std::move(ops)});
  anything_watched = true;
  if (watched.size() >= kMaxWatched) read_watched();
}

void raise_failed_runtime_checks() {
  std::optional<CheckedOp> op;
  {
    std::lock_guard<std::mutex> lock(watched_mutex);
    if (!anything_watched.load(std::memory_order_relaxed)) return;
    read_watched();
    op.swap(failed_op);
    anything_watched = false;
  }
  if (!op) return;
  std::string name = op->op_name;
  if (name.ends_with('.')) name.pop_back();  // "aten::gather." names the default overload
  const std::string message = "torch_tpu: " + name + " was given " + op->failure +
                              "; found on the device at this sync point, so that op's result "
                              "is undefined";
  TORCH_CHECK_INDEX(!op->index_error, message);
  TORCH_CHECK(false, message);
}

}  // namespace torch_tpu
