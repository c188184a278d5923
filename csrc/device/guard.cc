// DeviceGuard support: torch's device switching (with torch.device("tpu:1"): ...) lands here.
//
// Streams are logical. PJRT already orders every buffer's readers after its writer, so work
// on one tpu device is correctly ordered whatever "stream" issued it; streams exist so that
// code written for CUDA streams (FSDP2, DDP, torch.Stream/torch.Event) runs unchanged: each new
// stream gets its own id, the current stream is per thread and device, and events record a
// host timestamp (for elapsed_time) and synchronize by waiting for the device's pending work.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <atomic>
#include <chrono>
#include <unordered_map>

#include "csrc/device/runtime.h"

namespace torch_tpu {
namespace {

std::atomic<c10::StreamId> next_stream_id{1};  // 0 is the default stream

thread_local std::unordered_map<c10::DeviceIndex, c10::StreamId> current_streams;

struct Event {
  std::chrono::steady_clock::time_point recorded;
};

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
    device = resolved(device);
    auto it = current_streams.find(device.index());
    return c10::Stream(c10::Stream::UNSAFE, device, it == current_streams.end() ? 0 : it->second);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, resolved(device));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*high_priority*/) const override {
    return getNewStream(device, 0);
  }
  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    return c10::Stream(c10::Stream::UNSAFE, resolved(device), next_stream_id++);
  }
  c10::Stream exchangeStream(c10::Stream stream) const noexcept override {
    c10::Stream previous = getStream(stream.device());
    current_streams[resolved(stream.device()).index()] = stream.id();
    return previous;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return Runtime::initialized() ? static_cast<c10::DeviceIndex>(Runtime::get().device_count())
                                  : 0;
  }

  void record(void** event, const c10::Stream& /*stream*/, const c10::DeviceIndex /*device*/,
              const c10::EventFlag /*flag*/) const override {
    if (*event == nullptr) *event = new Event();
    static_cast<Event*>(*event)->recorded = std::chrono::steady_clock::now();
  }
  // Waiting on an event orders nothing here: PJRT orders each buffer's readers after its writer.
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  void destroyEvent(void* event, const c10::DeviceIndex /*device*/) const noexcept override {
    delete static_cast<Event*>(event);
  }
  void synchronizeEvent(void* /*event*/) const override { await_pending(); }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "torch_tpu: elapsed_time needs both events to have been recorded");
    await_pending();
    auto span = static_cast<Event*>(end)->recorded - static_cast<Event*>(start)->recorded;
    return std::chrono::duration<double, std::milli>(span).count();
  }
  bool queryStream(const c10::Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const c10::Stream& /*stream*/) const override { await_pending(); }
  void synchronizeDevice(const c10::DeviceIndex /*device*/) const override { await_pending(); }

 private:
  static c10::Device resolved(c10::Device device) {
    return device.has_index() ? device
                              : c10::Device(c10::DeviceType::PrivateUse1, current_device());
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, DeviceGuardImpl);

}  // namespace
}  // namespace torch_tpu
