// index_select of a tensor held in a size bucket (dispatch/size_buckets.h): a jagged batch's
// values gathered at positions found on the device (fbgemm's permute_2D_sparse_data on tpu).
// The bucket's flat buffer is read with the tensor's own length a runtime input, so that one
// executable serves every length of the bucket and an index past the real length still raises.
#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

// (self, length, index): index_select(self[:length], 0, index), self a bucket's flat buffer.
LOWER({"@bucket_index_select"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value flat = ctx.tensor(0);
  Value index = b.convert(ctx.tensor(2), ElementType::S64);
  Value size = as(b, ctx.scalar(1, ElementType::S64), ElementType::S64, index.shape);
  Value zero = splat(b, 0, ElementType::S64, index.shape);
  Value in_range = b.and_(b.ge(index, b.subtract(zero, size)), b.lt(index, size));
  b.check_at_runtime(all_of(b, in_range), Builder::CheckKind::RaisesIndexError,
                     "an index out of range (a value outside the dimension it indexes, or a "
                     "class target outside [0, classes))");
  Value wrapped = b.select(b.lt(index, zero), b.add(index, size), index);
  return Values{take_slices(b, flat, 0, wrapped)};
});

}  // namespace
}  // namespace torch_tpu::aten
