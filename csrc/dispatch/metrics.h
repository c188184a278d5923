// Counters that tell what the dispatcher did (torch_tpu.metrics()).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace torch_tpu {

struct Metrics {
  std::atomic<int64_t> compiles{0}, cache_hits{0}, cache_misses{0}, executions{0}, host_syncs{0},
      fused_ops{0}, uploads{0}, downloads{0}, disk_cache_hits{0}, disk_cache_writes{0},
      donated_buffers{0}, run_ahead_waits{0}, size_bucket_ops{0},
      joined_graphs{0},  // compiled graphs' replays that joined a pending graph (defer_graph)
      device_copies{0};  // buffers copied from one tpu device to another (tpu:0 -> tpu:1)
  std::map<std::string, int64_t> snapshot() const;
  void reset();
};

Metrics& metrics();

}  // namespace torch_tpu
