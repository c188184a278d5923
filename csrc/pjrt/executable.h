// RAII over PJRT_LoadedExecutable: a compiled program, ready to run on a device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "csrc/pjrt/buffer.h"
#include "csrc/pjrt/c_api.h"
#include "csrc/pjrt/event.h"

namespace torch_tpu::pjrt {

struct ExecuteResult {
  std::vector<Buffer> outputs;
  Event done;  // completes when the device has finished the run
};

class Executable {
 public:
  Executable(const PJRT_Api* api, PJRT_LoadedExecutable* executable);
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;
  ~Executable();

  std::size_t num_outputs() const { return num_outputs_; }
  // Enqueues one run on `device`; returns at once. Output buffers become defined when the run
  // finishes; reading them waits for that. Arguments are not donated.
  // `donated`: indices of arguments whose buffers the execution may take over (their memory
  // becomes an aliased output's; the argument buffers are unusable afterwards).
  ExecuteResult execute(std::span<PJRT_Buffer* const> arguments, PJRT_Device* device,
                        std::span<const int64_t> donated = {}) const;
  // Launches an executable compiled with replicated_compile_options on all its devices in one
  // PJRT_LoadedExecutable_Execute call (so its collectives can meet): arguments_per_device[i]
  // are replica i's arguments, on that replica's device. Returns one result per replica, in
  // the same order. Checks all replicas' arguments (count, device, same types and shapes)
  // before launching any, and throws Error (INVALID_ARGUMENT) on a mismatch.
  std::vector<ExecuteResult> execute_replicated(
      const std::vector<std::vector<PJRT_Buffer*>>& arguments_per_device) const;
  // Bytes that PJRT_Executable_DeserializeAndLoad accepts on the same plugin build.
  std::string serialize() const;
  // Device memory a run takes besides its arguments and outputs (XLA's temporaries), as the
  // plugin's compiled-memory stats report it; -1 where the plugin does not report it.
  int64_t temp_bytes() const { return temp_bytes_; }

 private:
  // Each output's bytes, read from the first run's buffers (they are the same at every run),
  // so that counting outputs as device memory asks the plugin nothing per run.
  const std::vector<int64_t>& output_bytes(const std::vector<PJRT_Buffer*>& outputs) const;
  // Wraps one run's output buffers, counted as device memory, then counts the run's temporaries
  // towards the peak.
  std::vector<Buffer> take_outputs(const std::vector<PJRT_Buffer*>& outputs) const;

  const PJRT_Api* api_;
  PJRT_LoadedExecutable* executable_;
  std::size_t num_outputs_ = 0;
  int64_t temp_bytes_ = -1;
  mutable std::once_flag output_bytes_once_;
  mutable std::vector<int64_t> output_bytes_;
};

// The largest temp_bytes() of the executables run since the last reset, in this process: the
// device memory that tensor counts (torch.tpu.max_memory_allocated) do not see.
int64_t largest_temp_run();
void reset_largest_temp_run();

}  // namespace torch_tpu::pjrt
