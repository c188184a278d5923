// Reflection and replication padding (1d, 2d, 3d) and their gradients, one padded dimension at
// a time with slices, reversals and concatenation: no gather, so they fuse like views.
#include <c10/util/Exception.h>

#include <algorithm>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

enum class PadMode { Reflect, Replicate };

Value range_along(Builder& b, const Value& x, int64_t dim, int64_t start, int64_t limit) {
  std::vector<int64_t> starts(x.rank(), 0), limits(x.shape.begin(), x.shape.end()),
      strides(x.rank(), 1);
  starts[dim] = start;
  limits[dim] = limit;
  return b.slice(x, starts, limits, strides);
}

// Zero-pads `x` along `dim` by (low, high).
Value zero_pad_along(Builder& b, const Value& x, int64_t dim, int64_t low, int64_t high) {
  std::vector<int64_t> lows(x.rank(), 0), highs(x.rank(), 0), interior(x.rank(), 0);
  lows[dim] = low;
  highs[dim] = high;
  return b.pad(x, b.constant(0.0, x.type), lows, highs, interior);
}

Value pad_along(Builder& b, const Value& x, int64_t dim, int64_t left, int64_t right,
                PadMode mode) {
  int64_t n = x.shape[dim];
  std::vector<Value> parts;
  if (mode == PadMode::Reflect) {
    if (left > 0) parts.push_back(b.reverse(range_along(b, x, dim, 1, left + 1), {dim}));
    parts.push_back(x);
    if (right > 0) parts.push_back(b.reverse(range_along(b, x, dim, n - right - 1, n - 1), {dim}));
  } else {
    auto repeat = [&](int64_t at, int64_t count) {
      Value edge = range_along(b, x, dim, at, at + 1);
      Shape shape = x.shape;
      shape[dim] = count;
      return broadcast_to(b, edge, shape);
    };
    if (left > 0) parts.push_back(repeat(0, left));
    parts.push_back(x);
    if (right > 0) parts.push_back(repeat(n - 1, right));
  }
  return parts.size() == 1 ? x : b.concatenate(parts, dim);
}

// The gradient of pad_along: each padded position's gradient goes back to the input position
// it copied.
Value pad_along_backward(Builder& b, const Value& grad, int64_t dim, int64_t left, int64_t right,
                         int64_t n, PadMode mode) {
  Value result = range_along(b, grad, dim, left, left + n);
  if (mode == PadMode::Reflect) {
    if (left > 0) {
      Value head = b.reverse(range_along(b, grad, dim, 0, left), {dim});
      result = b.add(result, zero_pad_along(b, head, dim, 1, n - 1 - left));
    }
    if (right > 0) {
      Value tail = b.reverse(range_along(b, grad, dim, left + n, left + n + right), {dim});
      result = b.add(result, zero_pad_along(b, tail, dim, n - 1 - right, 1));
    }
  } else {
    if (left > 0) {
      Value head = sum(b, range_along(b, grad, dim, 0, left), {dim});
      Shape one = grad.shape;
      one[dim] = 1;
      result = b.add(result, zero_pad_along(b, b.reshape(head, one), dim, 0, n - 1));
    }
    if (right > 0) {
      Value tail = sum(b, range_along(b, grad, dim, left + n, left + n + right), {dim});
      Shape one = grad.shape;
      one[dim] = 1;
      result = b.add(result, zero_pad_along(b, b.reshape(tail, one), dim, n - 1, 0));
    }
  }
  return result;
}

const char* mode_name(PadMode mode) {
  return mode == PadMode::Reflect ? "reflection_pad" : "replication_pad";
}

// padding = (left, right) for the last dim, then for the one before, ...
void check_padding(const Value& x, const std::vector<int64_t>& padding, int64_t dims,
                   PadMode mode) {
  TORCH_CHECK(static_cast<int64_t>(padding.size()) == 2 * dims, mode_name(mode), dims,
              "d: padding size is expected to be ", 2 * dims, ", but got: ", padding.size());
  TORCH_CHECK(x.rank() == dims + 1 || x.rank() == dims + 2, mode_name(mode), dims, "d: expected ",
              dims + 1, "D or ", dims + 2, "D input, but got ", x.rank(), "D");
  for (int64_t i = 0; i < dims; ++i) {
    int64_t dim = x.rank() - 1 - i;
    int64_t left = padding[2 * i], right = padding[2 * i + 1];
    int64_t kept = mode == PadMode::Reflect
                       ? x.shape[dim] + std::min<int64_t>(left, 0) + std::min<int64_t>(right, 0)
                       : x.shape[dim] + left + right;
    TORCH_CHECK(kept > 0, mode_name(mode), dims, "d: padding (", left, ", ", right,
                ") leaves nothing of dimension ", dim, " of size ", x.shape[dim]);
    if (mode == PadMode::Reflect) {
      TORCH_CHECK(left < x.shape[dim] && right < x.shape[dim],
                  "Argument #4: Padding size should "
                  "be less than the corresponding input dimension, but got: padding (",
                  left, ", ", right, ") at dimension ", dim, " of input ", x.shape[dim]);
    } else {
      TORCH_CHECK(x.shape[dim] > 0, mode_name(mode), dims, "d: input dimension ", dim, " is empty");
    }
  }
}

// Replication with negative amounts, as CPU defines it: out[j] = x[clamp(j - left, 0, n - 1)],
// read by positions (cropping could remove every element before replicating).
Value clamped_positions(Builder& b, int64_t out, int64_t left, int64_t n) {
  Value j = b.iota({out}, ElementType::S64, 0);
  return b.clamp(splat(b, 0, ElementType::S64, {out}),
                 b.subtract(j, splat(b, static_cast<double>(left), ElementType::S64, {out})),
                 splat(b, static_cast<double>(n - 1), ElementType::S64, {out}));
}
bool any_negative(const std::vector<int64_t>& padding) {
  return std::any_of(padding.begin(), padding.end(), [](int64_t p) { return p < 0; });
}

Values pad_forward(LoweringContext& ctx, int64_t dims, PadMode mode) {
  Value x = ctx.tensor(0);
  std::vector<int64_t> padding = ctx.arg(1).toIntVector();
  check_padding(x, padding, dims, mode);
  if (mode == PadMode::Replicate && any_negative(padding)) {
    for (int64_t i = 0; i < dims; ++i) {
      int64_t dim = x.rank() - 1 - i, left = padding[2 * i], right = padding[2 * i + 1];
      int64_t n = x.shape[dim];
      x = take_slices(ctx.b, x, dim, clamped_positions(ctx.b, n + left + right, left, n));
    }
    return {x};
  }
  // Negative amounts crop first; the rest pads about the edges that remain, as on CPU.
  for (int64_t i = 0; i < dims; ++i) {
    int64_t dim = x.rank() - 1 - i, left = padding[2 * i], right = padding[2 * i + 1];
    x = range_along(ctx.b, x, dim, std::max<int64_t>(0, -left),
                    x.shape[dim] - std::max<int64_t>(0, -right));
    x = pad_along(ctx.b, x, dim, std::max<int64_t>(0, left), std::max<int64_t>(0, right), mode);
  }
  return {x};
}

// *_backward(grad_output, self, padding).
Values pad_backward(LoweringContext& ctx, int64_t dims, PadMode mode) {
  Value grad = ctx.tensor(0);
  Value self = ctx.tensor(1);
  std::vector<int64_t> padding = ctx.arg(2).toIntVector();
  check_padding(self, padding, dims, mode);
  if (mode == PadMode::Replicate && any_negative(padding)) {
    for (int64_t i = dims - 1; i >= 0; --i) {
      int64_t dim = grad.rank() - 1 - i, left = padding[2 * i];
      int64_t n = self.shape[dim];
      Shape shape = grad.shape;
      shape[dim] = n;
      grad =
          combine_slices(ctx.b, splat(ctx.b, 0, grad.type, shape), dim,
                         clamped_positions(ctx.b, grad.shape[dim], left, n), grad, BinaryOp::Add);
    }
    return {grad};
  }
  for (int64_t i = dims - 1; i >= 0; --i) {
    int64_t dim = grad.rank() - 1 - i, left = padding[2 * i], right = padding[2 * i + 1];
    int64_t crop_left = std::max<int64_t>(0, -left), crop_right = std::max<int64_t>(0, -right);
    grad = pad_along_backward(ctx.b, grad, dim, std::max<int64_t>(0, left),
                              std::max<int64_t>(0, right), self.shape[dim] - crop_left - crop_right,
                              mode);
    grad = zero_pad_along(ctx.b, grad, dim, crop_left, crop_right);
  }
  return {grad};
}

#define TORCH_TPU_PAD(name, dims, mode)                                              \
  LOWER({#name, #name ".out"},                                                       \
        [](LoweringContext& ctx) { return pad_forward(ctx, dims, PadMode::mode); }); \
  LOWER({#name "_backward", #name "_backward.grad_input"},                           \
        [](LoweringContext& ctx) { return pad_backward(ctx, dims, PadMode::mode); });
TORCH_TPU_PAD(reflection_pad1d, 1, Reflect)
TORCH_TPU_PAD(reflection_pad2d, 2, Reflect)
TORCH_TPU_PAD(reflection_pad3d, 3, Reflect)
TORCH_TPU_PAD(replication_pad1d, 1, Replicate)
TORCH_TPU_PAD(replication_pad2d, 2, Replicate)
TORCH_TPU_PAD(replication_pad3d, 3, Replicate)

}  // namespace
}  // namespace torch_tpu::aten
