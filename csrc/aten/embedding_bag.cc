// embedding_bag: the sum, mean or max of the embedding rows of each bag, forward and backward.
// Bags are spans of the 1-d index list between offsets; an index equal to padding_idx adds
// nothing (and is not counted by the mean); an empty bag gives zeros. Each index finds its bag
// by a binary search over the offsets; sums are scatter-adds of the gathered rows into their
// bags (forward) or of the bags' gradients into the rows read (backward), so the work grows
// with indices x dim, not with bags x indices or table rows x indices (a recommendation
// model's tables have millions of rows). Max compares within a [bags, indices] mask.
#include "csrc/aten/embedding_bag.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/_embedding_bag_dense_backward.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "csrc/aten/arith.h"
#include "csrc/aten/binary_search.h"
#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

constexpr int64_t kSum = 0, kMean = 1, kMax = 2;

struct Bags {
  Value indices;     // [L] s64
  Value offset2bag;  // [L] s64: the bag of each index, -1 when it belongs to none
  Value counted;     // [L] pred: the index counts in its bag (in one, and not padding_idx)
  int64_t bags, length;
};

// [L] pred: the index lies in a bag and is not padding_idx.
Value counted_in_a_bag(Builder& b, const Value& offset2bag, const Value& indices,
                       int64_t padding_idx) {
  const int64_t length = indices.shape[0];
  Value counted = b.ge(offset2bag, splat(b, 0, ElementType::S64, {length}));
  if (padding_idx < 0) return counted;
  Value padding = splat(b, static_cast<double>(padding_idx), ElementType::S64, {length});
  return b.and_(counted, b.ne(indices, padding));
}

// offsets [B] (or [B + 1] with include_last_offset, whose last entry ends the last bag).
// Where `real` is given, only those positions are indices; the rest lie in no bag.
Bags bags_of(Builder& b, const Value& indices_in, const Value& offsets_in, bool include_last,
             int64_t padding_idx, const std::optional<Value>& real) {
  const int64_t length = indices_in.shape.empty() ? 1 : indices_in.shape[0];
  Value indices = b.reshape(b.convert(indices_in, ElementType::S64), {length});
  if (real) indices = b.select(*real, indices, splat(b, 0, ElementType::S64, {length}));
  Value offsets = b.convert(offsets_in, ElementType::S64);
  const int64_t count = offsets.shape[0];
  const int64_t bags = include_last ? count - 1 : count;
  Value starts = b.slice(offsets, {0}, {bags}, {1});
  Value end = include_last ? b.slice(offsets, {bags}, {bags + 1}, {1})
                           : splat(b, static_cast<double>(length), ElementType::S64, {1});
  Value position = b.iota({length}, ElementType::S64, 0);
  // The bags started at or before each position, less one: the last such bag.
  Value bag = b.subtract(binary_search(b, starts, position, /*right=*/true, std::nullopt),
                         splat(b, 1, ElementType::S64, {length}));
  Value inside = b.lt(position, broadcast_to(b, end, {length}));
  if (real) inside = b.and_(inside, *real);
  Value none = splat(b, -1, ElementType::S64, {length});
  Value offset2bag = b.select(inside, bag, none);
  Value counted = counted_in_a_bag(b, offset2bag, indices, padding_idx);
  return {indices, offset2bag, counted, bags, length};
}

// [B, L] pred: index l counts in bag b (max's comparisons).
Value membership(Builder& b, const Bags& g) {
  return b.and_(b.eq(b.broadcast_in_dim(g.offset2bag, {g.bags, g.length}, {1}),
                     b.iota({g.bags, g.length}, ElementType::S64, 0)),
                b.broadcast_in_dim(g.counted, {g.bags, g.length}, {1}));
}

// Each counted index's bag, and the spill slot `bags` for the others: a scatter into
// bags + 1 slots then drops them with the last slot.
Value bag_or_spill(Builder& b, const Bags& g) {
  return b.select(g.counted, g.offset2bag,
                  splat(b, static_cast<double>(g.bags), ElementType::S64, {g.length}));
}

// sum over each bag's counted positions of `per_index` ([L] or [L, D]), as [B] or [B, D].
Value sum_into_bags(Builder& b, const Bags& g, const Value& per_index) {
  Shape shape = per_index.shape;
  shape[0] = g.bags + 1;
  Value sums = combine_slices(b, splat(b, 0, per_index.type, shape), 0, bag_or_spill(b, g),
                              per_index, BinaryOp::Add);
  std::vector<int64_t> low(shape.size(), 0), high(shape.begin(), shape.end()),
      step(shape.size(), 1);
  high[0] = g.bags;
  return b.slice(sums, low, high, step);
}

Value as_float(Builder& b, const Value& pred, ElementType type) {
  return b.select(pred, splat(b, 1, type, pred.shape), splat(b, 0, type, pred.shape));
}

}  // namespace

Values embedding_bag_forward(Builder& b, const Value& weight, const Value& indices_in,
                             const Value& offsets, int64_t mode,
                             const std::optional<Value>& per_sample_weights, bool include_last,
                             int64_t padding_idx, const std::optional<Value>& real) {
  TORCH_CHECK(weight.rank() == 2,
              "embedding_bag: weight has to be a 2D Tensor, but got Tensor of "
              "dimension ",
              weight.rank());
  TORCH_CHECK(indices_in.rank() == 1,
              "embedding_bag: input has to be a 1D or 2D Tensor, but got "
              "Tensor of dimension ",
              indices_in.rank());
  TORCH_CHECK(mode >= kSum && mode <= kMax,
              "embedding_bag: mode has to be 0 (sum), 1 (mean) "
              "or 2 (max)");
  Bags g = bags_of(b, indices_in, offsets, include_last, padding_idx, real);
  check_index_range(b, g.indices, 0, weight.shape[0], std::nullopt,
                    Builder::CheckKind::RaisesRuntimeError);  // as CPU raises
  const int64_t dim = weight.shape[1];
  ElementType t = opmath(weight.type);
  Value rows = b.convert(take_slices(b, weight, 0, g.indices), t);  // [L, D]
  Value bag_size = sum_into_bags(b, g, as_float(b, g.counted, ElementType::S64));
  Value max_indices = splat(b, 0, ElementType::S64, {g.bags, dim});
  Value output;
  if (mode == kMax) {
    Shape cube{g.bags, g.length, dim};
    Value in_bag = b.broadcast_in_dim(membership(b, g), cube, {0, 1});
    Value candidates =
        b.select(in_bag, b.broadcast_in_dim(rows, cube, {1, 2}), splat(b, -INFINITY, t, cube));
    Value best = b.reduce(candidates, b.constant(-INFINITY, t), {1}, BinaryOp::Maximum);  // [B, D]
    Value empty = b.eq(b.broadcast_in_dim(bag_size, {g.bags, dim}, {0}),
                       splat(b, 0, ElementType::S64, {g.bags, dim}));
    output = b.select(empty, splat(b, 0, t, best.shape), best);
    // The first index holding the maximum (CPU replaces only on a strictly larger value).
    Value is_best = b.and_(in_bag, b.eq(candidates, b.broadcast_in_dim(best, cube, {0, 2})));
    Value position = b.iota(cube, ElementType::S64, 1);
    Value first =
        b.reduce(b.select(is_best, position,
                          splat(b, static_cast<double>(g.length), ElementType::S64, cube)),
                 b.constant_int(g.length, ElementType::S64), {1}, BinaryOp::Minimum);  // [B, D]
    Value found = take_slices(b, b.reshape(g.indices, {g.length, 1}), 0,
                              b.reshape(b.clamp(splat(b, 0, ElementType::S64, first.shape), first,
                                                splat(b, static_cast<double>(g.length - 1),
                                                      ElementType::S64, first.shape)),
                                        {g.bags * dim}));
    max_indices = b.select(empty, splat(b, -1, ElementType::S64, first.shape),
                           b.reshape(found, {g.bags, dim}));
  } else {
    if (per_sample_weights) {
      TORCH_CHECK(mode == kSum,
                  "embedding_bag: per_sample_weights was not None. "
                  "per_sample_weights is only supported for mode='sum'");
      rows =
          b.multiply(rows, b.broadcast_in_dim(b.convert(*per_sample_weights, t), rows.shape, {0}));
    }
    output = sum_into_bags(b, g, rows);  // [B, D]
    if (mode == kMean) {
      Value size = b.broadcast_in_dim(b.convert(bag_size, t), output.shape, {0});
      Value one = splat(b, 1, t, output.shape);
      output = b.divide(output, b.maximum(size, one));
    }
  }
  return Values{b.convert(output, weight.type), g.offset2bag, bag_size, max_indices};
}

Value embedding_bag_backward(Builder& b, const Value& grad, const Value& indices_in,
                             const Value& offset2bag_in, const Value& bag_size_in,
                             const Value& maximum_indices, int64_t num_weights, bool by_frequency,
                             int64_t mode, const std::optional<Value>& per_sample_weights,
                             int64_t padding_idx, const std::optional<Value>& real) {
  ElementType t = opmath(grad.type);
  Value g = b.convert(grad, t);  // [B, D]
  const int64_t bags = g.shape[0], dim = g.shape[1];
  Value indices = b.convert(indices_in, ElementType::S64);
  const int64_t length = indices.shape[0];
  Value offset2bag = b.convert(offset2bag_in, ElementType::S64);
  Value bag_size = b.convert(bag_size_in, t);
  Value counted = counted_in_a_bag(b, offset2bag, indices, padding_idx);
  if (real) counted = b.and_(counted, *real);
  Value counted_f = as_float(b, counted, t);
  // Each index's row, kept in range (an index no bag counts adds zero wherever it lands).
  Value row = b.clamp(splat(b, 0, ElementType::S64, {length}), indices,
                      splat(b, static_cast<double>(std::max<int64_t>(num_weights - 1, 0)),
                            ElementType::S64, {length}));
  Value frequency = combine_slices(b, splat(b, 0, t, {num_weights}), 0, row, counted_f,
                                   BinaryOp::Add);  // [W]
  Value result;
  if (mode == kMax) {
    // Each (bag, column) gradient goes to the row that gave the maximum; an empty bag
    // (-1) to a spill slot past the table.
    Value max_indices = b.convert(maximum_indices, ElementType::S64);  // [B, D]
    Shape grid{bags, dim};
    Value flat_at = b.add(b.multiply(max_indices, splat(b, dim, ElementType::S64, grid)),
                          b.iota(grid, ElementType::S64, 1));
    const double spill = static_cast<double>(num_weights * dim);
    flat_at = b.select(b.ge(max_indices, splat(b, 0, ElementType::S64, grid)), flat_at,
                       splat(b, spill, ElementType::S64, grid));
    Value flat =
        combine_slices(b, splat(b, 0, t, {num_weights * dim + 1}), 0,
                       b.reshape(flat_at, {bags * dim}), b.reshape(g, {bags * dim}), BinaryOp::Add);
    result = b.reshape(b.slice(flat, {0}, {num_weights * dim}, {1}), {num_weights, dim});
  } else {
    // Each counted index receives its bag's gradient (over the bag size for the mean).
    Value safe_bag = b.clamp(splat(b, 0, ElementType::S64, {length}), offset2bag,
                             splat(b, static_cast<double>(bags - 1), ElementType::S64, {length}));
    Value per_index = take_slices(b, g, 0, safe_bag);  // [L, D]
    Value scale = splat(b, 1, t, {length});
    if (mode == kMean) {
      Value sizes = take_slices(b, b.reshape(bag_size, {bags, 1}), 0, safe_bag);
      scale = b.divide(scale, b.maximum(b.reshape(sizes, {length}), scale));
    }
    if (per_sample_weights) scale = b.multiply(scale, b.convert(*per_sample_weights, t));
    // Selected rather than multiplied: what an uncounted position holds may not be finite.
    scale = b.select(counted, scale, splat(b, 0, t, {length}));
    per_index = b.multiply(per_index, b.broadcast_in_dim(scale, per_index.shape, {0}));
    result = combine_slices(b, splat(b, 0, t, {num_weights, dim}), 0, row, per_index,
                            BinaryOp::Add);  // [W, D]
  }
  if (by_frequency) {
    Value f =
        b.broadcast_in_dim(b.maximum(frequency, splat(b, 1, t, {num_weights})), result.shape, {0});
    result = b.divide(result, f);
  }
  return b.convert(result, grad.type);
}

Value embedding_bag_per_sample_weights_backward(Builder& b, const Value& grad, const Value& weight,
                                                const Value& indices_in, const Value& offset2bag_in,
                                                int64_t mode, int64_t padding_idx,
                                                const std::optional<Value>& real) {
  ElementType t = opmath(grad.type);
  const int64_t bags = grad.shape[0];
  Value indices = b.convert(indices_in, ElementType::S64);
  const int64_t length = indices.shape[0];
  Value offset2bag = b.convert(offset2bag_in, ElementType::S64);
  TORCH_CHECK(mode == kSum,
              "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  Value counted = counted_in_a_bag(b, offset2bag, indices, padding_idx);
  if (real) {
    counted = b.and_(counted, *real);
    indices = b.select(*real, indices, splat(b, 0, ElementType::S64, {length}));
  }
  Value safe_bag = b.clamp(splat(b, 0, ElementType::S64, {length}), offset2bag,
                           splat(b, static_cast<double>(bags - 1), ElementType::S64, {length}));
  Value per_index = b.convert(take_slices(b, grad, 0, safe_bag), t);  // [L, D]
  Value rows = b.convert(take_slices(b, weight, 0, indices), t);      // [L, D]
  Value dots = sum(b, b.multiply(per_index, rows), {1});
  return b.convert(b.select(counted, dots, splat(b, 0, t, {length})), grad.type);
}

namespace {

// _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
// per_sample_weights?, include_last_offset, padding_idx) -> (output, offset2bag, bag_size,
// max_indices).
Values embedding_bag(LoweringContext& ctx) {
  return embedding_bag_forward(ctx.b, ctx.tensor(0), ctx.tensor(1), ctx.tensor(2),
                               ctx.arg(4).toInt(), ctx.optional_tensor(6), ctx.arg(7).toBool(),
                               ctx.arg(8).toInt(), std::nullopt);
}

LOWER({"_embedding_bag", "_embedding_bag.out"}, embedding_bag);
LOWER({"_embedding_bag_forward_only", "_embedding_bag_forward_only.out"}, embedding_bag);

// _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
// num_weights, scale_grad_by_freq, mode, per_sample_weights?, padding_idx) -> [W, D].
LOWER({"_embedding_bag_dense_backward", "_embedding_bag_dense_backward.out"},
      [](LoweringContext& ctx) {
        return Values{embedding_bag_backward(
            ctx.b, ctx.tensor(0), ctx.tensor(1), ctx.tensor(2), ctx.tensor(3), ctx.tensor(4),
            ctx.arg(5).toInt(), ctx.arg(6).toBool(), ctx.arg(7).toInt(), ctx.optional_tensor(8),
            ctx.arg(9).toInt(), std::nullopt)};
      });

// _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
// padding_idx) -> [L]: each weight's gradient is its row's dot product with its bag's gradient.
LOWER({"_embedding_bag_per_sample_weights_backward",
       "_embedding_bag_per_sample_weights_backward.out"},
      [](LoweringContext& ctx) {
        return Values{embedding_bag_per_sample_weights_backward(
            ctx.b, ctx.tensor(0), ctx.tensor(1), ctx.tensor(2), ctx.tensor(4), ctx.arg(5).toInt(),
            ctx.arg(6).toInt(), std::nullopt)};
      });

}  // namespace
}  // namespace torch_tpu::aten

namespace torch_tpu::aten {
namespace {

// _embedding_bag_backward: the dense gradient (sparse gradients are a layout the device does
// not offer).
at::Tensor embedding_bag_backward(const at::Tensor& grad, const at::Tensor& indices,
                                  const at::Tensor& offsets, const at::Tensor& offset2bag,
                                  const at::Tensor& bag_size, const at::Tensor& maximum_indices,
                                  c10::SymInt num_weights, bool scale_grad_by_freq, int64_t mode,
                                  bool sparse, const std::optional<at::Tensor>& per_sample_weights,
                                  int64_t padding_idx) {
  (void)offsets;
  TORCH_CHECK_NOT_IMPLEMENTED(!sparse,
                              "torch_tpu: embedding_bag with sparse=True gradients is "
                              "not supported on the tpu device (sparse layouts are not "
                              "offered); use sparse=False");
  return at::_embedding_bag_dense_backward_symint(
      grad, indices, offset2bag, bag_size, maximum_indices, std::move(num_weights),
      scale_grad_by_freq, mode, per_sample_weights, padding_idx);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_embedding_bag_backward", TORCH_FN(embedding_bag_backward));
}

}  // namespace
}  // namespace torch_tpu::aten
