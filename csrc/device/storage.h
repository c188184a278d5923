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

class DeviceStorage;

// A tensor whose sizes grow with a sequence's length, its whole sequence rerun at every step
// (dispatch/length_buckets.h): that length, and `inner`, the elements its contiguous layout
// holds after the length's dim (that dim's stride). length 0: none known.
struct GrownLength {
  int64_t length = 0;
  int64_t inner = 0;
};

// Marks a storage whose next contents are a value of a fused graph that has not run yet
// (DeferAndFuse). The graph realizes it into a buffer when it runs.
struct PendingSlot {
  uint64_t epoch = 0;  // the graph it belongs to
  int value = -1;      // the value's index in that graph
  hlo::ElementType type = hlo::ElementType::F32;
  DeviceStorage* owner = nullptr;  // cleared (under pending_slots_mutex) when the storage dies
  // Set where the value is a size bucket's buffer of this many elements, the storage its first
  // ones (dispatch/growing_buckets.h): it becomes the storage's bucket, not its buffer.
  int64_t bucket = 0;
  // The buffer the storage held before the graph first wrote it: the graph may write the new
  // value into that buffer's memory (donation) when nothing else holds it.
  std::weak_ptr<pjrt::Buffer> replaces;
};

// Held while a pending slot's owner is read or cleared.
std::mutex& pending_slots_mutex();

class DeviceStorage {
 public:
  DeviceStorage(std::size_t nbytes, int device)
      : nbytes_(nbytes), device_(device), serial_(next_serial_++) {}
  ~DeviceStorage();
  DeviceStorage(const DeviceStorage&) = delete;
  DeviceStorage& operator=(const DeviceStorage&) = delete;

  std::size_t nbytes() const { return nbytes_; }
  // Storages are numbered in the order they are made: serial() >= next_serial() read earlier
  // means made since.
  uint64_t serial() const { return serial_; }
  static uint64_t next_serial() { return next_serial_.load(); }
  int device() const { return device_; }

  struct Contents {
    std::shared_ptr<pjrt::Buffer> buffer;  // flat rank-1 array; null until first written
    hlo::ElementType type = hlo::ElementType::U8;
    std::shared_ptr<PendingSlot> pending;  // set: the contents are a pending fused-graph value
    // Set where the storage is the first elements of a larger buffer, a size bucket's (see
    // dispatch/size_buckets.h); `buffer` is then a view of them, made when first needed.
    std::shared_ptr<pjrt::Buffer> bucket;
    // Where the bucket holds a tensor whose sizes grow with a sequence's length.
    GrownLength grown;
  };
  // The contents, with a bucketed storage's view made (which waits for the bucket's producer).
  Contents contents() const;
  // The contents as they are: a bucketed storage's `buffer` may still be null.
  Contents raw_contents() const;
  // Swaps in a new flat buffer holding the whole storage as elements of `type`.
  void assign(std::shared_ptr<pjrt::Buffer> buffer, hlo::ElementType type);
  // Swaps in a bucket's buffer whose first elements (of `type`) are the storage's contents.
  void assign_bucket(std::shared_ptr<pjrt::Buffer> bucket, hlo::ElementType type,
                     GrownLength grown = {});
  // The contents become a pending value (the previous buffer is released).
  void assign_pending(std::shared_ptr<PendingSlot> slot);

 private:
  const std::size_t nbytes_;
  const int device_;
  const uint64_t serial_;
  static inline std::atomic<uint64_t> next_serial_{0};
  mutable std::mutex mutex_;
  mutable Contents contents_;  // contents() makes a bucket's view
};

// Storages whose contents are the start of a size bucket's buffer (see Contents::bucket), or
// will be (a pending bucket, PendingSlot::bucket).
int64_t bucketed_storage_count();

DeviceStorage& device_storage(const c10::Storage& storage);
DeviceStorage& device_storage(const at::TensorBase& tensor);

}  // namespace torch_tpu
