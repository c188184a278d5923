#include "csrc/aten/grown_views.h"

#include <c10/util/Exception.h>

namespace torch_tpu::aten {
namespace {

Value s64(Builder& b, int64_t value, const Shape& shape) {
  return splat(b, static_cast<double>(value), ElementType::S64, shape);
}

// A size or stride of a view: fixed, or a multiple of the runtime length.
Value extent(Builder& b, int64_t encoded, bool stride, const Value& length, const Shape& shape) {
  if (encoded >= 0) return s64(b, encoded, shape);
  Value runtime = b.broadcast_in_dim(length, shape, {});
  return stride ? b.multiply(runtime, s64(b, -encoded, shape)) : runtime;
}

// The index along each dim of the element at flat position `flat_index` of a contiguous
// tensor of `sizes` (-1: the runtime length).
std::vector<Value> unravel(Builder& b, Value flat_index, const std::vector<int64_t>& sizes,
                           const Value& length) {
  const Shape& shape = flat_index.shape;
  std::vector<Value> index(sizes.size(), flat_index);
  for (size_t d = sizes.size(); d-- > 1;) {
    Value size = extent(b, sizes[d], false, length, shape);
    index[d] = b.remainder(flat_index, size);
    flat_index = b.divide(flat_index, size);
  }
  if (!sizes.empty()) index[0] = flat_index;
  return index;
}

// Where a view's elements lie in its flat storage: offset + sum over d of index[d] x stride d.
Value positions_in_storage(Builder& b, const std::vector<Value>& index, const GrownView& view,
                           const Value& length, const Value& offset) {
  const Shape& shape = index.at(0).shape;
  Value positions = b.broadcast_in_dim(b.convert(offset, ElementType::S64), shape, {});
  for (size_t d = 0; d < index.size(); ++d) {
    positions =
        b.add(positions, b.multiply(index[d], extent(b, view.strides[d], true, length, shape)));
  }
  return positions;
}

Value take(Builder& b, const Value& flat, Value positions) {
  const Shape shape = positions.shape;
  positions = b.clamp(s64(b, 0, shape), positions, s64(b, flat.shape[0] - 1, shape));
  return b.reshape(take_slices(b, flat, 0, b.reshape(positions, {hlo::num_elements(shape)})),
                   shape);
}

}  // namespace

GrownView grown_view(const c10::IValue& encoded) {
  std::vector<int64_t> values = encoded.toIntVector();
  TORCH_INTERNAL_ASSERT(values.size() % 2 == 0, "torch_tpu: a grown view's sizes and strides");
  const auto rank = static_cast<std::ptrdiff_t>(values.size() / 2);
  return {{values.begin(), values.begin() + rank}, {values.begin() + rank, values.end()}};
}

Value read_grown_view(Builder& b, const Value& flat, const GrownView& view, int64_t rows,
                      const Value& length, const Value& offset) {
  Shape shape;
  for (int64_t size : view.sizes) shape.push_back(size < 0 ? rows : size);
  std::vector<Value> index;
  for (size_t d = 0; d < shape.size(); ++d) index.push_back(b.iota(shape, ElementType::S64, d));
  return take(b, flat, positions_in_storage(b, index, view, length, offset));
}

Value pack_grown(Builder& b, const Value& padded, const std::vector<int64_t>& sizes,
                 const Value& length, int64_t capacity) {
  const Shape shape{capacity};
  std::vector<Value> index = unravel(b, b.iota(shape, ElementType::S64, 0), sizes, length);
  Value position = s64(b, 0, shape);
  int64_t stride = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    position = b.add(position, b.multiply(index[d], s64(b, stride, shape)));
    stride *= padded.shape[d];
  }
  return take(b, b.reshape(padded, {hlo::num_elements(padded.shape)}), position);
}

// torch_tpu::bucket_view_copy(src, length, offset, view, capacity): the view of `src` (a
// bucket's flat buffer) as the first elements of a flat buffer of `capacity`, contiguous.
LOWER({"@bucket_view_copy"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value flat = ctx.tensor(0);
  Value length = ctx.scalar(1, ElementType::S64);
  Value offset = ctx.scalar(2, ElementType::S64);
  const GrownView view = grown_view(ctx.arg(3));
  const Shape shape{ctx.arg(4).toInt()};
  std::vector<Value> index = unravel(b, b.iota(shape, ElementType::S64, 0), view.sizes, length);
  return Values{take(b, flat, positions_in_storage(b, index, view, length, offset))};
});

}  // namespace torch_tpu::aten
