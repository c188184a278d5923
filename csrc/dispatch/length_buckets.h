// A sequence rerun whole at every step as it grows by a token: a Transformer without a KV
// cache generating word by word (word_language_model's generate, minGPT's). Each step meets a
// new length, so every op of the model would compile anew: 14 executables a word for
// word_language_model's Transformer. Once the tokens grow in a bucket (growing_buckets.h), the
// tensors computed from them stay in buckets: each is its exact contiguous tensor at the start of
// a flat buffer of `rows` x (its elements per position of the sequence), `rows` the length's
// bucket, and its storage knows the length (DeviceStorage::Contents::grown). Ops that treat
// rows apart (matrix products, layer norm, softmax over the last dim, embedding lookups) run
// on all the bucket's rows; copies of views and fused attention read their inputs with the
// length a runtime input, attention masking the keys past it. So every length of a bucket
// shares one executable per op.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <optional>
#include <string>
#include <vector>

#include "csrc/device/storage.h"
#include "csrc/dispatch/size_buckets.h"

namespace torch_tpu {

// The length a tensor's storage grows with (its bucket's), where it has one.
std::optional<GrownLength> grown_length(const at::Tensor& tensor);

// A Rows op (op_padding.h) or an index_select from a 2-d table, where its row input grows with
// a sequence: run on all the bucket's rows through `redispatch`, its results in buckets.
std::optional<std::vector<c10::IValue>> rows_in_bucket(const std::string& op_name,
                                                       const std::vector<c10::IValue>& args,
                                                       Redispatch redispatch);

// copy_(self, src) of a view of a grown tensor into a whole contiguous tensor.
std::optional<std::vector<c10::IValue>> view_copy_in_bucket(const std::vector<c10::IValue>& args);

// torch_tpu::attention over views of grown tensors: the whole sequence's queries and keys.
std::optional<std::vector<c10::IValue>> grown_attention_in_bucket(
    const std::vector<c10::IValue>& args);

}  // namespace torch_tpu
