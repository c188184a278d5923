// Neural-network layers: convolution, pooling, normalisation and losses, forward and backward.
#include <c10/util/Exception.h>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

std::vector<int64_t> ints(const LoweringContext& ctx, int index, size_t n) {
  std::vector<int64_t> v = ctx.arg(index).toIntVector();
  if (v.size() == 1 && n > 1) v.assign(n, v[0]);
  return v;
}

hlo::ConvDims nchw_dims(size_t spatial) {
  hlo::ConvDims dims;
  for (size_t i = 0; i < spatial; ++i) {
    dims.input_spatial.push_back(2 + i);
    dims.kernel_spatial.push_back(2 + i);
    dims.output_spatial.push_back(2 + i);
  }
  return dims;
}

struct ConvSetup {
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups;
};

ConvSetup conv_setup(const LoweringContext& ctx, size_t spatial, int stride_index) {
  return {ints(ctx, stride_index, spatial), ints(ctx, stride_index + 1, spatial),
          ints(ctx, stride_index + 2, spatial), ctx.arg(stride_index + 5).toInt()};
}

// The regular convolution of `input` with an OIHW `weight`.
Value convolve(Builder& b, const Value& input, const Value& weight, const ConvSetup& c) {
  size_t spatial = input.shape.size() - 2;
  hlo::ConvParams params;
  params.strides = c.stride;
  for (int64_t p : c.padding) params.padding.push_back({p, p});
  params.rhs_dilation = c.dilation;
  params.lhs_dilation.assign(spatial, 1);
  params.feature_group_count = c.groups;
  return b.convolution(input, weight, nchw_dims(spatial), params, input.type);
}

// The input gradient of convolve(input, weight) for `grad`, with spatial sizes `sizes`: the
// stride-dilated gradient convolved with the flipped, transposed kernel. (Also what a
// transposed convolution computes.)
Value convolve_input_grad(Builder& b, const Value& grad, const Value& weight, const ConvSetup& c,
                          const std::vector<int64_t>& sizes) {
  size_t spatial = grad.shape.size() - 2;
  int64_t out_channels = weight.shape[0], in_per_group = weight.shape[1];
  std::vector<int64_t> spatial_dims;
  for (size_t i = 0; i < spatial; ++i) spatial_dims.push_back(2 + i);
  Value flipped = b.reverse(weight, spatial_dims);
  // [O, I/g, k...] -> [g, O/g, I/g, k...] -> [g, I/g, O/g, k...] -> [I, O/g, k...]
  Shape grouped{c.groups, out_channels / c.groups, in_per_group};
  for (size_t i = 0; i < spatial; ++i) grouped.push_back(weight.shape[2 + i]);
  std::vector<int64_t> swap{0, 2, 1};
  for (size_t i = 0; i < spatial; ++i) swap.push_back(3 + i);
  Shape swapped_shape{in_per_group * c.groups, out_channels / c.groups};
  for (size_t i = 0; i < spatial; ++i) swapped_shape.push_back(weight.shape[2 + i]);
  Value kernel = b.reshape(b.transpose(b.reshape(flipped, grouped), swap), swapped_shape);
  hlo::ConvParams params;
  params.strides.assign(spatial, 1);
  params.lhs_dilation = c.stride;
  params.rhs_dilation = c.dilation;
  params.feature_group_count = c.groups;
  for (size_t i = 0; i < spatial; ++i) {
    int64_t k = (weight.shape[2 + i] - 1) * c.dilation[i] + 1;
    int64_t lo = k - 1 - c.padding[i];
    int64_t dilated_grad = (grad.shape[2 + i] - 1) * c.stride[i] + 1;
    int64_t hi = sizes[i] + k - 1 - dilated_grad - lo;
    params.padding.push_back({lo, hi});
  }
  // Accumulated in f32 for 16-bit floats, rounded once, as CPU does.
  return b.convert(b.convolution(grad, kernel, nchw_dims(spatial), params, opmath(grad.type)),
                   grad.type);
}

// The weight gradient (shaped `weight_shape`, OIHW) of convolve(input, weight) for `grad`:
// input (channels as batch) correlated with the gradient (batch as features).
Value convolve_weight_grad(Builder& b, const Value& input, const Value& grad,
                           const Shape& weight_shape, const ConvSetup& c) {
  size_t spatial = input.shape.size() - 2;
  hlo::ConvDims dims;
  dims.input_batch = 1;
  dims.input_feature = 0;
  dims.kernel_input_feature = 0;
  dims.kernel_output_feature = 1;
  dims.output_batch = 0;
  dims.output_feature = 1;
  for (size_t i = 0; i < spatial; ++i) {
    dims.input_spatial.push_back(2 + i);
    dims.kernel_spatial.push_back(2 + i);
    dims.output_spatial.push_back(2 + i);
  }
  hlo::ConvParams params;
  params.strides = c.dilation;
  params.rhs_dilation = c.stride;
  params.lhs_dilation.assign(spatial, 1);
  params.batch_group_count = c.groups;
  for (size_t i = 0; i < spatial; ++i) {
    int64_t lo = c.padding[i];
    int64_t dilated_grad = (grad.shape[2 + i] - 1) * c.stride[i] + 1;
    int64_t hi = (weight_shape[2 + i] - 1) * c.dilation[i] + dilated_grad - input.shape[2 + i] - lo;
    params.padding.push_back({lo, hi});
  }
  Value gw = b.convolution(input, grad, dims, params, input.type);
  // gw is [I/g, O, k...]; torch wants [O, I/g, k...].
  std::vector<int64_t> to_oi{1, 0};
  for (size_t i = 0; i < spatial; ++i) to_oi.push_back(2 + i);
  Value grad_weight = b.transpose(gw, to_oi);
  if (grad_weight.shape != weight_shape) {
    // Strides that skip trailing input positions leave the correlation one short: slice.
    Shape zeros(weight_shape.size(), 0), ones(weight_shape.size(), 1);
    grad_weight = b.slice(grad_weight, zeros, weight_shape, ones);
  }
  return grad_weight;
}

// convolution_overrideable(input, weight, bias, stride, padding, dilation, transposed,
//                          output_padding, groups). A transposed convolution (weight
// [Cin, Cout/g, k...]) is the input gradient of the regular one with that weight.
LOWER({"convolution_overrideable"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value input = ctx.tensor(0), weight = ctx.tensor(1);
  size_t spatial = input.shape.size() - 2;
  TORCH_CHECK(input.type == weight.type, "Input type (", to_scalar_type(input.type),
              ") and weight "
              "type (",
              to_scalar_type(weight.type), ") should be the same");
  ConvSetup c = conv_setup(ctx, spatial, 3);
  Value out;
  if (ctx.arg(6).toBool()) {
    auto output_padding = ints(ctx, 7, spatial);
    std::vector<int64_t> sizes;
    for (size_t i = 0; i < spatial; ++i) {
      sizes.push_back((input.shape[2 + i] - 1) * c.stride[i] - 2 * c.padding[i] +
                      c.dilation[i] * (weight.shape[2 + i] - 1) + output_padding[i] + 1);
    }
    out = convolve_input_grad(b, input, weight, c, sizes);
  } else {
    out = convolve(b, input, weight, c);
  }
  if (auto bias = ctx.optional_tensor(2)) {
    Shape bias_shape(out.shape.size(), 1);
    bias_shape[1] = out.shape[1];
    out = b.binary("add", out, broadcast_to(b, b.reshape(*bias, bias_shape), out.shape));
  }
  return Values{out};
});

// convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
//                                   transposed, output_padding, groups, output_mask)
LOWER({"convolution_backward_overrideable"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0), input = ctx.tensor(1), weight = ctx.tensor(2);
  size_t spatial = input.shape.size() - 2;
  ConvSetup c = conv_setup(ctx, spatial, 3);
  Value grad_input, grad_weight;
  if (ctx.arg(6).toBool()) {
    // y = T(x, W) is the adjoint of the regular convolution z = C(g, W): so dx = C(dy, W) and
    // dW is C's weight gradient with the roles of input and gradient exchanged.
    grad_input = convolve(b, grad, weight, c);
    grad_weight = convolve_weight_grad(b, grad, input, weight.shape, c);
    if (grad_input.shape != input.shape) {
      Shape zeros(input.shape.size(), 0), ones(input.shape.size(), 1);
      grad_input = b.slice(grad_input, zeros, input.shape, ones);
    }
  } else {
    std::vector<int64_t> sizes(input.shape.begin() + 2, input.shape.end());
    grad_input = convolve_input_grad(b, grad, weight, c, sizes);
    grad_weight = convolve_weight_grad(b, input, grad, weight.shape, c);
  }
  std::vector<int64_t> bias_dims{0};
  for (size_t i = 0; i < spatial; ++i) bias_dims.push_back(2 + i);
  Value grad_bias = sum(b, grad, bias_dims);
  return Values{grad_input, grad_weight, grad_bias};
});

Shape out_shape_of(const Shape& in, const std::vector<int64_t>& dims) {
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) == dims.end())
      out.push_back(in[d]);
  }
  return out;
}

int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t numerator = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t out = numerator / s + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)
LOWER({"max_pool2d_with_indices", "max_pool2d_with_indices.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  bool batched = x.rank() == 4;
  if (!batched) x = b.reshape(x, {1, x.shape[0], x.shape[1], x.shape[2]});
  auto k = ints(ctx, 1, 2);
  auto s = ctx.arg(2).toIntVector().empty() ? k : ints(ctx, 2, 2);
  auto p = ints(ctx, 3, 2), d = ints(ctx, 4, 2);
  bool ceil_mode = ctx.arg(5).toBool();
  int64_t H = x.shape[2], W = x.shape[3];
  int64_t oh = pool_out(H, k[0], s[0], p[0], d[0], ceil_mode),
          ow = pool_out(W, k[1], s[1], p[1], d[1], ceil_mode);
  TORCH_CHECK(oh > 0 && ow > 0, "max_pool2d: output size is too small (", oh, "x", ow, ")");
  // Pad with -inf so that the (possibly ceil-extended) windows all fit.
  int64_t need_h = (oh - 1) * s[0] + (k[0] - 1) * d[0] + 1,
          need_w = (ow - 1) * s[1] + (k[1] - 1) * d[1] + 1;
  Value padded = b.pad(
      x, b.constant(lowest(x.type), x.type), {0, 0, p[0], p[1]},
      {0, 0, std::max<int64_t>(0, need_h - H - p[0]), std::max<int64_t>(0, need_w - W - p[1])},
      {0, 0, 0, 0});
  Value best, best_index;
  Shape out_shape{x.shape[0], x.shape[1], oh, ow};
  Value row = b.iota(out_shape, ElementType::S64, 2), col = b.iota(out_shape, ElementType::S64, 3);
  for (int64_t i = 0; i < k[0]; ++i) {
    for (int64_t j = 0; j < k[1]; ++j) {
      int64_t r0 = i * d[0], c0 = j * d[1];
      Value window =
          b.slice(padded, {0, 0, r0, c0},
                  {x.shape[0], x.shape[1], r0 + (oh - 1) * s[0] + 1, c0 + (ow - 1) * s[1] + 1},
                  {1, 1, s[0], s[1]});
      // Flat input index of this tap: (oh*s - p + i*d) * W + (ow*s - p + j*d).
      Value h =
          b.binary("add", b.binary("multiply", row, splat(b, s[0], ElementType::S64, out_shape)),
                   splat(b, r0 - p[0], ElementType::S64, out_shape));
      Value w =
          b.binary("add", b.binary("multiply", col, splat(b, s[1], ElementType::S64, out_shape)),
                   splat(b, c0 - p[1], ElementType::S64, out_shape));
      Value index =
          b.binary("add", b.binary("multiply", h, splat(b, W, ElementType::S64, out_shape)), w);
      if (!best.name.size()) {
        best = window;
        best_index = index;
        continue;
      }
      Value better = b.compare("GT", window, best);
      if (hlo::is_float(x.type))
        better = b.binary("or", better,
                          b.binary("and", is_nan(b, window), b.unary("not", is_nan(b, best))));
      best = b.select(better, window, best);
      best_index = b.select(better, index, best_index);
    }
  }
  if (!batched) {
    best = b.reshape(best, {best.shape[1], oh, ow});
    best_index = b.reshape(best_index, {best.shape[0], oh, ow});
  }
  return Values{best, best_index};
});

// max_pool2d_with_indices_backward(grad_output, self, kernel, stride, padding, dilation,
//                                  ceil_mode, indices): scatter-add into the argmax positions.
LOWER({"max_pool2d_with_indices_backward", "max_pool2d_with_indices_backward.grad_input"},
      [](LoweringContext& ctx) {
        Builder& b = ctx.b;
        Value grad = ctx.tensor(0), self = ctx.tensor(1), indices = ctx.tensor(7);
        Shape original = self.shape;
        int64_t planes = hlo::num_elements(self.shape) /
                         (self.shape[self.rank() - 2] * self.shape[self.rank() - 1]);
        int64_t hw = self.shape[self.rank() - 2] * self.shape[self.rank() - 1];
        int64_t ohw = hlo::num_elements(grad.shape) / planes;
        Value g = b.reshape(grad, {planes, ohw});
        Value idx = b.reshape(indices, {planes, ohw});
        Value plane = b.iota({planes, ohw}, ElementType::S64, 0);
        Value coords = b.concatenate(
            {b.reshape(plane, {planes, ohw, 1}), b.reshape(idx, {planes, ohw, 1})}, 2);
        hlo::ScatterDims dims;
        dims.inserted_window_dims = {0, 1};
        dims.scatter_dims_to_operand_dims = {0, 1};
        dims.index_vector_dim = 2;
        Value out = b.scatter(splat(b, 0, grad.type, {planes, hw}), coords, g, dims,
                              [](Builder& r, const std::vector<Value>& a) {
                                return std::vector<Value>{r.binary("add", a[0], a[1])};
                              });
        return Values{b.reshape(out, original)};
      });

// Divisors of avg_pool2d per output position, as torch computes them.
Value avg_divisor(Builder& b, const Shape& in4, const std::vector<int64_t>& k,
                  const std::vector<int64_t>& s, const std::vector<int64_t>& p, int64_t oh,
                  int64_t ow, bool count_include_pad, ElementType t) {
  int64_t H = in4[2], W = in4[3];
  Shape plane{1, 1, H, W};
  Value ones = splat(b, 1, t, plane);
  Value padded = b.pad(ones, b.constant(count_include_pad ? 1.0 : 0.0, t), {0, 0, p[0], p[1]},
                       {0, 0, p[0], p[1]}, {0, 0, 0, 0});
  int64_t need_h = (oh - 1) * s[0] + k[0], need_w = (ow - 1) * s[1] + k[1];
  Value extended = b.pad(padded, b.constant(0.0, t), {0, 0, 0, 0},
                         {0, 0, std::max<int64_t>(0, need_h - H - 2 * p[0]),
                          std::max<int64_t>(0, need_w - W - 2 * p[1])},
                         {0, 0, 0, 0});
  return b.reduce_window(extended, b.constant(0.0, t), {1, 1, k[0], k[1]}, {1, 1, s[0], s[1]},
                         {1, 1, 1, 1}, {1, 1, 1, 1}, {{0, 0}, {0, 0}, {0, 0}, {0, 0}}, "add");
}

struct AvgPoolArgs {
  std::vector<int64_t> k, s, p;
  bool ceil_mode, count_include_pad;
  std::optional<int64_t> divisor_override;
};

AvgPoolArgs avg_args(const LoweringContext& ctx, int first) {
  AvgPoolArgs a;
  a.k = ints(ctx, first, 2);
  a.s = ctx.arg(first + 1).toIntVector().empty() ? a.k : ints(ctx, first + 1, 2);
  a.p = ints(ctx, first + 2, 2);
  a.ceil_mode = ctx.arg(first + 3).toBool();
  a.count_include_pad = ctx.arg(first + 4).toBool();
  if (!ctx.arg(first + 5).isNone()) a.divisor_override = ctx.arg(first + 5).toInt();
  return a;
}

LOWER({"avg_pool2d", "avg_pool2d.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  bool batched = x.rank() == 4;
  if (!batched) x = b.reshape(x, {1, x.shape[0], x.shape[1], x.shape[2]});
  AvgPoolArgs a = avg_args(ctx, 1);
  int64_t H = x.shape[2], W = x.shape[3];
  int64_t oh = pool_out(H, a.k[0], a.s[0], a.p[0], 1, a.ceil_mode),
          ow = pool_out(W, a.k[1], a.s[1], a.p[1], 1, a.ceil_mode);
  int64_t need_h = (oh - 1) * a.s[0] + a.k[0], need_w = (ow - 1) * a.s[1] + a.k[1];
  Value sums = b.reduce_window(x, b.constant(0.0, x.type), {1, 1, a.k[0], a.k[1]},
                               {1, 1, a.s[0], a.s[1]}, {1, 1, 1, 1}, {1, 1, 1, 1},
                               {{0, 0},
                                {0, 0},
                                {a.p[0], std::max<int64_t>(a.p[0], need_h - H - a.p[0])},
                                {a.p[1], std::max<int64_t>(a.p[1], need_w - W - a.p[1])}},
                               "add");
  sums = b.slice(sums, {0, 0, 0, 0}, {x.shape[0], x.shape[1], oh, ow}, {1, 1, 1, 1});
  Value divisor = a.divisor_override
                      ? splat(b, static_cast<double>(*a.divisor_override), x.type, {1, 1, oh, ow})
                      : avg_divisor(b, x.shape, a.k, a.s, a.p, oh, ow, a.count_include_pad, x.type);
  divisor = b.slice(divisor, {0, 0, 0, 0}, {1, 1, oh, ow}, {1, 1, 1, 1});
  Value out = b.binary("divide", sums, broadcast_to(b, divisor, sums.shape));
  if (!batched) out = b.reshape(out, {out.shape[1], oh, ow});
  return Values{out};
});

// avg_pool2d_backward(grad_output, self, kernel, stride, padding, ceil_mode, count_include_pad,
//                     divisor_override): spread each gradient over its window.
LOWER({"avg_pool2d_backward", "avg_pool2d_backward.grad_input"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0), self = ctx.tensor(1);
  Shape original = self.shape;
  if (self.rank() == 3) {
    self = b.reshape(self, {1, self.shape[0], self.shape[1], self.shape[2]});
    grad = b.reshape(grad, {1, grad.shape[0], grad.shape[1], grad.shape[2]});
  }
  AvgPoolArgs a = avg_args(ctx, 2);
  int64_t H = self.shape[2], W = self.shape[3], oh = grad.shape[2], ow = grad.shape[3];
  Value divisor =
      a.divisor_override
          ? splat(b, static_cast<double>(*a.divisor_override), grad.type, {1, 1, oh, ow})
          : b.slice(
                avg_divisor(b, self.shape, a.k, a.s, a.p, oh, ow, a.count_include_pad, grad.type),
                {0, 0, 0, 0}, {1, 1, oh, ow}, {1, 1, 1, 1});
  Value scaled = b.binary("divide", grad, broadcast_to(b, divisor, grad.shape));
  // Transpose of the strided window sum: dilate by the stride, pad by k-1-p, sum windows.
  int64_t lo_h = a.k[0] - 1 - a.p[0], lo_w = a.k[1] - 1 - a.p[1];
  int64_t hi_h = H + a.k[0] - 1 - lo_h - ((oh - 1) * a.s[0] + 1);
  int64_t hi_w = W + a.k[1] - 1 - lo_w - ((ow - 1) * a.s[1] + 1);
  Value spread = b.pad(scaled, b.constant(0.0, grad.type), {0, 0, lo_h, lo_w}, {0, 0, hi_h, hi_w},
                       {0, 0, a.s[0] - 1, a.s[1] - 1});
  Value out =
      b.reduce_window(spread, b.constant(0.0, grad.type), {1, 1, a.k[0], a.k[1]}, {1, 1, 1, 1},
                      {1, 1, 1, 1}, {1, 1, 1, 1}, {{0, 0}, {0, 0}, {0, 0}, {0, 0}}, "add");
  return Values{b.reshape(out, original)};
});

// The [out, in] averaging matrix of adaptive pooling along one axis.
Value adaptive_matrix(Builder& b, int64_t in, int64_t out, ElementType t) {
  Shape shape{out, in};
  Value i = b.iota(shape, ElementType::S64, 0), j = b.iota(shape, ElementType::S64, 1);
  auto c = [&](int64_t v) { return splat(b, static_cast<double>(v), ElementType::S64, shape); };
  Value start = b.binary("divide", b.binary("multiply", i, c(in)), c(out));
  Value end = b.binary(
      "divide", b.binary("add", b.binary("multiply", b.binary("add", i, c(1)), c(in)), c(out - 1)),
      c(out));
  Value inside = b.binary("and", b.compare("GE", j, start), b.compare("LT", j, end));
  Value width = b.convert(b.binary("subtract", end, start), t);
  return b.binary("divide", b.convert(inside, t), width);
}

// Applies the averaging matrices over the last two dims of `x`: out = mh x mw^T. Forward
// contracts the input sizes (matrix dim 1); backward, with the same matrices, the output sizes
// (matrix dim 0), which is the transpose.
Value apply_adaptive(Builder& b, const Value& x, const Value& mh, const Value& mw,
                     int64_t contracted_dim) {
  int64_t r = x.rank();
  Value along_w = b.dot_general(x, mw, {}, {}, {r - 1}, {contracted_dim}, x.type);  // [..., h, w']
  Value along_h =
      b.dot_general(along_w, mh, {}, {}, {r - 2}, {contracted_dim}, x.type);  // [..., w', h']
  std::vector<int64_t> permutation;
  for (int64_t d = 0; d < r - 2; ++d) permutation.push_back(d);
  permutation.push_back(r - 1);
  permutation.push_back(r - 2);
  return b.transpose(along_h, permutation);
}

LOWER({"_adaptive_avg_pool2d", "_adaptive_avg_pool2d.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  auto size = ints(ctx, 1, 2);
  int64_t r = x.rank();
  Value mh = adaptive_matrix(b, x.shape[r - 2], size[0], x.type);
  Value mw = adaptive_matrix(b, x.shape[r - 1], size[1], x.type);
  return Values{apply_adaptive(b, x, mh, mw, 1)};
});
LOWER({"_adaptive_avg_pool2d_backward", "_adaptive_avg_pool2d_backward.out"},
      [](LoweringContext& ctx) {
        Builder& b = ctx.b;
        Value grad = ctx.tensor(0), self = ctx.tensor(1);
        int64_t r = self.rank();
        Value mh = adaptive_matrix(b, self.shape[r - 2], grad.shape[r - 2], grad.type);
        Value mw = adaptive_matrix(b, self.shape[r - 1], grad.shape[r - 1], grad.type);
        return Values{apply_adaptive(b, grad, mh, mw, 0)};
      });

// Adaptive average pooling over the last three dims: each contraction moves its axis last, so
// three in a row restore the order.
Value apply_adaptive_3d(Builder& b, Value x, const std::vector<Value>& matrices,
                        int64_t contracted_dim) {
  int64_t r = x.rank();
  for (const Value& m : matrices)
    x = b.dot_general(x, m, {}, {}, {r - 3}, {contracted_dim}, x.type);
  return x;
}

LOWER({"_adaptive_avg_pool3d", "_adaptive_avg_pool3d.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  auto size = ints(ctx, 1, 3);
  int64_t r = x.rank();
  TORCH_CHECK(r == 4 || r == 5, "adaptive_avg_pool3d(): Expected 4D or 5D tensor, but got ", r,
              "D");
  std::vector<Value> matrices;
  for (int64_t i = 0; i < 3; ++i)
    matrices.push_back(adaptive_matrix(b, x.shape[r - 3 + i], size[i], x.type));
  return Values{apply_adaptive_3d(b, x, matrices, 1)};
});
LOWER({"_adaptive_avg_pool3d_backward", "_adaptive_avg_pool3d_backward.grad_input"},
      [](LoweringContext& ctx) {
        Builder& b = ctx.b;
        Value grad = ctx.tensor(0), self = ctx.tensor(1);
        int64_t r = self.rank();
        std::vector<Value> matrices;
        for (int64_t i = 0; i < 3; ++i) {
          matrices.push_back(
              adaptive_matrix(b, self.shape[r - 3 + i], grad.shape[r - 3 + i], grad.type));
        }
        return Values{apply_adaptive_3d(b, grad, matrices, 0)};
      });

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
LOWER({"native_layer_norm", "native_layer_norm.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  int64_t axis = x.rank() - static_cast<int64_t>(ctx.arg(1).toIntVector().size());
  TORCH_CHECK(axis >= 0, "layer_norm: normalized_shape has more dims than the input");
  double eps = ctx.arg(4).toDouble();
  ElementType acc =
      (x.type == ElementType::F16 || x.type == ElementType::BF16) ? ElementType::F32 : x.type;
  Value xf = b.convert(x, acc);
  std::vector<int64_t> dims;
  int64_t count = 1;
  for (int64_t d = axis; d < x.rank(); ++d) {
    dims.push_back(d);
    count *= x.shape[d];
  }
  Shape stat_shape = keepdim_shape(x.shape, dims);
  Value mean =
      b.reshape(b.binary("divide", sum(b, xf, dims),
                         splat(b, static_cast<double>(count), acc, out_shape_of(x.shape, dims))),
                stat_shape);
  Value centered = b.binary("subtract", xf, broadcast_to(b, mean, x.shape));
  Value var =
      b.reshape(b.binary("divide", sum(b, b.binary("multiply", centered, centered), dims),
                         splat(b, static_cast<double>(count), acc, out_shape_of(x.shape, dims))),
                stat_shape);
  Value rstd = b.unary("rsqrt", b.binary("add", var, splat(b, eps, acc, stat_shape)));
  Value y = b.binary("multiply", centered, broadcast_to(b, rstd, x.shape));
  Shape param_shape(x.shape.begin() + axis, x.shape.end());
  if (auto w = ctx.optional_tensor(2))
    y = b.binary("multiply", y, broadcast_to(b, b.convert(*w, acc), x.shape));
  if (auto bias = ctx.optional_tensor(3))
    y = b.binary("add", y, broadcast_to(b, b.convert(*bias, acc), x.shape));
  return Values{b.convert(y, x.type), b.convert(mean, x.type), b.convert(rstd, x.type)};
});

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
//                            output_mask) -> (grad_input, grad_weight, grad_bias)
LOWER({"native_layer_norm_backward", "native_layer_norm_backward.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0), x = ctx.tensor(1), mean = ctx.tensor(3), rstd = ctx.tensor(4);
  int64_t axis = x.rank() - static_cast<int64_t>(ctx.arg(2).toIntVector().size());
  ElementType acc =
      (x.type == ElementType::F16 || x.type == ElementType::BF16) ? ElementType::F32 : x.type;
  std::vector<int64_t> norm_dims, batch_dims;
  int64_t count = 1;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d >= axis) {
      norm_dims.push_back(d);
      count *= x.shape[d];
    } else {
      batch_dims.push_back(d);
    }
  }
  Value g = b.convert(grad, acc), xf = b.convert(x, acc);
  Value xhat =
      b.binary("multiply", b.binary("subtract", xf, broadcast_to(b, b.convert(mean, acc), x.shape)),
               broadcast_to(b, b.convert(rstd, acc), x.shape));
  auto weight = ctx.optional_tensor(5);
  Value gw =
      weight ? b.binary("multiply", g, broadcast_to(b, b.convert(*weight, acc), x.shape)) : g;
  Shape stat = keepdim_shape(x.shape, norm_dims);
  Value n = splat(b, static_cast<double>(count), acc, stat);
  Value mean_gw = b.binary("divide", b.reshape(sum(b, gw, norm_dims), stat), n);
  Value mean_gw_xhat =
      b.binary("divide", b.reshape(sum(b, b.binary("multiply", gw, xhat), norm_dims), stat), n);
  Value gi =
      b.binary("multiply", broadcast_to(b, b.convert(rstd, acc), x.shape),
               b.binary("subtract", b.binary("subtract", gw, broadcast_to(b, mean_gw, x.shape)),
                        b.binary("multiply", xhat, broadcast_to(b, mean_gw_xhat, x.shape))));
  Shape param_shape(x.shape.begin() + axis, x.shape.end());
  Value grad_weight = b.convert(sum(b, b.binary("multiply", g, xhat), batch_dims), x.type);
  Value grad_bias = b.convert(sum(b, g, batch_dims), x.type);
  return Values{b.convert(gi, x.type), b.reshape(grad_weight, param_shape),
                b.reshape(grad_bias, param_shape)};
});

// native_group_norm_backward(grad_out, input, mean [N, G], rstd [N, G], weight?, N, C, HxW,
// group, output_mask) -> (grad_input, grad_weight, grad_bias): layer norm's backward over each
// group's C/G * HxW values, with the per-channel weight applied first.
LOWER({"native_group_norm_backward", "native_group_norm_backward.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0), x = ctx.tensor(1);
  int64_t n = ctx.arg(5).toInt(), c = ctx.arg(6).toInt(), hw = ctx.arg(7).toInt();
  int64_t groups = ctx.arg(8).toInt();
  ElementType acc =
      (x.type == ElementType::F16 || x.type == ElementType::BF16) ? ElementType::F32 : x.type;
  Shape channels{n, c, hw}, grouped{n, groups, (c / groups) * hw}, stat{n, groups, 1};
  Value g = b.reshape(b.convert(grad, acc), channels);
  Value xf = b.reshape(b.convert(x, acc), grouped);
  Value mean = b.reshape(b.convert(ctx.tensor(2), acc), stat);
  Value rstd = b.reshape(b.convert(ctx.tensor(3), acc), stat);
  Value xhat = b.binary("multiply", b.binary("subtract", xf, broadcast_to(b, mean, grouped)),
                        broadcast_to(b, rstd, grouped));
  auto weight = ctx.optional_tensor(4);
  Value gw =
      weight ? b.binary("multiply", g, b.broadcast_in_dim(b.convert(*weight, acc), channels, {1}))
             : g;
  gw = b.reshape(gw, grouped);
  Value count = splat(b, static_cast<double>(grouped[2]), acc, stat);
  Value mean_gw = b.binary("divide", b.reshape(sum(b, gw, {2}), stat), count);
  Value mean_gw_xhat =
      b.binary("divide", b.reshape(sum(b, b.binary("multiply", gw, xhat), {2}), stat), count);
  Value gi =
      b.binary("multiply", broadcast_to(b, rstd, grouped),
               b.binary("subtract", b.binary("subtract", gw, broadcast_to(b, mean_gw, grouped)),
                        b.binary("multiply", xhat, broadcast_to(b, mean_gw_xhat, grouped))));
  Value xhat_channels = b.reshape(xhat, channels);
  Value grad_weight = sum(b, b.binary("multiply", g, xhat_channels), {0, 2});
  Value grad_bias = sum(b, g, {0, 2});
  return Values{b.reshape(b.convert(gi, x.type), x.shape), b.convert(grad_weight, x.type),
                b.convert(grad_bias, x.type)};
});

// unfold_backward(grad [.., windows, .., size], input_sizes, dim, size, step): each window's
// gradient added back at the positions it was read from.
LOWER({"unfold_backward", "unfold_backward.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0);
  Shape input_shape = ctx.arg(1).toIntVector();
  int64_t rank = static_cast<int64_t>(input_shape.size());
  int64_t dim = rank == 0 ? 0 : wrap_dim(ctx.arg(2).toInt(), rank);
  int64_t size = ctx.arg(3).toInt(), step = ctx.arg(4).toInt();
  if (rank == 0) return Values{b.reshape(grad, {})};
  int64_t windows = grad.shape[dim];
  Value total = splat(b, 0, grad.type, input_shape);
  for (int64_t k = 0; k < size; ++k) {
    // The k-th element of every window: grad[..., :, ..., k] lands at k + w * step.
    std::vector<int64_t> start(grad.rank(), 0), limit(grad.shape.begin(), grad.shape.end()),
        strides(grad.rank(), 1);
    start[grad.rank() - 1] = k;
    limit[grad.rank() - 1] = k + 1;
    Value piece = b.reshape(b.slice(grad, start, limit, strides),
                            Shape(grad.shape.begin(), grad.shape.end() - 1));
    // Spread the windows `step` apart (interior padding), then shift by k.
    std::vector<int64_t> low(rank, 0), high(rank, 0), interior(rank, 0);
    interior[dim] = step - 1;
    low[dim] = k;
    high[dim] = input_shape[dim] - (k + (windows - 1) * step + 1);
    Value zero = b.constant(0, grad.type);
    if (windows == 0) continue;
    total = b.binary("add", total, b.pad(piece, zero, low, high, interior));
  }
  return Values{total};
});

}  // namespace
}  // namespace torch_tpu::aten
