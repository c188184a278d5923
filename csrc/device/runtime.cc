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
thread_local int thread_device = -1;  // -1: not set on this thread, the process's first device
std::atomic<int> first_device{0};     // DeviceNumbering::first, once the runtime starts
std::string unavailable_reason;       // set once, at import, before any tensor exists
}  // namespace

DeviceNumbering DeviceNumbering::choose(int addressable, LocalPlace place) {
  DeviceNumbering numbering{.first = 0, .addressable = addressable, .count = addressable};
  // One chip per process under torchrun: it is tpu:LOCAL_RANK. A process with several devices
  // (TORCH_TPU_CPU_DEVICE_COUNT=2, a host's chips in one process) numbers them as the plugin does.
  if (addressable == 1 && place.local_world_size > 1 && place.local_rank >= 0 &&
      place.local_rank < place.local_world_size) {
    numbering.first = place.local_rank;
    numbering.count = place.local_world_size;
    numbering.place = place;
  }
  return numbering;
}

void DeviceNumbering::reject(int index) const {
  const c10::SourceLocation where{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
  const int own = first;
  if (place.local_world_size > 0 && index >= 0 && index < count) {
    throw c10::AcceleratorError(
        where, 0,
        c10::str("torch_tpu: tpu:", index, " is the device of local rank ", index,
                 ", another process: under torchrun each process drives one device, and this "
                 "one (LOCAL_RANK=",
                 own, ") drives tpu:", own,
                 ". Address it as torch.device(\"tpu\", LOCAL_RANK), or call "
                 "torch.tpu.set_device(LOCAL_RANK) and use \"tpu\"; tensors move between "
                 "processes through torch.distributed"));
  }
  // torch.AcceleratorError, as CUDA raises for an invalid device ordinal.
  const std::string torchrun =
      place.local_world_size > 0
          ? c10::str("; LOCAL_WORLD_SIZE=", count,
                     " processes, one device each: this one drives tpu:", own)
          : std::string();
  throw c10::AcceleratorError(
      where, 0,
      c10::str("torch_tpu: invalid device ordinal: tpu device index ", index, " is out of range (",
               count, " tpu device(s)", torchrun, ")"));
}

std::vector<int> Runtime::local_indices() const {
  std::vector<int> indices;
  for (int i = 0; i < numbering_.addressable; ++i) indices.push_back(numbering_.first + i);
  return indices;
}

void Runtime::initialize(const std::string& plugin_path,
                         const std::vector<pjrt::ClientOption>& options,
                         const pjrt::KeyValueCallbacks* key_value, LocalPlace place) {
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
  auto numbering = DeviceNumbering::choose(static_cast<int>(client->devices().size()), place);
  first_device.store(numbering.first);
  instance.store(new Runtime(plugin_path, std::move(client), numbering));
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

int current_device() {
  return thread_device >= 0 ? thread_device : first_device.load(std::memory_order_relaxed);
}

void set_current_device(int index) {
  if (Runtime::initialized()) (void)Runtime::get().device(index);  // range check
  thread_device = index;
}

}  // namespace torch_tpu
