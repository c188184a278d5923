// Upsampling (nearest, nearest-exact, linear/bilinear/trilinear) and gradients, one spatial axis
// at a time: source positions and weights follow ATen's formulas (computed in float32 as CPU
// does), values are gathered (so an Inf or NaN stays where CPU puts it), and gradients are
// added back at the same positions.
#include <c10/util/Exception.h>

#include <cmath>
#include <optional>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

enum class Interp { Nearest, NearestExact, Linear };

// ATen's area_pixel_compute_scale, in float.
float compute_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners)
    return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.f;
  if (scale && *scale > 0) return static_cast<float>(1.0 / *scale);
  return static_cast<float>(in) / static_cast<float>(out);
}

struct AxisPlan {
  Value low, high;    // s64 [out] source positions
  Value high_weight;  // f32 [out] (linear only)
};

AxisPlan plan_axis(Builder& b, int64_t in, int64_t out, Interp mode, bool align_corners,
                   std::optional<double> scale_opt) {
  Shape shape{out};
  Value i = b.convert(b.iota(shape, ElementType::S64, 0), ElementType::F32);
  auto f = [&](double v) { return splat(b, v, ElementType::F32, shape); };
  auto last = splat(b, static_cast<double>(in - 1), ElementType::S64, shape);
  float scale = compute_scale(in, out, mode == Interp::Linear && align_corners, scale_opt);
  if (mode != Interp::Linear) {
    Value src = mode == Interp::Nearest
                    ? b.binary("multiply", i, f(scale))
                    : b.binary("multiply", b.binary("add", i, f(0.5)), f(scale));
    Value index = b.convert(b.unary("floor", src), ElementType::S64);
    index = b.binary("minimum", index, last);
    return {index, index, Value()};
  }
  Value src = align_corners
                  ? b.binary("multiply", i, f(scale))
                  : b.binary("subtract", b.binary("multiply", b.binary("add", i, f(0.5)), f(scale)),
                             f(0.5));
  if (!align_corners) src = b.binary("maximum", src, f(0));
  Value low_f = b.unary("floor", src);
  Value low = b.binary("minimum", b.convert(low_f, ElementType::S64), last);
  Value high =
      b.binary("minimum", b.binary("add", low, splat(b, 1, ElementType::S64, shape)), last);
  Value weight = b.binary("subtract", src, b.convert(low, ElementType::F32));
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
  Value w0 = b.binary("subtract", splat(b, 1, low.type, low.shape), w1);
  return b.binary("add", b.binary("multiply", w0, low), b.binary("multiply", w1, high));
}

Value resample_axis_backward(Builder& b, const Value& grad, int64_t dim, int64_t in,
                             const AxisPlan& plan, Interp mode) {
  Shape shape = grad.shape;
  shape[dim] = in;
  Value zeros = splat(b, 0, grad.type, shape);
  if (mode != Interp::Linear) return combine_slices(b, zeros, dim, plan.low, grad, "add");
  Value w1 = along(b, plan.high_weight, grad, dim);
  Value w0 = b.binary("subtract", splat(b, 1, grad.type, grad.shape), w1);
  Value result = combine_slices(b, zeros, dim, plan.low, b.binary("multiply", w0, grad), "add");
  return combine_slices(b, result, dim, plan.high, b.binary("multiply", w1, grad), "add");
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
  for (int64_t i = 0; i < dims; ++i) {
    int64_t dim = 2 + i;
    AxisPlan plan = plan_axis(b, x.shape[dim], size[i], mode, align_corners,
                              optional_double(ctx.arg(scales_at + static_cast<int>(i))));
    Value wide = b.convert(x, opmath(x.type));
    x = b.convert(resample_axis(b, wide, dim, plan, mode), x.type);
  }
  return {x};
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
    AxisPlan plan = plan_axis(b, in[2 + i], out[i], mode, align_corners,
                              optional_double(ctx.arg(scales_at + static_cast<int>(i))));
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

}  // namespace
}  // namespace torch_tpu::aten
