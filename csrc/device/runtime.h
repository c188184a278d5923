// The process-wide PJRT client and the devices it drives. Initialised once, from Python,
// with the plugin that torch_tpu._plugin resolved.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "csrc/pjrt/client.h"

namespace torch_tpu {

// Where torchrun placed this process on its host (LOCAL_RANK of LOCAL_WORLD_SIZE); unset
// (local_world_size 0) outside torchrun.
struct LocalPlace {
  int local_rank = -1;
  int local_world_size = 0;
};

// How torch's device indices name PJRT devices: the one place they are mapped. Index i is the
// plugin's addressable device i - first, for i in [first, first + addressable); device_count()
// is `count`. Normally first = 0 and count = addressable. A torchrun process that drives one
// chip (CPU plugin, CUDA plugin with visible_devices=[LOCAL_RANK], libtpu) numbers it
// LOCAL_RANK and counts LOCAL_WORLD_SIZE devices, as a CUDA process sees its host's GPUs, so
// that `tpu:LOCAL_RANK` code runs unchanged; the other indices are its peers' chips.
struct DeviceNumbering {
  int first = 0;
  int addressable = 0;
  int count = 0;
  LocalPlace place;  // set where the numbering follows torchrun's local ranks

  static DeviceNumbering choose(int addressable, LocalPlace place);
  bool owns(int index) const { return index >= first && index < first + addressable; }
  // Throws torch.AcceleratorError saying why `index` names none of this process's devices.
  [[noreturn]] void reject(int index) const;
};

class Runtime {
 public:
  // Loads the plugin and creates the client; idempotent for the same path. Throws
  // std::runtime_error with the plugin's message on failure. `key_value` (a client spanning
  // processes) must outlive the runtime.
  static void initialize(const std::string& plugin_path,
                         const std::vector<pjrt::ClientOption>& options,
                         const pjrt::KeyValueCallbacks* key_value = nullptr, LocalPlace place = {});
  static bool initialized();
  // Why the runtime will not start (no plugin is installed, say): get() raises it then.
  static void set_unavailable_reason(std::string reason);
  // The runtime; throws if initialize() has not run.
  static Runtime& get();

  pjrt::Client& client() const { return *client_; }
  // torch's view: indices 0..device_count()-1, of which this process drives local_indices().
  int device_count() const { return numbering_.count; }
  std::vector<int> local_indices() const;
  // The device a torch index names; throws torch.AcceleratorError where it is not this
  // process's (out of range, or another local rank's chip).
  const pjrt::DeviceInfo& device_info(int index) const {
    if (!numbering_.owns(index)) numbering_.reject(index);
    return client_->devices()[index - numbering_.first];
  }
  PJRT_Device* device(int index) const { return device_info(index).device; }
  const std::string& plugin_path() const { return plugin_path_; }

 private:
  Runtime(std::string path, std::shared_ptr<pjrt::Client> client, DeviceNumbering numbering)
      : plugin_path_(std::move(path)), client_(std::move(client)), numbering_(numbering) {}
  std::string plugin_path_;
  std::shared_ptr<pjrt::Client> client_;
  DeviceNumbering numbering_;
};

// Executions in flight, so that synchronize() can wait for all of them: PJRT has no
// device-wide fence, so the dispatcher reports each enqueue and each completion.
void pending_started();
void pending_finished();
// Executions enqueued and not finished: now, and the most at any launch since the last reset.
// Above 1, the host ran ahead of the device (Strict mode enqueues and returns).
int64_t in_flight();
int64_t max_in_flight();
void reset_max_in_flight();
void await_pending();
// Waits for enqueued executions only (not for DeferAndFuse's unflushed graph).
void await_in_flight();
// Waits until at most `count` (0 or 1: the counts finishing wakes waiters at) executions are in
// flight, or `enough` (when given) says so; it is asked again as each execution finishes.
void await_in_flight_until(int64_t count, bool (*enough)());
// Called by await_pending() first, to run work that is recorded but not yet enqueued
// (DeferAndFuse's pending graph); the dispatcher installs it.
void set_materialize_hook(void (*hook)());

// The calling thread's current device index (torch.tpu.set_device); a thread starts on the
// process's first device (LOCAL_RANK under torchrun with one chip per process).
int current_device();
void set_current_device(int index);

}  // namespace torch_tpu
