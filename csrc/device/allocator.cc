#include "csrc/device/allocator.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <fstream>
#include <string>

#include "csrc/device/memory_history.h"
#include "csrc/device/runtime.h"
#include "csrc/device/storage.h"

namespace torch_tpu {
namespace {

constexpr int kMaxDevices = 64;

// One allocator statistic kept lock-free: allocation happens on every new tensor.
struct Counter {
  std::atomic<int64_t> current{0}, peak{0}, allocated{0}, freed{0};

  void add(int64_t amount) {
    int64_t now = current.fetch_add(amount) + amount;
    allocated.fetch_add(amount);
    int64_t high = peak.load();
    while (now > high && !peak.compare_exchange_weak(high, now)) {
    }
  }
  void remove(int64_t amount) {
    current.fetch_sub(amount);
    freed.fetch_add(amount);
  }
  c10::CachingAllocator::Stat stat() const {
    return {current.load(), peak.load(), allocated.load(), freed.load()};
  }
};

struct DeviceCounters {
  Counter bytes, blocks;
};
std::array<DeviceCounters, kMaxDevices> counters;

DeviceCounters& counters_of(int device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "torch_tpu: device index ", device,
              " is out of range");
  return counters[device];
}

// Tells memory history and torch.profiler(profile_memory=True) about an allocation (size > 0)
// or a free (size < 0) of `storage`, after the counters count it.
void report(DeviceStorage* storage, int64_t size, const DeviceCounters& c) {
  if (size > 0) {
    memory_history::on_alloc(storage, size, storage->device());
  } else {
    memory_history::on_free(storage, -size, storage->device());
  }
  const auto in_use = static_cast<size_t>(c.bytes.current.load());
  c10::reportMemoryUsageToProfiler(storage, size, in_use, in_use,
                                   c10::Device(c10::DeviceType::PrivateUse1, storage->device()));
}

void delete_storage(void* context) {
  auto* storage = static_cast<DeviceStorage*>(context);
  auto& c = counters_of(storage->device());
  const auto nbytes = static_cast<int64_t>(storage->nbytes());
  c.bytes.remove(nbytes);
  c.blocks.remove(1);
  report(storage, -nbytes, c);
  delete storage;
}

// {MemAvailable, MemTotal} of the host, in bytes.
std::pair<int64_t, int64_t> host_memory_info() {
  std::ifstream meminfo("/proc/meminfo");
  int64_t available = 0, total = 0;
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") available = kib * 1024;
    if (key == "MemTotal:") total = kib * 1024;
  }
  return {available, total};
}

class TpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(std::size_t nbytes) override {
    int device = current_device();
    auto* storage = new DeviceStorage(nbytes, device);
    auto& c = counters_of(device);
    c.bytes.add(static_cast<int64_t>(nbytes));
    c.blocks.add(1);
    report(storage, static_cast<int64_t>(nbytes), c);
    // The pointer value is the storage object itself: unique and stable, so data_ptr()
    // identity and arithmetic (storage offsets) behave as on other devices. It is never
    // dereferenced as tensor data.
    return c10::DataPtr(storage, storage, &delete_storage,
                        c10::Device(c10::DeviceType::PrivateUse1, device));
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "torch_tpu: device storages cannot be copied bytewise; use Tensor.copy_");
  }

  bool initialized() override { return Runtime::initialized(); }
  // Buffers go back to the plugin when their last tensor goes: nothing is cached here.
  void emptyCache(c10::MempoolId_t) override {}
  // Streams are logical and run in order, so a buffer is never reused under a pending reader.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const auto& c = counters_of(device);
    c10::CachingDeviceAllocator::DeviceStats stats;
    auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    // Every storage is its own block and its own reservation: no pools, no splitting.
    for (auto* bytes : {&stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
                        &stats.requested_bytes})
      (*bytes)[all] = c.bytes.stat();
    for (auto* blocks : {&stats.allocation, &stats.segment, &stats.active})
      (*blocks)[all] = c.blocks.stat();
    stats.num_device_alloc = c.blocks.allocated.load();
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    auto& c = counters_of(device);
    for (Counter* counter : {&c.bytes, &c.blocks}) {
      counter->allocated.store(0);
      counter->freed.store(0);
    }
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    auto& c = counters_of(device);
    for (Counter* counter : {&c.bytes, &c.blocks}) counter->peak.store(counter->current.load());
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    auto [free, total] = device_memory_info(device);
    return {static_cast<size_t>(free), static_cast<size_t>(total)};
  }
};

TpuAllocator allocator_instance;

}  // namespace

c10::Allocator* device_allocator() { return &allocator_instance; }

std::pair<int64_t, int64_t> device_memory_info(int device) {
  auto& runtime = Runtime::get();
  auto stats = runtime.client().memory_stats(runtime.device(device));
  if (stats && stats->bytes_limit && *stats->bytes_limit > 0)
    return {*stats->bytes_limit - stats->bytes_in_use, *stats->bytes_limit};
  return host_memory_info();
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &allocator_instance);

}  // namespace torch_tpu
