// The one rule both bucketing paths pad sizes by (docs/design/buckets.md): eager ops at size
// buckets (size_buckets.h) and compiled graphs with bounded dynamic shapes
// (torch_tpu/_bucketing.py, through torch_tpu._C._compiled_bucket_size). A size rounds up to the
// next power of two, at least the path's smallest bucket, at most the cap where one is declared,
// and never below the size itself. What differs between the paths is spelt out below as the rule's
// parameters.
#pragma once

#include <cstdint>
#include <optional>

namespace torch_tpu {

struct BucketRule {
  int64_t smallest;                           // sizes up to it share one bucket
  std::optional<int64_t> cap = std::nullopt;  // a declared maximum of the size
};

// The bucket `size` falls in under `rule`.
int64_t bucket_size(int64_t size, const BucketRule& rule);

// Eager ops pad flat 1-d buffers: lengths up to 8 share one executable for next to no memory.
// Their lengths have no declared maximum.
inline constexpr BucketRule kEagerBuckets{.smallest = 8};
// Past this, an eager op runs at its exact length: padding to the bucket costs more memory than
// a compile is worth.
inline constexpr int64_t kEagerLargestBucket = int64_t{1} << 24;

// A compiled graph pads each symbolic size of a tensor on its own, so a tensor with several
// padded dims pays for them all: a size pads to its power of two only, and never past the
// maximum declared for its symbol (mark_dynamic(..., max=)).
inline BucketRule compiled_buckets(std::optional<int64_t> declared_max) {
  return {.smallest = 1, .cap = declared_max};
}

// The bucket an eager op of `length` elements runs at.
inline int64_t bucket_length(int64_t length) { return bucket_size(length, kEagerBuckets); }

}  // namespace torch_tpu
