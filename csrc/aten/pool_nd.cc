// Pooling over any number of spatial dims: 2-d and 3-d max and average pooling, adaptive max
// pooling (1-d through 3-d), and the argmax scatter every max-pool backward shares. Inputs are
// [N, C, spatial...] or unbatched [C, spatial...].
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

// `x` with a batch dim added when it has only `spatial` + 1 dims.
Value batched(Builder& b, const Value& x, size_t spatial) {
  if (x.rank() == static_cast<int64_t>(spatial) + 2) return x;
  Shape shape{1};
  shape.insert(shape.end(), x.shape.begin(), x.shape.end());
  return b.reshape(x, shape);
}
Value unbatched_like(Builder& b, const Value& x, const at::Tensor& input) {
  if (input.dim() == x.rank()) return x;
  return b.reshape(x, Shape(x.shape.begin() + 1, x.shape.end()));
}

int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t numerator = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t out = numerator / s + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// Row-major strides of the spatial dims (for flat argmax indices within a plane).
std::vector<int64_t> plane_strides(const Shape& shape) {
  size_t spatial = shape.size() - 2;
  std::vector<int64_t> strides(spatial, 1);
  for (size_t i = spatial; i-- > 1;) strides[i - 1] = strides[i] * shape[2 + i];
  return strides;
}

// Keeps the candidate when it is larger or NaN: taps come in the window's row-major order, so
// the first largest value wins and, as CPU's and CUDA's scans keep it, the last NaN. A tap in the
// padding (`inside` false) never wins against one inside the input, even one holding -inf.
void keep_larger(Builder& b, Value& best, Value& best_index, std::optional<Value>& best_inside,
                 const Value& value, const Value& index, const std::optional<Value>& inside) {
  Value better = b.gt(value, best);
  if (hlo::is_float(value.type)) better = b.or_(better, is_nan(b, value));
  if (inside) {
    better = b.and_(*inside, b.or_(better, b.not_(*best_inside)));
    best_inside = b.or_(*best_inside, *inside);
  }
  best = b.select(better, value, best);
  best_index = b.select(better, index, best_index);
}

// max_pool{n}d_with_indices(self, kernel, stride, padding, dilation, ceil_mode): one strided
// slice per kernel tap, the first largest (or last NaN) kept with its flat index in the input
// plane.
Values max_pool_nd(LoweringContext& ctx, size_t spatial) {
  Builder& b = ctx.b;
  Value x = batched(b, ctx.tensor(0), spatial);
  auto k = int_list(ctx, 1, spatial);
  auto s = ctx.arg(2).toIntVector().empty() ? k : int_list(ctx, 2, spatial);
  auto p = int_list(ctx, 3, spatial), d = int_list(ctx, 4, spatial);
  bool ceil_mode = ctx.arg(5).toBool();
  Shape out_shape{x.shape[0], x.shape[1]};
  std::vector<int64_t> low{0, 0}, high{0, 0}, interior(x.rank(), 0);
  for (size_t i = 0; i < spatial; ++i) {
    int64_t in = x.shape[2 + i];
    int64_t o = pool_out(in, k[i], s[i], p[i], d[i], ceil_mode);
    TORCH_CHECK(o > 0, "max_pool", spatial, "d: output size is too small");
    out_shape.push_back(o);
    int64_t need = (o - 1) * s[i] + (k[i] - 1) * d[i] + 1;
    low.push_back(p[i]);
    high.push_back(std::max<int64_t>(0, need - in - p[i]));
  }
  Value padded = b.pad(x, b.constant(lowest(x.type), x.type), low, high, interior);
  std::vector<int64_t> strides = plane_strides(x.shape);
  bool padding = std::any_of(low.begin(), low.end(), [](int64_t v) { return v > 0; }) ||
                 std::any_of(high.begin(), high.end(), [](int64_t v) { return v > 0; });
  Value best, best_index;
  std::optional<Value> best_inside;
  int64_t taps = 1;
  for (int64_t kk : k) taps *= kk;
  for (int64_t t = 0; t < taps; ++t) {
    std::vector<int64_t> tap(spatial);
    for (size_t i = spatial, rest = t; i-- > 0;) {
      tap[i] = static_cast<int64_t>(rest) % k[i];
      rest /= k[i];
    }
    std::vector<int64_t> start{0, 0}, limit{x.shape[0], x.shape[1]}, step{1, 1};
    Value index = splat(b, 0, ElementType::S64, out_shape);
    std::optional<Value> inside;
    for (size_t i = 0; i < spatial; ++i) {
      int64_t offset = tap[i] * d[i];
      start.push_back(offset);
      limit.push_back(offset + (out_shape[2 + i] - 1) * s[i] + 1);
      step.push_back(s[i]);
      // Input position along dim i: o * s - p + tap * d.
      Value position =
          b.add(b.multiply(b.iota(out_shape, ElementType::S64, 2 + i),
                           splat(b, static_cast<double>(s[i]), ElementType::S64, out_shape)),
                splat(b, static_cast<double>(offset - p[i]), ElementType::S64, out_shape));
      index = b.add(index, b.multiply(position, splat(b, static_cast<double>(strides[i]),
                                                      ElementType::S64, out_shape)));
      if (padding) {
        Value in_dim = b.and_(b.ge(position, splat(b, 0, ElementType::S64, out_shape)),
                              b.lt(position, splat(b, static_cast<double>(x.shape[2 + i]),
                                                   ElementType::S64, out_shape)));
        inside = inside ? b.and_(*inside, in_dim) : in_dim;
      }
    }
    Value window = b.slice(padded, start, limit, step);
    if (t == 0) {
      best = window;
      best_index = index;
      best_inside = inside;
    } else {
      keep_larger(b, best, best_index, best_inside, window, index, inside);
    }
  }
  const at::Tensor& input = ctx.tensor_meta(0);
  return {unbatched_like(b, best, input), unbatched_like(b, best_index, input)};
}
LOWER({"max_pool2d_with_indices", "max_pool2d_with_indices.out"},
      [](LoweringContext& ctx) { return max_pool_nd(ctx, 2); });
LOWER({"max_pool3d_with_indices", "max_pool3d_with_indices.out"},
      [](LoweringContext& ctx) { return max_pool_nd(ctx, 3); });

// The gradient of any max pooling: grad_output added at each output's argmax in its plane.
Value scatter_to_argmax(Builder& b, const Value& grad, const Value& self, const Value& indices,
                        size_t spatial) {
  int64_t plane = 1;
  for (size_t i = 0; i < spatial; ++i) plane *= self.shape[self.rank() - 1 - i];
  int64_t planes = plane == 0 ? 0 : hlo::num_elements(self.shape) / plane;
  int64_t outputs = planes == 0 ? 0 : hlo::num_elements(grad.shape) / planes;
  Value g = b.reshape(grad, {planes, outputs});
  Value idx = b.reshape(b.convert(indices, ElementType::S64), {planes, outputs});
  Value which = b.iota({planes, outputs}, ElementType::S64, 0);
  Value coords = b.concatenate(
      {b.reshape(which, {planes, outputs, 1}), b.reshape(idx, {planes, outputs, 1})}, 2);
  hlo::ScatterDims dims;
  dims.inserted_window_dims = {0, 1};
  dims.scatter_dims_to_operand_dims = {0, 1};
  dims.index_vector_dim = 2;
  Value out = b.scatter(splat(b, 0, grad.type, {planes, plane}), coords, g, dims,
                        [](Builder& r, const std::vector<Value>& a) {
                          return std::vector<Value>{r.add(a[0], a[1])};
                        });
  return b.reshape(out, self.shape);
}
LOWER({"max_pool2d_with_indices_backward", "max_pool2d_with_indices_backward.grad_input"},
      [](LoweringContext& ctx) {
        return Values{scatter_to_argmax(ctx.b, ctx.tensor(0), ctx.tensor(1), ctx.tensor(7), 2)};
      });
LOWER({"max_pool3d_with_indices_backward", "max_pool3d_with_indices_backward.grad_input"},
      [](LoweringContext& ctx) {
        return Values{scatter_to_argmax(ctx.b, ctx.tensor(0), ctx.tensor(1), ctx.tensor(7), 3)};
      });
LOWER({"adaptive_max_pool2d_backward", "adaptive_max_pool2d_backward.grad_input"},
      [](LoweringContext& ctx) {
        return Values{scatter_to_argmax(ctx.b, ctx.tensor(0), ctx.tensor(1), ctx.tensor(2), 2)};
      });
LOWER({"adaptive_max_pool3d_backward", "adaptive_max_pool3d_backward.grad_input"},
      [](LoweringContext& ctx) {
        return Values{scatter_to_argmax(ctx.b, ctx.tensor(0), ctx.tensor(1), ctx.tensor(2), 3)};
      });

// adaptive_max_pool{n}d(self, output_size): output o along a dim of size L covers
// [floor(o L / O), ceil((o + 1) L / O)). Reduced one dim at a time (max is separable), last dim
// first, carrying the flat index of the winner.
Values adaptive_max_pool(LoweringContext& ctx, size_t spatial) {
  Builder& b = ctx.b;
  const at::Tensor& input = ctx.tensor_meta(0);
  Value x = batched(b, ctx.tensor(0), spatial);
  auto out_size = int_list(ctx, 1, spatial);
  std::vector<int64_t> strides = plane_strides(x.shape);
  Value index = splat(b, 0, ElementType::S64, x.shape);
  for (size_t i = spatial; i-- > 0;) {
    int64_t axis = 2 + static_cast<int64_t>(i), in = x.shape[axis], out = out_size[i];
    TORCH_CHECK(in > 0, "adaptive_max_pool", spatial,
                "d(): Expected input to have non-zero size "
                "for non-batch dimensions");
    // pair: x's shape with [out] inserted before the reduced axis.
    Shape pair = x.shape;
    pair.insert(pair.begin() + axis, out);
    std::vector<int64_t> keep;
    for (int64_t dd = 0; dd < x.rank(); ++dd) keep.push_back(dd < axis ? dd : dd + 1);
    Value o = b.iota(pair, ElementType::S64, axis), l = b.iota(pair, ElementType::S64, axis + 1);
    auto scaled = [&](const Value& v, int64_t add) {
      return b.multiply(b.add(v, splat(b, add, ElementType::S64, pair)),
                        splat(b, static_cast<double>(in), ElementType::S64, pair));
    };
    Value start = b.divide(scaled(o, 0), splat(b, out, ElementType::S64, pair));
    Value end = b.divide(b.add(scaled(o, 1), splat(b, out - 1, ElementType::S64, pair)),
                         splat(b, out, ElementType::S64, pair));
    Value inside = b.and_(b.ge(l, start), b.lt(l, end));
    Value values =
        b.select(inside, b.broadcast_in_dim(x, pair, keep), splat(b, lowest(x.type), x.type, pair));
    // Positions outside the window carry the identity's index, after every real one.
    Value last = b.constant_int(std::numeric_limits<int64_t>::max(), ElementType::S64, pair);
    Value candidate = b.select(
        inside,
        b.add(b.broadcast_in_dim(index, pair, keep),
              b.multiply(l, splat(b, static_cast<double>(strides[i]), ElementType::S64, pair))),
        last);
    auto reduced = b.reduce(
        {values, candidate},
        // The identity's index comes after every position, so a window of -inf reports its first.
        {b.constant(lowest(x.type), x.type),
         b.constant_int(std::numeric_limits<int64_t>::max(), ElementType::S64)},
        {axis + 1}, [](Builder& r, const std::vector<Value>& a) {
          // Larger wins and ties go to the earlier position; a NaN beats a number and, as
          // CPU's row-major scan keeps it, the later of two NaNs wins.
          Value better = r.gt(a[0], a[2]);
          Value equal = r.eq(a[0], a[2]);
          Value earlier = r.lt(a[1], a[3]);
          Value left = r.or_(better, r.and_(equal, earlier));
          if (hlo::is_float(a[0].type)) {
            Value left_nan = r.ne(a[0], a[0]), right_nan = r.ne(a[2], a[2]);
            left = r.select(left_nan, r.or_(r.not_(right_nan), r.not_(earlier)),
                            r.and_(r.not_(right_nan), left));
          }
          return std::vector<Value>{r.select(left, a[0], a[2]), r.select(left, a[1], a[3])};
        });
    x = reduced[0];
    index = reduced[1];
  }
  return {unbatched_like(b, x, input), unbatched_like(b, index, input)};
}
LOWER({"adaptive_max_pool2d", "adaptive_max_pool2d.out"},
      [](LoweringContext& ctx) { return adaptive_max_pool(ctx, 2); });
LOWER({"adaptive_max_pool3d", "adaptive_max_pool3d.out"},
      [](LoweringContext& ctx) { return adaptive_max_pool(ctx, 3); });

// avg_pool{n}d: window sums over the zero-padded input, divided by the count torch uses
// (the window clipped to the padded input, or to the input without count_include_pad).
struct AvgPool {
  std::vector<int64_t> k, s, p, out;
  bool count_include_pad;
  std::optional<int64_t> divisor_override;
};
AvgPool avg_pool_args(const LoweringContext& ctx, int first, size_t spatial, const Shape& in) {
  AvgPool a;
  a.k = int_list(ctx, first, spatial);
  a.s = ctx.arg(first + 1).toIntVector().empty() ? a.k : int_list(ctx, first + 1, spatial);
  a.p = int_list(ctx, first + 2, spatial);
  bool ceil_mode = ctx.arg(first + 3).toBool();
  a.count_include_pad = ctx.arg(first + 4).toBool();
  if (!ctx.arg(first + 5).isNone()) a.divisor_override = ctx.arg(first + 5).toInt();
  for (size_t i = 0; i < spatial; ++i)
    a.out.push_back(pool_out(in[2 + i], a.k[i], a.s[i], a.p[i], 1, ceil_mode));
  return a;
}
// Window sums of `x` [N, C, spatial...] with `fill` padding: both sides p, and the far side
// extended so ceil-mode windows fit; sliced to the output size.
Value window_sums(Builder& b, const Value& x, const AvgPool& a, double fill) {
  size_t spatial = x.shape.size() - 2;
  std::vector<int64_t> window{1, 1}, strides{1, 1}, ones(x.rank(), 1);
  std::vector<std::pair<int64_t, int64_t>> padding{{0, 0}, {0, 0}};
  for (size_t i = 0; i < spatial; ++i) {
    window.push_back(a.k[i]);
    strides.push_back(a.s[i]);
    int64_t need = (a.out[i] - 1) * a.s[i] + a.k[i];
    padding.push_back({a.p[i], std::max<int64_t>(a.p[i], need - x.shape[2 + i] - a.p[i])});
  }
  Value padded = x;
  if (fill != 0) {
    // Only the symmetric padding counts as input; the ceil extension is outside.
    std::vector<int64_t> low{0, 0}, high{0, 0}, interior(x.rank(), 0);
    for (size_t i = 0; i < spatial; ++i) {
      low.push_back(a.p[i]);
      high.push_back(a.p[i]);
      padding[2 + i] = {0, padding[2 + i].second - a.p[i]};
    }
    padded = b.pad(x, b.constant(fill, x.type), low, high, interior);
  }
  Value sums = b.reduce_window(padded, b.constant(0, x.type), window, strides, ones, ones, padding,
                               BinaryOp::Add);
  std::vector<int64_t> start(x.rank(), 0), limit{x.shape[0], x.shape[1]}, step(x.rank(), 1);
  for (size_t i = 0; i < spatial; ++i) limit.push_back(a.out[i]);
  return b.slice(sums, start, limit, step);
}
Value avg_divisor(Builder& b, const Shape& in, const AvgPool& a, ElementType t) {
  Shape plane{1, 1};
  Shape out{1, 1};
  for (size_t i = 2; i < in.size(); ++i) plane.push_back(in[i]);
  for (int64_t o : a.out) out.push_back(o);
  if (a.divisor_override) return splat(b, static_cast<double>(*a.divisor_override), t, out);
  return window_sums(b, splat(b, 1, t, plane), a, a.count_include_pad ? 1.0 : 0.0);
}

Values avg_pool_nd(LoweringContext& ctx, size_t spatial) {
  Builder& b = ctx.b;
  Value x0 = batched(b, ctx.tensor(0), spatial);
  ElementType m = opmath(x0.type);
  Value x = b.convert(x0, m);
  AvgPool a = avg_pool_args(ctx, 1, spatial, x.shape);
  Value sums = window_sums(b, x, a, 0);
  Value out = b.divide(sums, broadcast_to(b, avg_divisor(b, x.shape, a, m), sums.shape));
  return {unbatched_like(b, b.convert(out, x0.type), ctx.tensor_meta(0))};
}
LOWER({"avg_pool2d", "avg_pool2d.out"}, [](LoweringContext& ctx) { return avg_pool_nd(ctx, 2); });
LOWER({"avg_pool3d", "avg_pool3d.out"}, [](LoweringContext& ctx) { return avg_pool_nd(ctx, 3); });

// avg_pool{n}d_backward(grad_output, self, kernel, stride, padding, ceil_mode,
// count_include_pad, divisor_override): each scaled gradient spread over its window.
Values avg_pool_nd_backward(LoweringContext& ctx, size_t spatial) {
  Builder& b = ctx.b;
  Value self = batched(b, ctx.tensor(1), spatial);
  Value grad0 = batched(b, ctx.tensor(0), spatial);
  ElementType m = opmath(grad0.type);
  Value grad = b.convert(grad0, m);
  AvgPool a = avg_pool_args(ctx, 2, spatial, self.shape);
  Value scaled = b.divide(grad, broadcast_to(b, avg_divisor(b, self.shape, a, m), grad.shape));
  std::vector<int64_t> low{0, 0}, high{0, 0}, interior{0, 0}, window{1, 1}, ones(self.rank(), 1);
  for (size_t i = 0; i < spatial; ++i) {
    int64_t lo = a.k[i] - 1 - a.p[i];
    int64_t hi = self.shape[2 + i] + a.k[i] - 1 - lo - ((a.out[i] - 1) * a.s[i] + 1);
    low.push_back(lo);
    high.push_back(hi);
    interior.push_back(a.s[i] - 1);
    window.push_back(a.k[i]);
  }
  Value spread = b.pad(scaled, b.constant(0, m), low, high, interior);
  std::vector<std::pair<int64_t, int64_t>> none(self.rank(), {0, 0});
  Value out =
      b.reduce_window(spread, b.constant(0, m), window, ones, ones, ones, none, BinaryOp::Add);
  const at::Tensor& input = ctx.tensor_meta(1);
  return {b.reshape(b.convert(out, grad0.type), Shape(input.sizes().begin(), input.sizes().end()))};
}
LOWER({"avg_pool2d_backward", "avg_pool2d_backward.grad_input"},
      [](LoweringContext& ctx) { return avg_pool_nd_backward(ctx, 2); });
LOWER({"avg_pool3d_backward", "avg_pool3d_backward.grad_input"},
      [](LoweringContext& ctx) { return avg_pool_nd_backward(ctx, 3); });

}  // namespace
}  // namespace torch_tpu::aten
