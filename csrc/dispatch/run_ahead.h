// How far the host may run ahead of the device, counted in memory.
#pragma once

#include <cstdint>

namespace torch_tpu {

// Called before each launch that the host does not wait for. When the buffers the host has
// let go of but executions in flight still read (pjrt::retired_device_bytes) pass
// TORCH_TPU_RETIRED_PERCENT (default 10; 0: no bound) of the live device bytes and
// TORCH_TPU_RETIRED_MIN_BYTES (default 1 MiB), it waits for executions to finish until they
// are back within the bound, or only the running one is left: the host then stays a launch
// ahead, so the device is never starved. Without it a loop enqueued ahead holds every
// iteration's outputs at once: the plugin allocates them at launch, where CUDA's
// stream-ordered allocator reuses the memory the previous iteration let go of.
void bound_run_ahead();

// The percent in force (from TORCH_TPU_RETIRED_PERCENT until set here; 0: no bound): a bench
// compares both in one process.
int64_t retired_percent();
void set_retired_percent(int64_t percent);

}  // namespace torch_tpu
