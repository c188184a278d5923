// Pinned host memory for tpu transfers. PJRT reads and writes any host memory, so "pinned"
// memory is ordinary host memory; torch still asks for it (tensor.pin_memory(), DDP's reducer,
// DataLoader(pin_memory=True)) and checks is_pinned() on the result, so the blocks are tracked.
#pragma once

#include <c10/core/Allocator.h>

namespace torch_tpu {

c10::Allocator* pinned_memory_allocator();
// Whether `ptr` lies inside a block that allocator handed out.
bool is_pinned(const void* ptr);

}  // namespace torch_tpu
