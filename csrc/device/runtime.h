// The process-wide PJRT client and the devices it drives. Initialised once, from Python,
// with the plugin that torch_tpu._plugin resolved.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "csrc/pjrt/client.h"

namespace torch_tpu {

class Runtime {
 public:
  // Loads the plugin and creates the client; idempotent for the same path. Throws
  // std::runtime_error with the plugin's message on failure. `key_value` (a client spanning
  // processes) must outlive the runtime.
  static void initialize(const std::string& plugin_path,
                         const std::vector<pjrt::ClientOption>& options,
                         const pjrt::KeyValueCallbacks* key_value = nullptr);
  static bool initialized();
  // Why the runtime will not start (no plugin is installed, say): get() raises it then.
  static void set_unavailable_reason(std::string reason);
  // The runtime; throws if initialize() has not run.
  static Runtime& get();

  pjrt::Client& client() const { return *client_; }
  int device_count() const { return static_cast<int>(client_->devices().size()); }
  PJRT_Device* device(int index) const;
  const std::string& plugin_path() const { return plugin_path_; }

 private:
  Runtime(std::string path, std::shared_ptr<pjrt::Client> client)
      : plugin_path_(std::move(path)), client_(std::move(client)) {}
  std::string plugin_path_;
  std::shared_ptr<pjrt::Client> client_;
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

// The calling thread's current device index (torch.tpu.set_device).
int current_device();
void set_current_device(int index);

}  // namespace torch_tpu
