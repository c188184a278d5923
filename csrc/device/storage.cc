#include "csrc/device/storage.h"

#include <ATen/core/TensorBase.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <utility>

#include "csrc/device/runtime.h"
#include "csrc/device/types.h"

namespace torch_tpu {

namespace {
std::atomic<int64_t> bucketed_storages{0};

// Whether `contents` are (or, pending, will be) the start of a bucket.
bool in_bucket(const DeviceStorage::Contents& contents) {
  return contents.bucket || (contents.pending && contents.pending->bucket > 0);
}

// Counts a storage's bucket as it comes and goes.
void count_bucket(bool before, bool after) {
  if (!before && after) bucketed_storages.fetch_add(1, std::memory_order_relaxed);
  if (before && !after) bucketed_storages.fetch_sub(1, std::memory_order_relaxed);
}
}  // namespace

int64_t bucketed_storage_count() { return bucketed_storages.load(std::memory_order_relaxed); }

std::mutex& pending_slots_mutex() {
  static std::mutex mutex;
  return mutex;
}

DeviceStorage::~DeviceStorage() {
  // The last reference may drop on another thread (autograd's) while a graph is flushed.
  std::shared_ptr<PendingSlot> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending = contents_.pending;
  }
  if (pending) {
    std::lock_guard<std::mutex> lock(pending_slots_mutex());
    pending->owner = nullptr;
  }
  pjrt::release(std::move(contents_.buffer));
  count_bucket(in_bucket(contents_), false);
  pjrt::release(std::move(contents_.bucket));
}

void DeviceStorage::assign_pending(std::shared_ptr<PendingSlot> slot) {
  std::shared_ptr<pjrt::Buffer> previous, previous_bucket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    count_bucket(in_bucket(contents_), slot->bucket > 0);
    previous = std::exchange(contents_.buffer, nullptr);
    previous_bucket = std::exchange(contents_.bucket, nullptr);
    contents_.type = slot->type;
    contents_.grown = {};
    contents_.pending = std::move(slot);
  }
  pjrt::release(std::move(previous));
  pjrt::release(std::move(previous_bucket));
}

DeviceStorage::Contents DeviceStorage::contents() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (contents_.bucket && !contents_.buffer) {
    const int64_t elements = static_cast<int64_t>(nbytes_) / hlo::byte_size(contents_.type);
    const auto& runtime = Runtime::get();
    try {
      contents_.buffer = runtime.client().prefix_view(
          contents_.bucket, to_pjrt_type(contents_.type), {&elements, 1}, runtime.device(device_));
    } catch (const pjrt::Error& error) {
      TORCH_CHECK(false, "torch_tpu: reading a tensor whose computation failed: ", error.what());
    }
  }
  return contents_;
}

DeviceStorage::Contents DeviceStorage::raw_contents() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return contents_;
}

void DeviceStorage::assign(std::shared_ptr<pjrt::Buffer> buffer, hlo::ElementType type) {
  std::shared_ptr<pjrt::Buffer> previous_bucket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    count_bucket(in_bucket(contents_), false);
    std::swap(contents_.buffer, buffer);
    previous_bucket = std::exchange(contents_.bucket, nullptr);
    contents_.type = type;
    contents_.grown = {};
    contents_.pending.reset();
  }
  pjrt::release(std::move(buffer));  // the previous one
  pjrt::release(std::move(previous_bucket));
}

void DeviceStorage::assign_bucket(std::shared_ptr<pjrt::Buffer> bucket, hlo::ElementType type,
                                  GrownLength grown) {
  std::shared_ptr<pjrt::Buffer> previous;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    count_bucket(in_bucket(contents_), bucket != nullptr);
    previous = std::exchange(contents_.buffer, nullptr);
    std::swap(contents_.bucket, bucket);
    contents_.type = type;
    contents_.grown = grown;
    contents_.pending.reset();
  }
  pjrt::release(std::move(previous));
  pjrt::release(std::move(bucket));  // the previous one
}

DeviceStorage& device_storage(const c10::Storage& storage) {
  const c10::DataPtr& data = storage.data_ptr();
  void* context = data.get_context();
  TORCH_CHECK(context != nullptr && storage.device_type() == c10::DeviceType::PrivateUse1,
              "torch_tpu: expected a tpu storage");
  // Ours point at their DeviceStorage and own it; a slice of one (untyped_storage()[a:b])
  // points into it and is owned by the storage it was cut from.
  TORCH_CHECK_NOT_IMPLEMENTED(data.get() == context,
                              "torch_tpu: a slice of a tpu storage (untyped_storage()[a:b]) "
                              "cannot be read or written; slice a tensor over it instead "
                              "(tensor.view(torch.uint8)[a:b])");
  return *static_cast<DeviceStorage*>(context);
}

DeviceStorage& device_storage(const at::TensorBase& tensor) {
  return device_storage(tensor.storage());
}

}  // namespace torch_tpu
