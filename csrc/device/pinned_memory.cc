#include "csrc/device/pinned_memory.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <cstdint>
#include <map>
#include <mutex>

namespace torch_tpu {
namespace {

// Freed blocks are kept for reuse, as CUDA's host allocator does: a fresh large block costs a
// page fault per page on first touch, which dominated host-staged collectives (a 16 MB
// all_reduce spent ~4.5 ms faulting in its staging buffers).
constexpr std::size_t kMaxCachedBytes = std::size_t{1} << 30;

// Sizes are rounded so buffers of nearly equal sizes share blocks: powers of two up to 1 MiB,
// whole MiBs above.
std::size_t block_size(std::size_t nbytes) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  if (nbytes >= kMiB) return (nbytes + kMiB - 1) / kMiB * kMiB;
  std::size_t size = 512;
  while (size < nbytes) size <<= 1;
  return size;
}

struct Blocks {
  std::mutex mutex;
  std::map<std::uintptr_t, std::size_t> live;  // start -> block size
  std::multimap<std::size_t, void*> cached;    // block size -> start
  std::size_t cached_bytes = 0;
  std::size_t live_bytes = 0;
};

Blocks& blocks() {
  static auto* state = new Blocks();  // never destroyed: frees may come during exit
  return *state;
}

void free_pinned(void* ptr) {
  Blocks& state = blocks();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto it = state.live.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == state.live.end()) return;
  const std::size_t size = it->second;
  state.live.erase(it);
  state.live_bytes -= size;
  if (state.cached_bytes + size > kMaxCachedBytes) {
    c10::free_cpu(ptr);
    return;
  }
  state.cached.emplace(size, ptr);
  state.cached_bytes += size;
}

// Registered as PrivateUse1's host allocator, which torch.accelerator's host-memory calls
// (empty_host_cache, host_memory_stats) reach.
class PinnedMemoryAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(std::size_t nbytes) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (nbytes == 0) return {nullptr, nullptr, &free_pinned, cpu};
    const std::size_t size = block_size(nbytes);
    Blocks& state = blocks();
    void* ptr = nullptr;
    {
      std::lock_guard<std::mutex> lock(state.mutex);
      if (auto it = state.cached.find(size); it != state.cached.end()) {
        ptr = it->second;
        state.cached.erase(it);
        state.cached_bytes -= size;
      }
    }
    if (ptr == nullptr) ptr = c10::alloc_cpu(size);
    {
      std::lock_guard<std::mutex> lock(state.mutex);
      state.live[reinterpret_cast<std::uintptr_t>(ptr)] = size;
      state.live_bytes += size;
    }
    return {ptr, ptr, &free_pinned, cpu};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  // Transfers from these blocks complete before the copy returns, so no block waits on a stream.
  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) override { return true; }
  void empty_cache() override { empty_pinned_memory_cache(); }
  at::HostStats get_stats() override {
    Blocks& state = blocks();
    std::lock_guard<std::mutex> lock(state.mutex);
    at::HostStats stats;
    stats.active_requests.current = static_cast<int64_t>(state.live.size());
    stats.active_bytes.current = static_cast<int64_t>(state.live_bytes);
    stats.allocations.current = static_cast<int64_t>(state.live.size() + state.cached.size());
    stats.allocated_bytes.current = static_cast<int64_t>(state.live_bytes + state.cached_bytes);
    return stats;
  }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

PinnedMemoryAllocator pinned_allocator;
REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &pinned_allocator)

}  // namespace

c10::Allocator* pinned_memory_allocator() { return &pinned_allocator; }

bool is_pinned(const void* ptr) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  Blocks& state = blocks();
  std::lock_guard<std::mutex> lock(state.mutex);
  auto it = state.live.upper_bound(address);
  if (it == state.live.begin()) return false;
  --it;
  return address < it->first + it->second;
}

void empty_pinned_memory_cache() {
  Blocks& state = blocks();
  std::lock_guard<std::mutex> lock(state.mutex);
  for (auto& [size, ptr] : state.cached) c10::free_cpu(ptr);
  state.cached.clear();
  state.cached_bytes = 0;
}

std::size_t pinned_memory_cached_bytes() {
  Blocks& state = blocks();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.cached_bytes;
}

}  // namespace torch_tpu
