// DDP's reducer asks a per-device-type Timer for its runtime statistics (forward, backward
// compute and communication times). Device work here is ordered by PJRT, not by streams with
// timing events, so the timer records host timestamps, as the CPU one does.
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

namespace torch_tpu::distributed {
namespace {

class TpuReducerTimer final : public c10d::Timer {
 public:
  explicit TpuReducerTimer(c10::Device /*device*/) {}

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    auto start_time = getTimestamp(start);
    auto end_time = getTimestamp(end);
    if (!start_time || !end_time || *end_time < *start_time) return std::nullopt;
    return *end_time - *start_time;
  }
};

}  // namespace
}  // namespace torch_tpu::distributed

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, torch_tpu::distributed::TpuReducerTimer);
}  // namespace c10d
