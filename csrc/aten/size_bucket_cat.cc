// The cat of growing tensors (dispatch/size_buckets.h): parts written one after the other into
// a bucket's flat buffer, the first part's length a runtime input, so that one executable
// serves every length of the bucket.
#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

// (first, rest, length, bucket): a flat buffer of `bucket` elements holding first's first
// `length` elements, then each of rest's, then zeros.
LOWER({"@bucket_cat"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  const int64_t bucket = ctx.arg(3).toInt();
  Value first = ctx.tensor(0);
  first = b.reshape(first, {hlo::num_elements(first.shape)});
  const int64_t first_elements = first.shape[0];  // at most the bucket's (size_buckets.cc)
  Value flat = first_elements < bucket
                   ? b.pad(first, splat(b, 0, first.type, {}), {0}, {bucket - first_elements}, {0})
                   : first;
  Value offset = ctx.scalar(2, ElementType::S64);
  for (const Value& part : ctx.tensors(1)) {
    const int64_t elements = hlo::num_elements(part.shape);
    flat = b.dynamic_update_slice(flat, b.reshape(part, {elements}), {offset});
    offset = b.add(offset, splat(b, static_cast<double>(elements), ElementType::S64, {}));
  }
  return Values{flat};
});

}  // namespace
}  // namespace torch_tpu::aten
