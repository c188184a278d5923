// PrivateUse1 hooks: how torch asks the backend for generators, availability and devices.
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "csrc/device/generator.h"
#include "csrc/device/pinned_memory.h"
#include "csrc/device/runtime.h"
#include "csrc/device/storage.h"
#include "csrc/device/storage_resize.h"

namespace torch_tpu {
namespace {

struct DeviceHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override {
    return Runtime::initialized() && Runtime::get().device_count() > 0;
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return at::make_generator<DeviceGenerator>(device < 0 ? current_device() : device);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    return at::Device(c10::DeviceType::PrivateUse1, static_cast<DeviceStorage*>(data)->device());
  }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return Runtime::initialized(); }
  c10::DeviceIndex deviceCount() const override {
    return Runtime::initialized() ? static_cast<c10::DeviceIndex>(Runtime::get().device_count())
                                  : 0;
  }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(current_device());
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto previous = getCurrentDevice();
    set_current_device(device);
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_memory_allocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage_bytes(storage, nbytes);
  }
};

// Registered at load time, before any tensor is made.
const bool registered = [] {
  at::RegisterPrivateUse1HooksInterface(new DeviceHooks());
  return true;
}();

}  // namespace
}  // namespace torch_tpu
