#include "csrc/device/storage.h"

#include <ATen/core/TensorBase.h>
#include <c10/util/Exception.h>

#include <utility>

#include "csrc/device/runtime.h"

namespace torch_tpu {

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
}

void DeviceStorage::assign_pending(std::shared_ptr<PendingSlot> slot) {
  std::shared_ptr<pjrt::Buffer> previous;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    previous = std::exchange(contents_.buffer, nullptr);
    contents_.type = slot->type;
    contents_.pending = std::move(slot);
  }
  pjrt::release(std::move(previous));
}

DeviceStorage::Contents DeviceStorage::contents() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return contents_;
}

void DeviceStorage::assign(std::shared_ptr<pjrt::Buffer> buffer, hlo::ElementType type) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(contents_.buffer, buffer);
    contents_.type = type;
    contents_.pending.reset();
  }
  pjrt::release(std::move(buffer));  // the previous one
}

DeviceStorage& device_storage(const c10::Storage& storage) {
  void* context = storage.data_ptr().get_context();
  TORCH_CHECK(context != nullptr && storage.device_type() == c10::DeviceType::PrivateUse1,
              "torch_tpu: expected a tpu storage");
  return *static_cast<DeviceStorage*>(context);
}

DeviceStorage& device_storage(const at::TensorBase& tensor) {
  return device_storage(tensor.storage());
}

}  // namespace torch_tpu
