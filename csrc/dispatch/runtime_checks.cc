#include "csrc/dispatch/runtime_checks.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "csrc/dispatch/flight_recorder.h"
#include "csrc/pjrt/error.h"

namespace torch_tpu {
namespace {

struct Watched {
  std::shared_ptr<pjrt::Buffer> flag;
  hlo::ElementType type;
  std::vector<CheckedOp> ops;
  std::vector<std::weak_ptr<pjrt::Buffer>> results;
};

// Past this many unread flags they are read at the next watch, so a loop that never syncs
// keeps a bounded list; a failure found then waits for the next sync point.
constexpr size_t kMaxWatched = 256;

std::mutex watched_mutex;
auto& watched = *new std::vector<Watched>();  // leaked, like the caches
std::optional<CheckedOp> failed_op;           // under watched_mutex
// Whether `watched` or `failed_op` may hold anything: host reads check it without the lock.
std::atomic<bool> anything_watched{false};

// Results of executions whose check failed, by buffer, with the op that failed; under
// watched_mutex. Entries whose buffer is gone are dropped as new ones come.
struct FailedResult {
  std::weak_ptr<pjrt::Buffer> buffer;
  CheckedOp op;
};
auto& failed_results = *new std::unordered_map<const pjrt::Buffer*, FailedResult>();
std::atomic<bool> any_failed_result{false};

// Under watched_mutex.
void remember_failed_results(const Watched& w, const CheckedOp& op) {
  std::erase_if(failed_results, [](const auto& item) { return item.second.buffer.expired(); });
  for (const auto& weak : w.results) {
    if (auto buffer = weak.lock()) failed_results[buffer.get()] = {weak, op};
  }
  any_failed_result = !failed_results.empty();
}

// `dump`: write the flight record and name it (once per failure, at the sync point that finds it).
[[noreturn]] void raise_failure(const CheckedOp& op, const std::string& context, bool dump) {
  std::string name = op.op_name;
  if (name.ends_with('.')) name.pop_back();  // "aten::gather." names the default overload
  std::string message = "torch_tpu: " + name + " was given " + op.failure + "; " + context;
  if (dump) message += flight::dump_note(message);
  TORCH_CHECK_INDEX(op.error != CheckError::Index, message);
  TORCH_CHECK_LINALG(op.error != CheckError::LinAlg, message);
  TORCH_CHECK(false, message);
}

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
    if (!known[i]) continue;
    std::optional<CheckedOp> failed;
    if (w.type == hlo::ElementType::Pred && values[i] == 0) failed = w.ops.front();
    if (w.type != hlo::ElementType::Pred && values[i] >= 0) {
      failed = w.ops.at(static_cast<size_t>(values[i]));
    }
    if (!failed) continue;
    remember_failed_results(w, *failed);
    if (!failed_op) failed_op = std::move(failed);
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
                         std::vector<CheckedOp> ops,
                         std::vector<std::weak_ptr<pjrt::Buffer>> results) {
  std::lock_guard<std::mutex> lock(watched_mutex);
  watched.push_back({std::move(flag), type, std::move(ops), std::move(results)});
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
  raise_failure(*op, "found on the device at this sync point, so that op's result is undefined",
                true);
}

void raise_if_result_of_failed_check(const pjrt::Buffer& buffer) {
  if (!any_failed_result.load(std::memory_order_relaxed)) return;
  std::optional<CheckedOp> op;
  {
    std::lock_guard<std::mutex> lock(watched_mutex);
    auto found = failed_results.find(&buffer);
    if (found != failed_results.end() && !found->second.buffer.expired()) op = found->second.op;
  }
  if (op) {
    raise_failure(*op,
                  "this tensor was computed with it (reported at an earlier sync point), so its "
                  "values are undefined",
                  false);
  }
}

}  // namespace torch_tpu
