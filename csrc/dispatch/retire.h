// Executables that left a cache, destroyed once nothing can still be running them.
#pragma once

#include <memory>

#include "csrc/pjrt/executable.h"

namespace torch_tpu {

// Most executables a cache keeps (TORCH_TPU_MAX_CACHED_OPS, default 4096, for single ops;
// TORCH_TPU_MAX_CACHED_GRAPHS, default 1024, for fused and compiled graphs). Each holds JIT code
// mappings, and a process has a bounded number of them (vm.max_map_count, 65530 by default; the
// CPU plugin uses about 4.5 per executable): past it the plugin's compiler fails ("Cannot
// allocate memory") and the process can crash. The least recently used leave first.
size_t max_cached_ops();
size_t max_cached_graphs();
// Whether the process's mappings have passed TORCH_TPU_MAX_MAPPINGS (default: half of
// vm.max_map_count): executables of larger ops hold more mappings than the limits above
// assume, so past it the caches evict their oldest entry at every insert too. Counted from
// /proc/self/maps at most every 16th call.
bool mappings_near_limit();

// Takes an executable a cache dropped. It may still be running, so it is destroyed later, on
// the calling thread, once no work is in flight (never on a plugin completion thread).
void retire(std::shared_ptr<pjrt::Executable> executable);

}  // namespace torch_tpu
