// DeferAndFuse: ops accumulate in a pending graph and run as one fused executable at the next
// materialization point (a host read, an op that cannot be deferred, the size limit, a mode
// change, synchronize). Intermediate values that no live tensor holds never reach memory.
#pragma once

#include <ATen/core/ivalue.h>

#include <memory>
#include <vector>

#include "csrc/dispatch/cache_entry.h"

namespace torch_tpu {

// Records one op; returns its outputs as execution would, their storages pending.
std::vector<c10::IValue> defer(const std::shared_ptr<CacheEntry>& entry,
                               const std::vector<c10::IValue>& args, int device);

// Runs the pending graph, if any, and gives every live pending storage its buffer.
void materialize_pending();

// Drops every fused executable (the per-op cache is cleared by clear_cache()).
void clear_fused_cache();

// Ops in the pending graph (0 when nothing is deferred).
int64_t pending_op_count();

}  // namespace torch_tpu
