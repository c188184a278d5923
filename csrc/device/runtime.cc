#include "csrc/device/runtime.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "csrc/device/stderr_capture.h"

namespace torch_tpu {
namespace {
std::mutex init_mutex;
// Deliberately leaked: destroying a PJRT client during interpreter shutdown races with the
// plugin's own static destructors.
std::atomic<Runtime*> instance{nullptr};
thread_local int thread_device = 0;
std::string unavailable_reason;  // set once, at import, before any tensor exists
}  // namespace

void Runtime::initialize(const std::string& plugin_path,
                         const std::vector<pjrt::ClientOption>& options,
                         const pjrt::KeyValueCallbacks* key_value) {
  std::lock_guard<std::mutex> lock(init_mutex);
  if (Runtime* existing = instance.load()) {
    TORCH_CHECK(existing->plugin_path_ == plugin_path, "torch_tpu: already initialised with '",
                existing->plugin_path_, "'; cannot switch to '", plugin_path, "'");
    return;
  }
  std::shared_ptr<pjrt::Client> client;
  {
    StderrCapture start_up_log;
    try {
      client = pjrt::Client::create(pjrt::Plugin::load(plugin_path), options, key_value);
    } catch (...) {
      start_up_log.replay();  // what the plugin said before failing
      throw;
    }
    if (plugin_logs_requested()) start_up_log.replay();
  }
  TORCH_CHECK(!client->devices().empty(), "torch_tpu: the PJRT plugin '", plugin_path,
              "' reports no addressable devices");
  instance.store(new Runtime(plugin_path, std::move(client)));
}

bool Runtime::initialized() { return instance.load() != nullptr; }

void Runtime::set_unavailable_reason(std::string reason) { unavailable_reason = std::move(reason); }

Runtime& Runtime::get() {
  Runtime* runtime = instance.load();
  if (runtime == nullptr) {
    TORCH_CHECK(unavailable_reason.empty(), unavailable_reason);
    TORCH_CHECK(false,
                "torch_tpu: the runtime is not initialised; import torch_tpu (or torch with "
                "torch_tpu installed) first");
  }
  return *runtime;
}

PJRT_Device* Runtime::device(int index) const {
  // torch.AcceleratorError, as CUDA raises for an invalid device ordinal.
  if (index < 0 || index >= device_count()) {
    throw c10::AcceleratorError(
        {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, 0,
        c10::str("torch_tpu: invalid device ordinal: device index ", index, " is out of range for ",
                 device_count(), " tpu device(s)"));
  }
  return client_->devices()[index].device;
}

namespace {
std::mutex pending_mutex;
std::condition_variable pending_done;
int64_t pending_count = 0;
int64_t most_pending = 0;
int64_t testing_waiters = 0;  // in await_in_flight_until with a test of their own
}  // namespace

void pending_started() {
  std::lock_guard<std::mutex> lock(pending_mutex);
  most_pending = std::max(most_pending, ++pending_count);
}

int64_t in_flight() {
  std::lock_guard<std::mutex> lock(pending_mutex);
  return pending_count;
}

int64_t max_in_flight() {
  std::lock_guard<std::mutex> lock(pending_mutex);
  return most_pending;
}

void reset_max_in_flight() {
  std::lock_guard<std::mutex> lock(pending_mutex);
  most_pending = pending_count;
}

void pending_finished() {
  std::lock_guard<std::mutex> lock(pending_mutex);
  // A waiter on a count wakes when it may be reached; one with its own test, at each finish.
  if (--pending_count <= 1 || testing_waiters > 0) pending_done.notify_all();
}

std::atomic<void (*)()> materialize_hook{nullptr};

void set_materialize_hook(void (*hook)()) { materialize_hook = hook; }

void await_in_flight() { await_in_flight_until(0, nullptr); }

void await_in_flight_until(int64_t count, bool (*enough)()) {
  std::unique_lock<std::mutex> lock(pending_mutex);
  if (enough != nullptr) ++testing_waiters;
  pending_done.wait(
      lock, [count, enough] { return pending_count <= count || (enough != nullptr && enough()); });
  if (enough != nullptr) --testing_waiters;
}

void await_pending() {
  if (auto hook = materialize_hook.load()) hook();
  await_in_flight();
}

int current_device() { return thread_device; }

void set_current_device(int index) {
  if (Runtime::initialized()) (void)Runtime::get().device(index);  // range check
  thread_device = index;
}

}  // namespace torch_tpu
