#include "csrc/device/pinned_memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <cstdint>
#include <map>
#include <mutex>

namespace torch_tpu {
namespace {

std::mutex blocks_mutex;
std::map<std::uintptr_t, std::size_t>& blocks() {  // start -> size
  static auto* map = new std::map<std::uintptr_t, std::size_t>();
  return *map;
}

void free_pinned(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(blocks_mutex);
    blocks().erase(reinterpret_cast<std::uintptr_t>(ptr));
  }
  c10::free_cpu(ptr);
}

class PinnedMemoryAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t nbytes) override {
    void* ptr = nbytes == 0 ? nullptr : c10::alloc_cpu(nbytes);
    if (ptr != nullptr) {
      std::lock_guard<std::mutex> lock(blocks_mutex);
      blocks()[reinterpret_cast<std::uintptr_t>(ptr)] = nbytes;
    }
    return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

c10::Allocator* pinned_memory_allocator() {
  static PinnedMemoryAllocator allocator;
  return &allocator;
}

bool is_pinned(const void* ptr) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(blocks_mutex);
  auto it = blocks().upper_bound(address);
  if (it == blocks().begin()) return false;
  --it;
  return address < it->first + it->second;
}

}  // namespace torch_tpu
