// DeviceGuard support: torch's device switching (with torch.device("tpu:1"): ...) lands here.
// PJRT orders work per device by data dependence, so there is one default stream per device.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "csrc/device/runtime.h"

namespace torch_tpu {
namespace {

class DeviceGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }

  c10::Device exchangeDevice(c10::Device device) const override {
    c10::Device previous = getDevice();
    if (device.index() != previous.index()) setDevice(device);
    return previous;
  }
  c10::Device getDevice() const override {
    return c10::Device(c10::DeviceType::PrivateUse1, current_device());
  }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == c10::DeviceType::PrivateUse1, "torch_tpu: expected a tpu device");
    if (device.index() >= 0) set_current_device(device.index());
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.index() >= 0) {
      try {
        set_current_device(device.index());
      } catch (...) {
      }
    }
  }
  c10::Stream getStream(c10::Device device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream exchangeStream(c10::Stream stream) const noexcept override { return stream; }
  c10::DeviceIndex deviceCount() const noexcept override {
    return Runtime::initialized() ? static_cast<c10::DeviceIndex>(Runtime::get().device_count())
                                  : 0;
  }
  // Events order nothing here: PJRT already orders each buffer's readers after its writer.
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override { await_pending(); }
  void synchronizeDevice(const c10::DeviceIndex) const override { await_pending(); }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, DeviceGuardImpl);

}  // namespace
}  // namespace torch_tpu
