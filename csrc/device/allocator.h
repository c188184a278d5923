// The PrivateUse1 allocator: hands out device storages and keeps CUDA-style statistics, so
// torch.accelerator.memory_* and torch.tpu.memory_* answer as they do for CUDA.
#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>
#include <utility>

namespace torch_tpu {

// Allocation is lazy: no device memory is used until a first write.
c10::Allocator* device_allocator();

// {free, total} bytes of `device`: the plugin's memory statistics where it reports a limit,
// otherwise the host's (the CPU plugin's buffers live in host memory).
std::pair<int64_t, int64_t> device_memory_info(int device);

}  // namespace torch_tpu
