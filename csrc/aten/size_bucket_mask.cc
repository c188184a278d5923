// The masking step of size buckets (dispatch/size_buckets.h): a bucket's elements from a
// runtime length on replaced by a runtime value, so that one executable serves every length.
#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

// (self, length, fill): self where position < length, else fill.
LOWER({"@bucket_mask"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  Value length = as(b, ctx.scalar(1, ElementType::S64), ElementType::S64, x.shape);
  Value fill = as(b, ctx.scalar(2, x.type), x.type, x.shape);
  Value keep = b.lt(b.iota(x.shape, ElementType::S64, 0), length);
  return Values{b.select(keep, x, fill)};
});

}  // namespace
}  // namespace torch_tpu::aten
