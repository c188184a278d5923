// The legacy profiler's device timing (torch.autograd.profiler.profile(use_device="tpu")):
// torch records an event when each op begins and ends and asks for the time between them.
// An event here is taken once the device has finished everything launched before it, so the
// difference is the device time the op's launches took.
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

#include "csrc/device/runtime.h"
#include "csrc/profiler/device_trace.h"

namespace torch_tpu::profiler {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

class DeviceStubs final : public torch::profiler::impl::ProfilerStubs {
 public:
  DeviceStubs() { torch::profiler::impl::registerPrivateUse1Methods(this); }

  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    if (device != nullptr) *device = static_cast<c10::DeviceIndex>(current_device());
    await_pending();
    *event = std::make_shared<int64_t>(now_ns());
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
  }

  // Microseconds, as the legacy profiler reads it.
  float elapsed(const ProfilerVoidEventStub* start,
                const ProfilerVoidEventStub* end) const override {
    const int64_t from = *static_cast<const int64_t*>(start->get());
    const int64_t to = *static_cast<const int64_t*>(end->get());
    return static_cast<float>(to - from) / 1000.0f;
  }

  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    for (int device : Runtime::get().local_indices()) op(device);
  }

  void synchronize() const override { await_pending(); }
};

const DeviceStubs stubs;

}  // namespace
}  // namespace torch_tpu::profiler
