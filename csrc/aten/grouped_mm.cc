// _grouped_mm: one matrix product per group, the groups being consecutive slices of a ragged
// dimension ended by `offs` (mixture-of-experts layers multiply each expert's tokens by its
// weights this way). Lowered densely: every group's product over the whole ragged extent,
// then each position keeps its own group's. That costs groups-times the arithmetic of the
// ragged product, but it is a few large dot_generals with static shapes, which is what XLA
// compiles well, and it needs no host read of `offs` (so it traces under torch.compile).
#include <c10/util/Exception.h>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

// group[i] = how many offsets are <= i, for positions 0..length-1: the group position i
// belongs to; positions at or past the last offset get `groups` (no group) and so come out 0.
Value group_of_position(Builder& b, const Value& offs, int64_t length) {
  int64_t groups = offs.shape[0];
  Shape pair{length, groups};
  Value position = b.iota(pair, ElementType::S64, 0);
  Value ends = b.broadcast_in_dim(b.convert(offs, ElementType::S64), pair, {1});
  Value passed = b.convert(b.le(ends, position), ElementType::S64);
  return b.reduce(passed, b.constant_int(0, ElementType::S64), {1}, BinaryOp::Add);
}

// mask[..] = (group_of_position[position dim] == iota[group dim]) over `shape`.
Value group_mask(Builder& b, const Value& group, const Shape& shape, int64_t position_dim,
                 int64_t group_dim) {
  Value of_position = b.broadcast_in_dim(group, shape, {position_dim});
  return b.eq(of_position, b.iota(shape, ElementType::S64, group_dim));
}

// Keeps, along `group_dim` of `products`, each position's own group, summing the group dim out.
Value pick_group(Builder& b, const Value& products, const Value& group, int64_t position_dim,
                 int64_t group_dim) {
  Value mask = group_mask(b, group, products.shape, position_dim, group_dim);
  Value kept = b.select(mask, products, splat(b, 0, products.type, products.shape));
  return b.reduce(kept, b.constant(0, products.type), {group_dim}, BinaryOp::Add);
}

// _grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None).
LOWER({"_grouped_mm"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value a = ctx.tensor(0), w = ctx.tensor(1);
  std::optional<Value> offs = ctx.optional_tensor(2);
  TORCH_CHECK(!ctx.optional_tensor(3), "Bias not supported yet");
  ElementType out = ctx.arg(4).isNone() ? a.type : et(ctx.arg(4).toScalarType());
  TORCH_CHECK(a.rank() == 3 || offs, "_grouped_mm: offs is required when mat_a is 2D");
  if (a.rank() == 3 && w.rank() == 3)  // a batch of equal-sized products
    return Values{b.dot_general(a, w, {0}, {0}, {2}, {1}, out)};
  TORCH_CHECK(offs && offs->rank() == 1, "_grouped_mm: offs must be a 1D tensor");
  if (a.rank() == 2 && w.rank() == 3) {
    // Rows of a are ragged: [M, K] x [G, K, N] -> [M, N]; row m uses w[group(m)].
    Value products = b.dot_general(a, w, {}, {}, {1}, {1}, out);  // [M, G, N]
    return Values{pick_group(b, products, group_of_position(b, *offs, a.shape[0]), 0, 1)};
  }
  if (a.rank() == 3 && w.rank() == 2) {
    // Columns of w are ragged: [G, M, K] x [K, N] -> [M, N]; column n uses a[group(n)].
    Value products = b.dot_general(a, w, {}, {}, {2}, {0}, out);  // [G, M, N]
    return Values{pick_group(b, products, group_of_position(b, *offs, w.shape[1]), 2, 0)};
  }
  TORCH_CHECK(a.rank() == 2 && w.rank() == 2, "_grouped_mm: mat_a and mat_b must be 2D or 3D");
  // The contraction is ragged: [M, K] x [K, N] -> [G, M, N]; group g sums its own slice of K.
  int64_t groups = offs->shape[0], m = a.shape[0], k = a.shape[1];
  Shape spread{groups, m, k};
  Value mask = group_mask(b, group_of_position(b, *offs, k), spread, 2, 0);
  Value a_by_group =
      b.select(mask, b.broadcast_in_dim(a, spread, {1, 2}), splat(b, 0, a.type, spread));
  return Values{b.dot_general(a_by_group, w, {}, {}, {2}, {0}, out)};
});

}  // namespace
}  // namespace torch_tpu::aten
