// TORCH_TPU_HOST_TIMERS=1: where the host's time goes, per phase of an eager op and of a
// compiled graph's call, summed over the process (torch_tpu.metrics() then reports
// "host_us.<phase>" and "host_calls.<phase>"). A GPU or TPU machine may have no perf: one run
// with the timers says where every µs of dispatch went. Off (the default), a phase costs one
// branch on a flag read once.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace torch_tpu {

enum class HostPhase : uint8_t {
  // An eager op, from ATen's call to the returned tensors (the phases below are parts of it).
  OpTotal,
  Arguments,   // size buckets' check, device and argument checks, the op's per-call work
  CacheKey,    // building the executable's cache key
  Lookup,      // finding the executable (or building it, on a miss)
  Inputs,      // gathering input buffers: storages, scalars (uploads on a miss of their cache)
  Launch,      // the plugin's execute call
  Completion,  // arming the completion callback that keeps inputs alive
  Outputs,     // wrapping results as tensors
  Record,      // DeferAndFuse: recording the op into the pending graph
  Flush,       // running the pending graph (its key, a compile on a miss, the launch)
  // A compiled graph's call, from its replay's entry to its outputs.
  ReplayTotal,
  ReplaySignature,  // the call's signature and the plan's lookup
  ReplayInputs,     // gathering the plan's inputs
  ReplayLaunch,     // running the executable, or joining the pending graph
  ReplayOutputs,    // building the output tensors
  Count,
};

namespace detail {
extern const bool host_timers_on;  // TORCH_TPU_HOST_TIMERS=1, read at start-up
}  // namespace detail

// Inline, so that with the timers off a phase costs a load and a branch, not a call.
inline bool host_timers_enabled() { return detail::host_timers_on; }

// Attributes the time between laps to phases: each lap() reads the clock once.
class HostLaps {
 public:
  HostLaps() {
    if (host_timers_enabled()) last_ = std::chrono::steady_clock::now();
  }
  // The time since the previous lap (or construction) goes to `phase`.
  void lap(HostPhase phase) {
    if (host_timers_enabled()) record(phase);
  }

 private:
  void record(HostPhase phase);
  std::chrono::steady_clock::time_point last_;
};

// Adds the time from construction to destruction to `phase`.
class HostPhaseTimer {
 public:
  explicit HostPhaseTimer(HostPhase phase) : phase_(phase) {}
  ~HostPhaseTimer() { laps_.lap(phase_); }
  HostPhaseTimer(const HostPhaseTimer&) = delete;
  HostPhaseTimer& operator=(const HostPhaseTimer&) = delete;

 private:
  HostPhase phase_;
  HostLaps laps_;
};

// "host_us.<phase>" (total µs) and "host_calls.<phase>" for each phase that ran; empty when off.
std::map<std::string, int64_t> host_timer_snapshot();
void reset_host_timers();

}  // namespace torch_tpu
