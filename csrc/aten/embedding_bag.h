// embedding_bag's forward and backwards as values, for its own lowerings (embedding_bag.cc) and
// for the same ops over indices read from a size bucket (size_bucket_bags.cc). Where `real` ([L]
// pred) is given, only those index positions are real: the others lie in no bag, add nothing
// and get no gradient.
#pragma once

#include <optional>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {

// (output [B, D], offset2bag [L], bag_size [B], max_indices [B, D]); mode 0 sum, 1 mean, 2 max.
Values embedding_bag_forward(Builder& b, const Value& weight, const Value& indices,
                             const Value& offsets, int64_t mode,
                             const std::optional<Value>& per_sample_weights, bool include_last,
                             int64_t padding_idx, const std::optional<Value>& real);

// The dense gradient of the table, [num_weights, D].
Value embedding_bag_backward(Builder& b, const Value& grad, const Value& indices,
                             const Value& offset2bag, const Value& bag_size,
                             const Value& maximum_indices, int64_t num_weights, bool by_frequency,
                             int64_t mode, const std::optional<Value>& per_sample_weights,
                             int64_t padding_idx, const std::optional<Value>& real);

// The gradient of the per-sample weights, [L].
Value embedding_bag_per_sample_weights_backward(Builder& b, const Value& grad, const Value& weight,
                                                const Value& indices, const Value& offset2bag,
                                                int64_t mode, int64_t padding_idx,
                                                const std::optional<Value>& real);

}  // namespace torch_tpu::aten
