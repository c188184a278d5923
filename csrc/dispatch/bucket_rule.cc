#include "csrc/dispatch/bucket_rule.h"

#include <algorithm>

namespace torch_tpu {

int64_t bucket_size(int64_t size, const BucketRule& rule) {
  int64_t bucket = rule.smallest;
  while (bucket < size) bucket *= 2;
  if (rule.cap) bucket = std::min(bucket, *rule.cap);
  return std::max(bucket, size);
}

}  // namespace torch_tpu
