// Device timings for the profilers: every executable run, from launch to completion, tagged
// with the profiled op that launched it. The CPU plugin has no device profiler, so a run's
// device span is estimated on the host: it starts when the device is free (the later of its
// launch and the end of the previous run on that device) and ends when its completion event
// fires. Compiles are recorded as host spans.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torch_tpu::profiler {

struct Span {
  std::string name;  // "aten::add.Tensor", "fused graph of 12 ops: ...", "compile aten::mm"
  int device = 0;
  int64_t start_ns = 0, end_ns = 0;  // system clock, since the epoch (as kineto's)
  uint64_t correlation = 0;          // the profiled op that launched it; 0 for none
  bool on_device = true;             // false: host work (a compile)
  // A device run's launch on the host: from the call into the plugin to its return.
  int64_t launch_start_ns = 0, launch_end_ns = 0;
  int32_t host_thread = 0;  // the thread that launched it (or compiled)
  // Where a device run's times come from (see xspace.h); the trace says so on each run.
  enum class Timing : uint8_t {
    HostEstimate,    // the plugin traced nothing: from launch and completion on the host
    Plugin,          // the plugin's own events for this run, found by program
    PluginByWindow,  // the plugin's events that fell between launch and completion
    Unmatched,       // the plugin traced the device, but not this run recognisably
  };
  Timing timing = Timing::HostEstimate;
};

// "host estimate", "plugin", ...: how the trace names a run's Timing.
const char* timing_name(Span::Timing timing);

// Whether a profiler collects: one relaxed atomic load, so launches pay nearly nothing
// otherwise.
bool collecting();
void start_collecting();
// Waits for work in flight (so every launched run has its span), stops, and returns the spans,
// with the device's timestamps where the plugin's own trace has them.
std::vector<Span> stop_collecting();
// Where the plugin has a profiler of its own (libtpu, the CUDA plugin), it runs from
// start_collecting() to stop_collecting(); this is its trace of the last profile, a serialized
// XSpace for XProf. Empty otherwise.
std::string plugin_trace();
// What the plugin's profiler did in the last profile ("the plugin has no profiler extension",
// "collected N bytes, ..."), for diagnosing an empty plugin trace.
std::string plugin_profiler_status();

// The profiled op running on this thread, as the profiler announces it.
void push_correlation(uint64_t id);
void pop_correlation();

// One timed run. `launch` returns nullptr unless a profiler collects, and only then calls
// `name()` (so launches build no names otherwise); `finished` records the span and may be
// called on any thread.
class RunTimer {
 public:
  template <typename Name>
  static std::shared_ptr<RunTimer> launch(const Name& name, int device) {
    if (!collecting()) return nullptr;
    return std::shared_ptr<RunTimer>(new RunTimer(name(), device));
  }
  // The plugin took the launch (its execute call returned).
  void launched();
  void finished();

 private:
  RunTimer(std::string name, int device);
  Span span_;
};

// Records a host span from construction to destruction while a profiler collects.
class HostSpan {
 public:
  explicit HostSpan(std::string_view name);
  ~HostSpan();
  HostSpan(const HostSpan&) = delete;
  HostSpan& operator=(const HostSpan&) = delete;

 private:
  std::optional<Span> span_;
};

int64_t now_ns();

}  // namespace torch_tpu::profiler
