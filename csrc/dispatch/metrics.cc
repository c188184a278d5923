#include "csrc/dispatch/metrics.h"

namespace torch_tpu {

Metrics& metrics() {
  static Metrics instance;
  return instance;
}

std::map<std::string, int64_t> Metrics::snapshot() const {
  return {{"compiles", compiles},   {"cache_hits", cache_hits}, {"cache_misses", cache_misses},
          {"executions", executions}, {"host_syncs", host_syncs}, {"fused_ops", fused_ops},
          {"uploads", uploads},     {"downloads", downloads}};
}

void Metrics::reset() {
  for (auto* counter : {&compiles, &cache_hits, &cache_misses, &executions, &host_syncs,
                        &fused_ops, &uploads, &downloads}) {
    counter->store(0);
  }
}

}  // namespace torch_tpu
