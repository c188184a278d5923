#include "csrc/dispatch/metrics.h"

#include "csrc/device/runtime.h"
#include "csrc/dispatch/host_timers.h"

namespace torch_tpu {

Metrics& metrics() {
  static Metrics instance;
  return instance;
}

std::map<std::string, int64_t> Metrics::snapshot() const {
  std::map<std::string, int64_t> counters = host_timer_snapshot();
  counters.insert({{"compiles", compiles},
                   {"cache_hits", cache_hits},
                   {"cache_misses", cache_misses},
                   {"executions", executions},
                   {"host_syncs", host_syncs},
                   {"fused_ops", fused_ops},
                   {"uploads", uploads},
                   {"downloads", downloads},
                   {"disk_cache_hits", disk_cache_hits},
                   {"disk_cache_writes", disk_cache_writes},
                   {"donated_buffers", donated_buffers},
                   {"run_ahead_waits", run_ahead_waits},
                   {"size_bucket_ops", size_bucket_ops},
                   {"joined_graphs", joined_graphs},
                   {"device_copies", device_copies},
                   {"max_in_flight", max_in_flight()}});
  return counters;
}

void Metrics::reset() {
  for (auto* counter :
       {&compiles, &cache_hits, &cache_misses, &executions, &host_syncs, &fused_ops, &uploads,
        &downloads, &disk_cache_hits, &disk_cache_writes, &donated_buffers, &run_ahead_waits,
        &size_bucket_ops, &joined_graphs, &device_copies}) {
    counter->store(0);
  }
  reset_max_in_flight();
  reset_host_timers();
}

}  // namespace torch_tpu
