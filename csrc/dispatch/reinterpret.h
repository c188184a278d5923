// Reading a storage through another dtype (view_as_real, view_as_complex, Tensor.view(dtype)):
// the storage's flat buffer is rewritten once as elements of the new dtype, and every alias
// reads that representation from then on (each reads through its own dtype the same way).
#pragma once

#include <memory>

#include "csrc/hlo/builder.h"
#include "csrc/pjrt/buffer.h"

namespace torch_tpu {

struct CacheEntry;

// The same bytes as `to` elements: a flat buffer of nbytes / byte_size(to) elements.
std::shared_ptr<pjrt::Buffer> reinterpret_buffer(std::shared_ptr<pjrt::Buffer> buffer,
                                                 hlo::ElementType from, hlo::ElementType to,
                                                 int64_t nbytes, int device);

// The same rewrite as an op of a pending graph, on a storage of `nbytes` pending as `from`: a
// fused graph reads a value it has not written out yet through another dtype (view_as_complex
// of an activation, as RoPE does) without running first. One entry per (from, to, nbytes), so
// that graphs calling it keep their cache keys.
std::shared_ptr<const CacheEntry> reinterpret_entry(hlo::ElementType from, hlo::ElementType to,
                                                    int64_t nbytes);

// The StableHLO for it, on a flat value (exposed for the builder tests).
hlo::Value reinterpret_value(hlo::Builder& b, const hlo::Value& flat, hlo::ElementType to);

}  // namespace torch_tpu
