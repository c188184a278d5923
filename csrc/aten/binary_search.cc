// CPU's binary search over rows of boundaries, shared by searchsorted/bucketize and by the
// ops that find each position's segment from sorted offsets (embedding_bag's bags).
#include "csrc/aten/binary_search.h"

namespace torch_tpu::aten {
namespace {

// Element `index` of each value's row of `table` ([B..., n], or [n] for every value); `base`
// is where that row starts in the flattened table.
Value take_in_row(Builder& b, const Value& table, const Value& base, const Value& index) {
  const Value at = b.add(base, index);
  Shape with_vector = at.shape;
  with_vector.push_back(1);
  hlo::GatherDims dims;
  dims.collapsed_slice_dims = {0};
  dims.start_index_map = {0};
  dims.index_vector_dim = at.rank();
  return b.gather(b.reshape(table, {hlo::num_elements(table.shape)}), b.reshape(at, with_vector),
                  dims, {1});
}

}  // namespace

// CPU's binary search for each value (the first boundary >= it, or > it when `right`), step
// for step, so that even boundaries that are not sorted give CPU's answer; a NaN value goes
// past every boundary. `sorter` gives the row's order. O(m log n), where counting the
// boundaries below each value took m x n.
Value binary_search(Builder& b, const Value& boundaries, const Value& values, bool right,
                    const std::optional<Value>& sorter) {
  const auto s64 = ElementType::S64;
  const int64_t n = boundaries.shape.back();
  Value base = splat(b, 0, s64, values.shape);
  if (boundaries.rank() > 1) {
    const int64_t rows = hlo::num_elements(boundaries.shape) / n;
    const Shape grid{rows, hlo::num_elements(values.shape) / rows};
    base = b.reshape(b.multiply(b.iota(grid, s64, 0), splat(b, n, s64, grid)), values.shape);
  }
  const Value one = splat(b, 1, s64, values.shape);
  Value low = splat(b, 0, s64, values.shape);
  Value high = splat(b, n, s64, values.shape);
  for (int64_t span = n; span > 0; span /= 2) {  // ceil(log2(n + 1)) halvings
    Value active = b.lt(low, high);
    Value mid = b.add(low, b.divide(b.subtract(high, low), splat(b, 2, s64, values.shape)));
    // A finished search may point past the row: read any element, the result is unused.
    Value at = b.clamp(splat(b, 0, s64, values.shape), mid, splat(b, n - 1, s64, values.shape));
    if (sorter) at = take_in_row(b, b.convert(*sorter, s64), base, at);
    Value boundary = take_in_row(b, boundaries, base, at);
    Value onward = b.not_(b.compare(right ? Comparison::GT : Comparison::GE, boundary, values));
    low = b.select(b.and_(active, onward), b.add(mid, one), low);
    high = b.select(b.and_(active, b.not_(onward)), mid, high);
  }
  return low;
}

}  // namespace torch_tpu::aten
