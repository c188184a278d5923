// Tensors that grow a little each step (size_buckets.h): generate's ids and positions, and a
// KV cache's keys and values, grown by torch.cat. At exact sizes each new length compiles the
// cat and every op that reads the grown tensor; in buckets, one executable serves every length
// of a bucket.
#pragma once

#include <ATen/core/ivalue.h>

#include <optional>
#include <string>
#include <vector>

namespace torch_tpu {

// torch.cat of parts alike but for the cat's dim into a bucket's flat buffer, where the first
// part holds one or cats of this op and dtype have met two lengths of the bucket; nullopt where
// the cat runs at its exact size. The result is the cat's contiguous tensor over the buffer's
// first elements, so that the next cat reads the bucket, its length a runtime input.
std::optional<std::vector<c10::IValue>> cat_in_bucket(const std::string& op_name,
                                                      const std::vector<c10::IValue>& args);

// torch_tpu::attention (query, key, value, attn_mask, is_causal, scale, dropout_p) whose key and
// value were grown into buckets by cat_in_bucket: computed over the buckets with the positions
// past the keys' length masked, so one executable serves every length. nullopt where the call
// does not qualify (more than one query a sequence, a mask, causal, dropout, keys not in
// buckets) and runs at exact sizes.
std::optional<std::vector<c10::IValue>> attention_in_bucket(const std::vector<c10::IValue>& args);

}  // namespace torch_tpu
