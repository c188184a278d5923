#include "csrc/dispatch/run_ahead.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>

#include "csrc/device/runtime.h"
#include "csrc/dispatch/env_setting.h"
#include "csrc/dispatch/metrics.h"
#include "csrc/pjrt/buffer.h"

namespace torch_tpu {
namespace {

// Below this the memory is not worth a wait (TORCH_TPU_RETIRED_MIN_BYTES, default 1 MiB): a
// small model's ops keep their lead over the device.
int64_t retired_floor_bytes() {
  static const int64_t floor =
      static_cast<int64_t>(count_setting("TORCH_TPU_RETIRED_MIN_BYTES", 1 << 20, 0));
  return floor;
}

std::atomic<int64_t>& percent_setting() {
  static std::atomic<int64_t> percent{
      static_cast<int64_t>(count_setting("TORCH_TPU_RETIRED_PERCENT", 10, 0))};
  return percent;
}

// The most retired bytes bound_run_ahead lets through now; -1: no bound.
int64_t retired_bytes_bound() {
  if (retired_percent() == 0) return -1;
  const int64_t live = pjrt::device_bytes_in_use() - pjrt::retired_device_bytes();
  return std::max(retired_floor_bytes(), live / 100 * retired_percent());
}

bool within_bound() {
  const int64_t bound = retired_bytes_bound();
  return bound < 0 || pjrt::retired_device_bytes() <= bound;
}

}  // namespace

int64_t retired_percent() { return percent_setting().load(std::memory_order_relaxed); }

void set_retired_percent(int64_t percent) {
  TORCH_CHECK(percent >= 0, "torch_tpu: the retired-bytes percent must be at least 0, not ",
              percent);
  percent_setting().store(percent, std::memory_order_relaxed);
}

void bound_run_ahead() {
  if (pjrt::retired_device_bytes() <= retired_floor_bytes()) return;  // the common case
  if (within_bound() || in_flight() <= 1) return;
  metrics().run_ahead_waits++;
  // Retired buffers are read only by launched executions, which finish on their own (each
  // releases what it read before it counts as finished).
  await_in_flight_until(1, within_bound);
}

}  // namespace torch_tpu
