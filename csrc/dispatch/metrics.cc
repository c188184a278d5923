#include "csrc/dispatch/metrics.h"

namespace torch_tpu {

Metrics& metrics() {
  static Metrics instance;
  return instance;
}

std::map<std::string, int64_t> Metrics::snapshot() const {
  return {{"compiles", compiles},
          {"cache_hits", cache_hits},
          {"cache_misses", cache_misses},
          {"executions", executions},
          {"host_syncs", host_syncs},
          {"fused_ops", fused_ops},
          {"uploads", uploads},
          {"downloads", downloads},
          {"disk_cache_hits", disk_cache_hits},
          {"disk_cache_writes", disk_cache_writes}};
}

void Metrics::reset() {
  for (auto* counter : {&compiles, &cache_hits, &cache_misses, &executions, &host_syncs, &fused_ops,
                        &uploads, &downloads, &disk_cache_hits, &disk_cache_writes}) {
    counter->store(0);
  }
}

}  // namespace torch_tpu
