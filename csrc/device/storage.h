// Device storage: what a tpu tensor's DataPtr owns. Device buffers are immutable, so a write
// makes a new buffer and swaps it in; every alias of the storage sees the new contents.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "csrc/hlo/types.h"
#include "csrc/pjrt/buffer.h"

namespace at {
class TensorBase;
}

namespace torch_tpu {

class DeviceStorage {
 public:
  DeviceStorage(std::size_t nbytes, int device) : nbytes_(nbytes), device_(device) {}

  std::size_t nbytes() const { return nbytes_; }
  int device() const { return device_; }

  struct Contents {
    std::shared_ptr<pjrt::Buffer> buffer;  // flat rank-1 array; null until first written
    hlo::ElementType type = hlo::ElementType::U8;
  };
  Contents contents() const;
  // Swaps in a new flat buffer holding the whole storage as elements of `type`.
  void assign(std::shared_ptr<pjrt::Buffer> buffer, hlo::ElementType type);

 private:
  const std::size_t nbytes_;
  const int device_;
  mutable std::mutex mutex_;
  Contents contents_;
};

DeviceStorage& device_storage(const c10::Storage& storage);
DeviceStorage& device_storage(const at::TensorBase& tensor);

// The PrivateUse1 allocator. Allocation is lazy: no device memory is used until a first write.
c10::Allocator* device_allocator();

struct AllocatorStats {
  int64_t allocated_bytes = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t num_allocs = 0;
};
AllocatorStats allocator_stats(int device);
void reset_peak_allocator_stats(int device);

}  // namespace torch_tpu
