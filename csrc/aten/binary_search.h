// CPU's binary search (searchsorted's), for kernels that look values up in sorted rows.
#pragma once

#include <optional>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {

// For each value, the first boundary of its row >= it (> it when `right`), step for step as
// CPU's, so that even unsorted boundaries give CPU's answer; a NaN value goes past every
// boundary. `boundaries` is [B..., n] (or [n] for every value); `sorter` gives a row's order.
// O(m log n) for m values.
Value binary_search(Builder& b, const Value& boundaries, const Value& values, bool right,
                    const std::optional<Value>& sorter);

}  // namespace torch_tpu::aten
