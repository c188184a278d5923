// embedding_bag over jagged indices in size buckets (dispatch/jagged_buckets.h): a
// recommendation model's indices (and per-sample weights, and the forward's offset2bag) come as
// a bucket's flat buffer and the runtime start of their run in it; a window of the bucket's
// length is read from there, its positions from the runtime length on in no bag, so that one
// executable serves every count of indices in the bucket.
#include "csrc/aten/common.h"
#include "csrc/aten/embedding_bag.h"

namespace torch_tpu::aten {
namespace {

// `window` elements of `flat` from the runtime `start` (past flat's end: zeros).
Value window_of(Builder& b, const Value& flat, const Value& start, int64_t window) {
  Value padded = b.pad(flat, splat(b, 0, flat.type, {}), {0}, {window}, {0});
  return b.dynamic_slice(padded, {start}, {window});
}

// The run given by arguments (flat, start) at `index`, `window` long.
Value run_at(LoweringContext& ctx, int index, int64_t window) {
  return window_of(ctx.b, ctx.tensor(index), ctx.scalar(index + 1, ElementType::S64), window);
}

std::optional<Value> optional_run_at(LoweringContext& ctx, int index, int64_t window) {
  if (ctx.arg(index).isNone()) return std::nullopt;
  return run_at(ctx, index, window);
}

// [window] pred: the positions before the runtime length at `index`.
Value real_positions(LoweringContext& ctx, int index, int64_t window) {
  Builder& b = ctx.b;
  return b.lt(b.iota({window}, ElementType::S64, 0),
              as(b, ctx.scalar(index, ElementType::S64), ElementType::S64, {window}));
}

// (weight, indices, indices_start, length, window, offsets, mode, per_sample_weights?,
// weights_start, include_last_offset, padding_idx) -> _embedding_bag's results, offset2bag
// [window].
LOWER({"@bucket_embedding_bag"}, [](LoweringContext& ctx) {
  const int64_t window = ctx.arg(4).toInt();
  return embedding_bag_forward(ctx.b, ctx.tensor(0), run_at(ctx, 1, window), ctx.tensor(5),
                               ctx.arg(6).toInt(), optional_run_at(ctx, 7, window),
                               ctx.arg(9).toBool(), ctx.arg(10).toInt(),
                               real_positions(ctx, 3, window));
});

// (grad, indices, indices_start, offset2bag, offset2bag_start, length, window, bag_size,
// maximum_indices, num_weights, scale_grad_by_freq, mode, per_sample_weights?, weights_start,
// padding_idx) -> [num_weights, D].
LOWER({"@bucket_embedding_bag_backward"}, [](LoweringContext& ctx) {
  const int64_t window = ctx.arg(6).toInt();
  return Values{embedding_bag_backward(
      ctx.b, ctx.tensor(0), run_at(ctx, 1, window), run_at(ctx, 3, window), ctx.tensor(7),
      ctx.tensor(8), ctx.arg(9).toInt(), ctx.arg(10).toBool(), ctx.arg(11).toInt(),
      optional_run_at(ctx, 12, window), ctx.arg(14).toInt(), real_positions(ctx, 5, window))};
});

// (grad, weight, indices, indices_start, offset2bag, offset2bag_start, length, window, mode,
// padding_idx) -> [window].
LOWER({"@bucket_embedding_bag_per_sample_weights_backward"}, [](LoweringContext& ctx) {
  const int64_t window = ctx.arg(7).toInt();
  return Values{embedding_bag_per_sample_weights_backward(
      ctx.b, ctx.tensor(0), ctx.tensor(1), run_at(ctx, 2, window), run_at(ctx, 4, window),
      ctx.arg(8).toInt(), ctx.arg(9).toInt(), real_positions(ctx, 6, window))};
});

}  // namespace
}  // namespace torch_tpu::aten
