#include "csrc/device/storage.h"

#include <ATen/core/TensorBase.h>
#include <c10/util/Exception.h>

#include <array>

#include "csrc/device/runtime.h"

namespace torch_tpu {
namespace {

constexpr int kMaxDevices = 64;

struct DeviceCounters {
  std::atomic<int64_t> allocated{0}, peak{0}, count{0};
};
std::array<DeviceCounters, kMaxDevices> counters;

void account(int device, int64_t delta) {
  auto& c = counters[device % kMaxDevices];
  int64_t now = c.allocated.fetch_add(delta) + delta;
  if (delta > 0) {
    c.count.fetch_add(1);
    int64_t peak = c.peak.load();
    while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
    }
  }
}

void delete_storage(void* context) {
  auto* storage = static_cast<DeviceStorage*>(context);
  account(storage->device(), -static_cast<int64_t>(storage->nbytes()));
  delete storage;
}

class DeviceAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t nbytes) override {
    int device = current_device();
    auto* storage = new DeviceStorage(nbytes, device);
    account(device, static_cast<int64_t>(nbytes));
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
};

DeviceAllocator allocator_instance;

}  // namespace

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
}

void DeviceStorage::assign_pending(std::shared_ptr<PendingSlot> slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  contents_.buffer.reset();
  contents_.type = slot->type;
  contents_.pending = std::move(slot);
}

DeviceStorage::Contents DeviceStorage::contents() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return contents_;
}

void DeviceStorage::assign(std::shared_ptr<pjrt::Buffer> buffer, hlo::ElementType type) {
  std::lock_guard<std::mutex> lock(mutex_);
  contents_.buffer = std::move(buffer);
  contents_.type = type;
  contents_.pending.reset();
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

c10::Allocator* device_allocator() { return &allocator_instance; }

AllocatorStats allocator_stats(int device) {
  auto& c = counters[device % kMaxDevices];
  return {c.allocated.load(), c.peak.load(), c.count.load()};
}

void reset_peak_allocator_stats(int device) {
  auto& c = counters[device % kMaxDevices];
  c.peak.store(c.allocated.load());
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &allocator_instance);

}  // namespace torch_tpu
