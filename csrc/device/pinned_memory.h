// Pinned host memory for tpu transfers. PJRT reads and writes any host memory, so "pinned"
// memory is ordinary host memory; torch still asks for it (tensor.pin_memory(), DDP's reducer,
// DataLoader(pin_memory=True)) and checks is_pinned() on the result, so the blocks are tracked.
// Freed blocks are cached for reuse (host-staged collectives allocate their staging buffers
// here), up to a bound; empty_pinned_memory_cache() returns them to the system.
#pragma once

#include <c10/core/Allocator.h>

#include <cstddef>

namespace torch_tpu {

c10::Allocator* pinned_memory_allocator();
// Whether `ptr` lies inside a block that allocator handed out.
bool is_pinned(const void* ptr);
void empty_pinned_memory_cache();
std::size_t pinned_memory_cached_bytes();

}  // namespace torch_tpu
