// Upsampling (nearest, nearest-exact, linear/bilinear/trilinear, bicubic, antialiased bilinear
// and bicubic) and gradients, one spatial axis at a time: source positions and weights follow
// ATen's formulas (computed in float32 as CPU does), values are gathered (so an Inf or NaN stays
// where CPU puts it), and gradients are added back at the same positions.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

enum class Interp { Nearest, NearestExact, Linear };

// What interpolation computes in: float32 for integer images (CPU's uint8 kernels weigh in
// float too) and reduced-precision floats, float64 for float64.
ElementType interp_math(ElementType type) {
  return hlo::is_float(type) ? opmath(type) : ElementType::F32;
}

// `x`, computed in interp_math, stored as `type`: an integer image's values rounded to the
// nearest and held to the type's range, as CPU stores them (a plain conversion truncates, and
// wraps what lies outside: bicubic overshoots).
Value store_as(Builder& b, const Value& x, ElementType type) {
  if (hlo::is_float(type)) return b.convert(x, type);
  Value rounded = b.round_nearest_even(x);
  if (type == ElementType::U8 || type == ElementType::S8) {
    const bool is_unsigned = type == ElementType::U8;
    rounded = b.clamp(splat(b, is_unsigned ? 0 : -128, x.type, x.shape), rounded,
                      splat(b, is_unsigned ? 255 : 127, x.type, x.shape));
  }
  return b.convert(rounded, type);
}

// ATen's area_pixel_compute_scale, in T: float, or double for float64 inputs (CPU's opmath).
template <typename T = float>
T compute_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  if (scale && *scale > 0) return static_cast<T>(1.0 / *scale);
  return static_cast<T>(in) / static_cast<T>(out);
}

struct AxisPlan {
  Value low, high;    // s64 [out] source positions
  Value high_weight;  // f32 [out], f64 for float64 (linear only)
};

// `wide`: linear positions and weights in float64, as CPU computes them for float64 inputs.
AxisPlan plan_axis(Builder& b, int64_t in, int64_t out, Interp mode, bool align_corners,
                   std::optional<double> scale_opt, bool wide = false) {
  Shape shape{out};
  wide = wide && mode == Interp::Linear;
  const ElementType ft = wide ? ElementType::F64 : ElementType::F32;
  Value i = b.convert(b.iota(shape, ElementType::S64, 0), ft);
  auto f = [&](double v) { return splat(b, v, ft, shape); };
  auto last = splat(b, static_cast<double>(in - 1), ElementType::S64, shape);
  const bool corners = mode == Interp::Linear && align_corners;
  double scale = wide ? compute_scale<double>(in, out, corners, scale_opt)
                      : compute_scale<float>(in, out, corners, scale_opt);
  if (mode != Interp::Linear) {
    Value src =
        mode == Interp::Nearest ? b.multiply(i, f(scale)) : b.multiply(b.add(i, f(0.5)), f(scale));
    Value index = b.convert(b.floor(src), ElementType::S64);
    index = b.minimum(index, last);
    return {index, index, Value()};
  }
  Value src = align_corners ? b.multiply(i, f(scale))
                            : b.subtract(b.multiply(b.add(i, f(0.5)), f(scale)), f(0.5));
  if (!align_corners) src = b.maximum(src, f(0));
  Value low_f = b.floor(src);
  Value low = b.minimum(b.convert(low_f, ElementType::S64), last);
  Value high = b.minimum(b.add(low, splat(b, 1, ElementType::S64, shape)), last);
  Value weight = b.subtract(src, b.convert(low, ft));
  return {low, high, weight};
}

// Broadcasts a per-position weight [out] along `dim` of `like`.
Value along(Builder& b, const Value& weight, const Value& like, int64_t dim) {
  Shape shape(like.rank(), 1);
  shape[dim] = like.shape[dim];
  return broadcast_to(b, b.reshape(b.convert(weight, like.type), shape), like.shape);
}

Value resample_axis(Builder& b, const Value& x, int64_t dim, const AxisPlan& plan, Interp mode) {
  Value low = take_slices(b, x, dim, plan.low);
  if (mode != Interp::Linear) return low;
  Value high = take_slices(b, x, dim, plan.high);
  Value w1 = along(b, plan.high_weight, low, dim);
  Value w0 = b.subtract(splat(b, 1, low.type, low.shape), w1);
  return b.add(b.multiply(w0, low), b.multiply(w1, high));
}

Value resample_axis_backward(Builder& b, const Value& grad, int64_t dim, int64_t in,
                             const AxisPlan& plan, Interp mode) {
  Shape shape = grad.shape;
  shape[dim] = in;
  Value zeros = splat(b, 0, grad.type, shape);
  if (mode != Interp::Linear) return combine_slices(b, zeros, dim, plan.low, grad, BinaryOp::Add);
  Value w1 = along(b, plan.high_weight, grad, dim);
  Value w0 = b.subtract(splat(b, 1, grad.type, grad.shape), w1);
  Value result = combine_slices(b, zeros, dim, plan.low, b.multiply(w0, grad), BinaryOp::Add);
  return combine_slices(b, result, dim, plan.high, b.multiply(w1, grad), BinaryOp::Add);
}

// A window of `width` source positions per output position along one axis, with a weight each:
// the bicubic and antialiasing filters, whose windows are tabulated on the host.
struct Taps {
  int64_t width = 0;
  std::vector<double> index;   // [out * width], valid positions
  std::vector<double> weight;  // [out * width]
};

// ATen's cubic convolution coefficients for a fractional offset t (A = -0.75 for bicubic).
template <typename T>
T cubic_near(T x, T a) {
  return ((a + 2) * x - (a + 3)) * x * x + 1;
}
template <typename T>
T cubic_far(T x, T a) {
  return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}

// Bicubic: four taps around floor(source), clamped to the edge, as CPU's
// upsample_bicubic2d (source index without the clamp at 0 that linear applies).
// In T: float, or double for float64 inputs (CPU's opmath).
template <typename T>
Taps cubic_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale_opt) {
  constexpr T a = -0.75;
  const T scale = compute_scale<T>(in, out, align_corners, scale_opt);
  Taps taps{4, {}, {}};
  for (int64_t i = 0; i < out; ++i) {
    const T position =
        align_corners ? scale * static_cast<T>(i) : scale * (static_cast<T>(i) + T(0.5)) - T(0.5);
    const int64_t base = std::min(static_cast<int64_t>(std::floor(position)), in - 1);
    const T t = std::min(std::max(position - static_cast<T>(base), T(0)), T(1));
    const T weights[4] = {cubic_far(t + 1, a), cubic_near(t, a), cubic_near(1 - t, a),
                          cubic_far(2 - t, a)};
    for (int64_t k = 0; k < 4; ++k) {
      taps.index.push_back(static_cast<double>(std::clamp<int64_t>(base - 1 + k, 0, in - 1)));
      taps.weight.push_back(weights[k]);
    }
  }
  return taps;
}

// Antialiasing (PIL's filters, as CPU's _upsample_*_aa): a window that widens with the
// downscale factor, weights normalized to sum to one. Unused window slots weigh zero.
// In T: float, or double for float64 inputs (CPU computes the weights in the input's type, so
// a float64 image of ones resamples to exact ones).
template <typename T>
Taps antialias_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale_opt,
                    bool cubic) {
  const T scale = compute_scale<T>(in, out, align_corners, scale_opt);
  const int interp_size = cubic ? 4 : 2;
  const T support = scale >= T(1) ? T(interp_size * 0.5) * scale : T(interp_size * 0.5);
  const int64_t width = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  const T inverse_scale = scale >= T(1) ? T(1) / scale : T(1);
  auto filter = [cubic](T x) -> T {
    x = std::abs(x);
    if (!cubic) return x < T(1) ? T(1) - x : T(0);
    if (x < T(1)) return cubic_near(x, T(-0.5));
    return x < T(2) ? cubic_far(x, T(-0.5)) : T(0);
  };
  Taps taps{width, {}, {}};
  std::vector<T> weights(static_cast<size_t>(width));
  for (int64_t i = 0; i < out; ++i) {
    const auto center = static_cast<T>(static_cast<double>(scale) * (static_cast<double>(i) + 0.5));
    const int64_t first =
        std::max(static_cast<int64_t>(static_cast<double>(center - support) + 0.5), int64_t{0});
    const int64_t count = std::clamp<int64_t>(
        std::min(static_cast<int64_t>(static_cast<double>(center + support) + 0.5), in) - first, 0,
        width);
    T total = 0;
    for (int64_t j = 0; j < width; ++j) {
      const T offset = static_cast<T>(j + first) - center;
      weights[j] = j < count
                       ? filter(static_cast<T>((static_cast<double>(offset) + 0.5) * inverse_scale))
                       : T(0);
      total += weights[j];
    }
    for (int64_t j = 0; j < width; ++j) {
      const int64_t slot = std::min(j, std::max<int64_t>(count - 1, 0));
      taps.index.push_back(static_cast<double>(std::clamp<int64_t>(first + slot, 0, in - 1)));
      taps.weight.push_back(static_cast<double>(total != T(0) ? weights[j] / total : weights[j]));
    }
  }
  return taps;
}

// The window of each output position along `dim`, weighted and summed.
Value apply_taps(Builder& b, const Value& x, int64_t dim, const Taps& taps) {
  const auto out = static_cast<int64_t>(taps.index.size()) / taps.width;
  Value window = take_slices(b, x, dim, b.constant_values(taps.index, ElementType::S64));
  Shape split = x.shape;
  split[dim] = out;
  split.insert(split.begin() + dim + 1, taps.width);
  window = b.reshape(window, split);
  Shape weight_shape(split.size(), 1);
  weight_shape[dim] = out;
  weight_shape[dim + 1] = taps.width;
  Value weight = b.reshape(b.constant_values(taps.weight, x.type), weight_shape);
  return sum(b, b.multiply(window, broadcast_to(b, weight, split)), {dim + 1});
}

// The transpose of apply_taps: each output's gradient, weighted, added back to its window.
Value apply_taps_backward(Builder& b, const Value& grad, int64_t dim, int64_t in,
                          const Taps& taps) {
  const auto out = static_cast<int64_t>(taps.index.size()) / taps.width;
  Shape split = grad.shape;
  split.insert(split.begin() + dim + 1, taps.width);
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < static_cast<int64_t>(split.size()); ++d) {
    if (d != dim + 1) kept.push_back(d);
  }
  Value spread = b.broadcast_in_dim(grad, split, kept);
  Shape weight_shape(split.size(), 1);
  weight_shape[dim] = out;
  weight_shape[dim + 1] = taps.width;
  Value weight = b.reshape(b.constant_values(taps.weight, grad.type), weight_shape);
  spread = b.multiply(spread, broadcast_to(b, weight, split));
  Shape flat = grad.shape;
  flat[dim] = out * taps.width;
  Shape shape = grad.shape;
  shape[dim] = in;
  return combine_slices(b, splat(b, 0, grad.type, shape), dim,
                        b.constant_values(taps.index, ElementType::S64), b.reshape(spread, flat),
                        BinaryOp::Add);
}

std::optional<double> optional_double(const c10::IValue& value) {
  if (value.isNone()) return std::nullopt;
  return value.toDouble();
}

// upsample_*(self, output_size, [align_corners,] scales...).
Values upsample(LoweringContext& ctx, int64_t dims, Interp mode) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  std::vector<int64_t> size = ctx.arg(1).toIntVector();
  bool linear = mode == Interp::Linear;
  bool align_corners = linear && ctx.arg(2).toBool();
  int scales_at = linear ? 3 : 2;
  TORCH_CHECK(static_cast<int64_t>(size.size()) == dims && x.rank() == dims + 2,
              "upsample: expected a ", dims + 2, "D input and ", dims, " output sizes");
  for (int64_t i = 0; i < dims; ++i) {
    TORCH_CHECK(size[i] > 0 && x.shape[2 + i] > 0,
                "upsample: input and output sizes should be "
                "greater than 0");
  }
  // All axes in float, rounded once at the end, as CPU's kernel interpolates every axis at once.
  const ElementType type = x.type;
  x = b.convert(x, interp_math(type));
  for (int64_t i = 0; i < dims; ++i) {
    int64_t dim = 2 + i;
    AxisPlan plan = plan_axis(b, x.shape[dim], size[i], mode, align_corners,
                              optional_double(ctx.arg(scales_at + static_cast<int>(i))),
                              type == ElementType::F64);
    x = resample_axis(b, x, dim, plan, mode);
  }
  return {store_as(b, x, type)};
}

// upsample_*_backward(grad_output, output_size, input_size, [align_corners,] scales...).
Values upsample_backward(LoweringContext& ctx, int64_t dims, Interp mode) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0);
  std::vector<int64_t> out = ctx.arg(1).toIntVector();
  std::vector<int64_t> in = ctx.arg(2).toIntVector();
  bool linear = mode == Interp::Linear;
  bool align_corners = linear && ctx.arg(3).toBool();
  int scales_at = linear ? 4 : 3;
  ElementType t = grad.type;
  grad = b.convert(grad, opmath(t));
  for (int64_t i = dims - 1; i >= 0; --i) {
    int64_t dim = 2 + i;
    AxisPlan plan =
        plan_axis(b, in[2 + i], out[i], mode, align_corners,
                  optional_double(ctx.arg(scales_at + static_cast<int>(i))), t == ElementType::F64);
    grad = resample_axis_backward(b, grad, dim, in[2 + i], plan, mode);
  }
  return {b.convert(grad, t)};
}

#define TORCH_TPU_UPSAMPLE(name, dims, mode)                                     \
  LOWER({#name, #name ".out"},                                                   \
        [](LoweringContext& ctx) { return upsample(ctx, dims, Interp::mode); }); \
  LOWER({#name "_backward", #name "_backward.grad_input"},                       \
        [](LoweringContext& ctx) { return upsample_backward(ctx, dims, Interp::mode); });
TORCH_TPU_UPSAMPLE(upsample_nearest1d, 1, Nearest)
TORCH_TPU_UPSAMPLE(upsample_nearest2d, 2, Nearest)
TORCH_TPU_UPSAMPLE(upsample_nearest3d, 3, Nearest)
TORCH_TPU_UPSAMPLE(_upsample_nearest_exact1d, 1, NearestExact)
TORCH_TPU_UPSAMPLE(_upsample_nearest_exact2d, 2, NearestExact)
TORCH_TPU_UPSAMPLE(_upsample_nearest_exact3d, 3, NearestExact)
TORCH_TPU_UPSAMPLE(upsample_linear1d, 1, Linear)
TORCH_TPU_UPSAMPLE(upsample_bilinear2d, 2, Linear)
TORCH_TPU_UPSAMPLE(upsample_trilinear3d, 3, Linear)

enum class Filter { Bicubic, AntialiasBilinear, AntialiasBicubic };

Taps filter_taps(Filter filter, int64_t in, int64_t out, bool align_corners,
                 std::optional<double> scale, bool wide) {
  if (filter == Filter::Bicubic) {
    return wide ? cubic_taps<double>(in, out, align_corners, scale)
                : cubic_taps<float>(in, out, align_corners, scale);
  }
  const bool cubic = filter == Filter::AntialiasBicubic;
  return wide ? antialias_taps<double>(in, out, align_corners, scale, cubic)
              : antialias_taps<float>(in, out, align_corners, scale, cubic);
}

// The 2-D filters' (self, output_size, align_corners, scales_h, scales_w). Bicubic sums its 4x4
// window in float and rounds once, as CPU's kernel; the antialiased ones (and uint8 bicubic)
// resample width, then height, skipping an axis whose size does not change, as CPU's separable
// passes do.
Values upsample_filtered(LoweringContext& ctx, Filter filter) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  std::vector<int64_t> size = ctx.arg(1).toIntVector();
  const bool align_corners = ctx.arg(2).toBool();
  TORCH_CHECK(size.size() == 2 && x.rank() == 4,
              "upsample: expected a 4D input and 2 output sizes");
  TORCH_CHECK(size[0] > 0 && size[1] > 0 && x.shape[2] > 0 && x.shape[3] > 0,
              "upsample: input and output sizes should be greater than 0");
  const ElementType type = x.type;
  x = b.convert(x, interp_math(type));
  // CPU runs uint8 bicubic as two separable passes too, rounding (and clamping) in between.
  const bool separable = filter != Filter::Bicubic || !hlo::is_float(type);
  for (int64_t i = 1; i >= 0; --i) {
    const int64_t dim = 2 + i;
    if (separable && x.shape[dim] == size[i]) continue;
    Taps taps =
        filter_taps(filter, x.shape[dim], size[i], align_corners,
                    optional_double(ctx.arg(3 + static_cast<int>(i))), type == ElementType::F64);
    x = apply_taps(b, x, dim, taps);
    if (separable) x = b.convert(store_as(b, x, type), interp_math(type));
  }
  return {store_as(b, x, type)};
}

// (grad_output, output_size, input_size, align_corners, scales_h, scales_w).
Values upsample_filtered_backward(LoweringContext& ctx, Filter filter) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0);
  std::vector<int64_t> out = ctx.arg(1).toIntVector();
  std::vector<int64_t> in = ctx.arg(2).toIntVector();
  TORCH_CHECK(out.size() == 2 && in.size() == 4,
              "upsample backward: expected 2 output sizes and a 4D input size");
  const bool align_corners = ctx.arg(3).toBool();
  const ElementType type = grad.type;
  grad = b.convert(grad, opmath(type));
  for (int64_t i = 0; i < 2; ++i) {
    const int64_t dim = 2 + i;
    if (filter != Filter::Bicubic && in[dim] == out[i]) continue;
    Taps taps =
        filter_taps(filter, in[dim], out[i], align_corners,
                    optional_double(ctx.arg(4 + static_cast<int>(i))), type == ElementType::F64);
    grad = apply_taps_backward(b, grad, dim, in[dim], taps);
  }
  return {b.convert(grad, type)};
}

#define TORCH_TPU_UPSAMPLE_FILTERED(name, filter)                                     \
  LOWER({#name, #name ".out"},                                                        \
        [](LoweringContext& ctx) { return upsample_filtered(ctx, Filter::filter); }); \
  LOWER({#name "_backward", #name "_backward.grad_input"},                            \
        [](LoweringContext& ctx) { return upsample_filtered_backward(ctx, Filter::filter); });
TORCH_TPU_UPSAMPLE_FILTERED(upsample_bicubic2d, Bicubic)
TORCH_TPU_UPSAMPLE_FILTERED(_upsample_bilinear2d_aa, AntialiasBilinear)
TORCH_TPU_UPSAMPLE_FILTERED(_upsample_bicubic2d_aa, AntialiasBicubic)

}  // namespace
}  // namespace torch_tpu::aten
