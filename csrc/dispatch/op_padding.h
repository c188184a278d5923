// The one table of how each op treats padding, for both bucketing paths (docs/design/buckets.md):
// eager ops at size buckets (size_buckets.h) and compiled graphs with bounded dynamic shapes
// (torch_tpu/_bucketing.py reads it through torch_tpu._C._op_padding). Padding is the positions
// past a size's real end, up to its bucket (bucket_rule.h).
#pragma once

#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace torch_tpu {

// How an op runs on padded inputs and keeps its real results exact.
enum class BucketKind : uint8_t {
  None,       // no rule: eager runs the op at its exact length, a compiled graph at exact shapes
  Pointwise,  // each position from the same position of its inputs: padding is carried along
  Layout,     // moves positions (views, cat, stack): which ones are real moves with them
  Fill,       // writes every position, reads no padded input (constants, random numbers, arange)
  Copy,       // copy_ of a whole tensor into another of its size
  Scan,       // a prefix scan (cumsum, cumprod): padding reads as the scan's neutral element
  Reduce,     // a reduction: padding reads as its neutral element first
  Contract,   // a matrix product: padding reads as zero in both operands
  IndexPut,   // self[index] += values, one 1-d index: padded values add the sum's identity
  Cat,        // a cat of parts alike but along dim: a growing tensor (growing_buckets.h)
  Attention,  // fused attention over keys and values grown by Cat: past their length masked
  Bags,       // embedding_bag over jagged indices: positions past their count in no bag
  Lookup,     // each position of an index (or searched value) looked up in a whole tensor
  Rows,       // each row (the last dims) from the same row of one input: padded rows carried
  Own,        // a rule of its own in _bucketing.py (softmax, losses, layer norm, embeddings)
};

// The reduction whose neutral element padding reads as, for Reduce and Scan ops.
enum class Reduction : uint8_t { None, Sum, Prod, Max, Min, Any, All };

struct OpPadding {
  std::string_view op;  // aten's name without overload or in-place underscore: "add", "sum"
  BucketKind eager;     // at eager size buckets (run on flat 1-d buffers of a bucket's length)
  BucketKind compiled;  // in a compiled graph's padded run (functional aten ops, any rank)
  Reduction neutral = Reduction::None;
};

// Every op with a rule on at least one path.
std::span<const OpPadding> op_paddings();
// The row of `op` (a name as in OpPadding::op); nullptr where it has none.
const OpPadding* find_op_padding(std::string_view op);

// What padding must read as for `reduction` over `dtype` to ignore it: the reduction's identity
// (-0.0 for a floating sum, the lowest value for a max). nullopt for a dtype this does not know
// (the op then runs at exact sizes).
std::optional<c10::Scalar> neutral(Reduction reduction, c10::ScalarType dtype);

}  // namespace torch_tpu
