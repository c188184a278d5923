// torch.tpu.memory._record_memory_history: every device storage allocated and freed while
// recording, with the stack that allocated it, kept for _snapshot() in the format PyTorch's
// memory visualizer reads (as torch.cuda.memory records it).
#pragma once

#include <torch/csrc/profiler/combined_traceback.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace torch_tpu::memory_history {

struct Event {
  bool alloc = true;  // else a free
  uintptr_t address = 0;
  int64_t size = 0;
  int device = 0;
  int64_t time_us = 0;
  std::shared_ptr<torch::CapturedTraceback> stack;  // null when stacks are not recorded
};

// Starts (keeping at most `max_entries` events, the oldest dropped first) or stops recording;
// `python_stacks` / `cpp_stacks`: which frames each event keeps. Stopping keeps the events.
void record(bool enabled, size_t max_entries, bool python_stacks, bool cpp_stacks);

// Called by the allocator; cheap unless recording.
void on_alloc(const void* address, int64_t size, int device);
void on_free(const void* address, int64_t size, int device);

// The recorded events, oldest first, and the storages alive now that were allocated while
// recording (as alloc events).
std::pair<std::vector<Event>, std::vector<Event>> snapshot();

}  // namespace torch_tpu::memory_history
