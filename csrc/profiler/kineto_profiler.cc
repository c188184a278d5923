// torch.profiler's device lane for tpu: a Kineto activity profiler registered for PrivateUse1
// (torch forwards it to Kineto when a profile includes ProfilerActivity.PrivateUse1). Each run
// becomes a kernel activity linked to the op that launched it, which is how key_averages()
// attributes device time to ops and how the Chrome trace draws its flow arrows.
#include <IActivityProfiler.h>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "csrc/device/runtime.h"
#include "csrc/profiler/device_trace.h"

namespace torch_tpu::profiler {
namespace {

using libkineto::ActivityType;

const std::set<ActivityType>& device_activities() {
  static const std::set<ActivityType> types{ActivityType::CONCURRENT_KERNEL,
                                            ActivityType::PRIVATEUSE1_RUNTIME};
  return types;
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    start_collecting();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    collected_ = stop_collecting();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, [](int32_t) { return nullptr; }, 0, INT64_MAX);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity, int64_t start_time,
                    int64_t end_time) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(start_time, end_time, "torch_tpu");
    const int32_t process = static_cast<int32_t>(::getpid());
    uint32_t flow = 0;
    for (const Span& span : collected_) {
      if (span.end_ns < start_time || span.start_ns > end_time) continue;
      const auto correlation = static_cast<int32_t>(span.correlation);
      const libkineto::ITraceActivity* op =
          span.correlation != 0 ? linked_activity(correlation) : nullptr;
      if (!span.on_device) {
        // A compile: host work of the op that triggered it, on that op's thread.
        add(logger, ActivityType::PRIVATEUSE1_RUNTIME, span.name, span.start_ns, span.end_ns,
            correlation, process, span.host_thread, op);
        continue;
      }
      // The launch on the host, and the run on the device it starts (linked by a flow arrow);
      // both belong to the op that launched them, which is how the run's time counts as that
      // op's device time.
      ++flow;
      add(logger, ActivityType::PRIVATEUSE1_RUNTIME, "launch " + span.name, span.launch_start_ns,
          std::max(span.launch_end_ns, span.launch_start_ns), correlation, process,
          span.host_thread, op, flow, true);
      add(logger, ActivityType::CONCURRENT_KERNEL, span.name, span.start_ns, span.end_ns,
          correlation, span.device, 0, op, flow, false, timing_name(span.timing));
    }
    status_ = libkineto::TraceStatus::READY;
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(
        libkineto::DeviceInfo{0, 0, "tpu", Runtime::get().client().platform_name()});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    return {libkineto::ResourceInfo{0, 0, 0, "executions"}};
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override { push_correlation(id); }
  void popCorrelationId() override { pop_correlation(); }

 private:
  void add(libkineto::ActivityLogger& logger, ActivityType type, const std::string& name,
           int64_t start, int64_t end, int32_t correlation, int32_t device, int32_t resource,
           const libkineto::ITraceActivity* op, uint32_t flow = 0, bool flow_start = false,
           const char* device_time = nullptr) {
    buffer_->emplace_activity(buffer_->span, type, name);
    libkineto::GenericTraceActivity& activity = *buffer_->activities.back();
    activity.startTime = start;
    activity.endTime = end;
    activity.id = correlation;
    activity.device = device;
    activity.resource = resource;
    activity.linked = op;
    if (flow != 0) {
      activity.flow.id = flow;
      activity.flow.type = libkineto::kLinkAsyncCpuGpu;
      activity.flow.start = flow_start;
    }
    // Where a run's device time came from: the plugin's trace, or the host's estimate.
    if (device_time != nullptr) activity.addMetadataQuoted("device time", device_time);
    logger.handleGenericActivity(activity);
  }

  std::vector<Span> collected_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

class DeviceProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override { return device_activities(); }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& activity_types, const libkineto::Config& /*config*/) override {
    // A CPU-only profile asks too: no session then.
    if (!activity_types.contains(ActivityType::CONCURRENT_KERNEL)) return nullptr;
    return std::make_unique<Session>();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/, const std::set<ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"torch_tpu"};
};

REGISTER_PRIVATEUSE1_PROFILER(DeviceProfiler);

}  // namespace
}  // namespace torch_tpu::profiler
