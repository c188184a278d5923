#include "csrc/dispatch/host_timers.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace torch_tpu {
namespace {

constexpr auto kPhases = static_cast<size_t>(HostPhase::Count);

constexpr std::array<const char*, kPhases> kNames = {
    "op_total",     "op_arguments",     "op_cache_key",  "op_lookup",     "op_inputs",
    "op_launch",    "op_completion",    "op_outputs",    "op_record",     "flush",
    "replay_total", "replay_signature", "replay_inputs", "replay_launch", "replay_outputs"};

struct Totals {
  std::array<std::atomic<int64_t>, kPhases> nanoseconds{};
  std::array<std::atomic<int64_t>, kPhases> calls{};
};

Totals& totals() {
  static Totals instance;
  return instance;
}

}  // namespace

namespace detail {
const bool host_timers_on = [] {
  const char* value = std::getenv("TORCH_TPU_HOST_TIMERS");
  return value != nullptr && std::strcmp(value, "1") == 0;
}();
}  // namespace detail

void HostLaps::record(HostPhase phase) {
  const auto now = std::chrono::steady_clock::now();
  const auto index = static_cast<size_t>(phase);
  totals().nanoseconds[index].fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count(),
      std::memory_order_relaxed);
  totals().calls[index].fetch_add(1, std::memory_order_relaxed);
  last_ = now;
}

std::map<std::string, int64_t> host_timer_snapshot() {
  std::map<std::string, int64_t> snapshot;
  if (!host_timers_enabled()) return snapshot;
  for (size_t i = 0; i < kPhases; ++i) {
    const int64_t calls = totals().calls[i].load(std::memory_order_relaxed);
    if (calls == 0) continue;
    snapshot[std::string("host_us.") + kNames[i]] =
        totals().nanoseconds[i].load(std::memory_order_relaxed) / 1000;
    snapshot[std::string("host_calls.") + kNames[i]] = calls;
  }
  return snapshot;
}

void reset_host_timers() {
  for (size_t i = 0; i < kPhases; ++i) {
    totals().nanoseconds[i].store(0, std::memory_order_relaxed);
    totals().calls[i].store(0, std::memory_order_relaxed);
  }
}

}  // namespace torch_tpu
