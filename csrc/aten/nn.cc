// Neural-network layers: convolution, pooling, normalisation and losses, forward and backward.
#include <ATen/ops/native_group_norm_ops.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

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
  return {int_list(ctx, stride_index, spatial), int_list(ctx, stride_index + 1, spatial),
          int_list(ctx, stride_index + 2, spatial), ctx.arg(stride_index + 5).toInt()};
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
                          const std::vector<int64_t>& sizes, bool round = true) {
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
  // Accumulated in f32 for 16-bit floats, rounded once (unless the caller adds more first).
  Value wide = b.convolution(grad, kernel, nchw_dims(spatial), params, opmath(grad.type));
  return round ? b.convert(wide, grad.type) : wide;
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
    auto output_padding = int_list(ctx, 7, spatial);
    std::vector<int64_t> sizes;
    for (size_t i = 0; i < spatial; ++i) {
      sizes.push_back((input.shape[2 + i] - 1) * c.stride[i] - 2 * c.padding[i] +
                      c.dilation[i] * (weight.shape[2 + i] - 1) + output_padding[i] + 1);
    }
    // Kept in f32 through the bias, then rounded once: a 16-bit sum rounded before a bias that
    // cancels it loses the small result.
    out = convolve_input_grad(b, input, weight, c, sizes, /*round=*/false);
  } else {
    out = convolve(b, input, weight, c);
  }
  if (auto bias = ctx.optional_tensor(2)) {
    Shape bias_shape(out.shape.size(), 1);
    bias_shape[1] = out.shape[1];
    Value wide_bias = b.convert(b.reshape(*bias, bias_shape), out.type);
    out = b.add(out, broadcast_to(b, wide_bias, out.shape));
  }
  return Values{b.convert(out, input.type)};
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

// The [out, in] averaging matrix of adaptive pooling along one axis.
Value adaptive_matrix(Builder& b, int64_t in, int64_t out, ElementType t) {
  Shape shape{out, in};
  Value i = b.iota(shape, ElementType::S64, 0), j = b.iota(shape, ElementType::S64, 1);
  auto c = [&](int64_t v) { return splat(b, static_cast<double>(v), ElementType::S64, shape); };
  Value start = b.divide(b.multiply(i, c(in)), c(out));
  Value end = b.divide(b.add(b.multiply(b.add(i, c(1)), c(in)), c(out - 1)), c(out));
  Value inside = b.and_(b.ge(j, start), b.lt(j, end));
  Value width = b.convert(b.subtract(end, start), t);
  return b.divide(b.convert(inside, t), width);
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

// The input of an adaptive average, in a floating type: CPU has kernels for floating types
// only, yet takes an empty input of any type (and returns it empty, in its type).
Value adaptive_average_input(LoweringContext& ctx, const char* name) {
  Value x = ctx.tensor(0);
  if (hlo::is_float(x.type) || hlo::is_complex(x.type)) return x;
  TORCH_CHECK_NOT_IMPLEMENTED(ctx.tensor_meta(0).numel() == 0, "\"", name,
                              "\" not implemented for '", ctx.tensor_meta(0).scalar_type(), "'");
  return ctx.b.convert(x, ElementType::F32);
}

LOWER({"_adaptive_avg_pool2d", "_adaptive_avg_pool2d.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = adaptive_average_input(ctx, "adaptive_avg_pool2d");
  auto size = int_list(ctx, 1, 2);
  int64_t r = x.rank();
  Value mh = adaptive_matrix(b, x.shape[r - 2], size[0], x.type);
  Value mw = adaptive_matrix(b, x.shape[r - 1], size[1], x.type);
  return Values{b.convert(apply_adaptive(b, x, mh, mw, 1), et(ctx.tensor_meta(0).scalar_type()))};
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
  Value x = adaptive_average_input(ctx, "adaptive_avg_pool3d");
  auto size = int_list(ctx, 1, 3);
  int64_t r = x.rank();
  TORCH_CHECK(r == 4 || r == 5, "adaptive_avg_pool3d(): Expected 4D or 5D tensor, but got ", r,
              "D");
  std::vector<Value> matrices;
  for (int64_t i = 0; i < 3; ++i)
    matrices.push_back(adaptive_matrix(b, x.shape[r - 3 + i], size[i], x.type));
  return Values{
      b.convert(apply_adaptive_3d(b, x, matrices, 1), et(ctx.tensor_meta(0).scalar_type()))};
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
  Value mean = b.reshape(b.divide(sum(b, xf, dims), splat(b, static_cast<double>(count), acc,
                                                          out_shape_of(x.shape, dims))),
                         stat_shape);
  Value centered = b.subtract(xf, broadcast_to(b, mean, x.shape));
  Value var =
      b.reshape(b.divide(sum(b, b.multiply(centered, centered), dims),
                         splat(b, static_cast<double>(count), acc, out_shape_of(x.shape, dims))),
                stat_shape);
  Value rstd = b.rsqrt(b.add(var, splat(b, eps, acc, stat_shape)));
  Value y = b.multiply(centered, broadcast_to(b, rstd, x.shape));
  Shape param_shape(x.shape.begin() + axis, x.shape.end());
  if (auto w = ctx.optional_tensor(2))
    y = b.multiply(y, broadcast_to(b, b.convert(*w, acc), x.shape));
  if (auto bias = ctx.optional_tensor(3))
    y = b.add(y, broadcast_to(b, b.convert(*bias, acc), x.shape));
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
  Value xhat = b.multiply(b.subtract(xf, broadcast_to(b, b.convert(mean, acc), x.shape)),
                          broadcast_to(b, b.convert(rstd, acc), x.shape));
  auto weight = ctx.optional_tensor(5);
  Value gw = weight ? b.multiply(g, broadcast_to(b, b.convert(*weight, acc), x.shape)) : g;
  Shape stat = keepdim_shape(x.shape, norm_dims);
  Value n = splat(b, static_cast<double>(count), acc, stat);
  Value mean_gw = b.divide(b.reshape(sum(b, gw, norm_dims), stat), n);
  Value mean_gw_xhat = b.divide(b.reshape(sum(b, b.multiply(gw, xhat), norm_dims), stat), n);
  Value gi = b.multiply(broadcast_to(b, b.convert(rstd, acc), x.shape),
                        b.subtract(b.subtract(gw, broadcast_to(b, mean_gw, x.shape)),
                                   b.multiply(xhat, broadcast_to(b, mean_gw_xhat, x.shape))));
  Shape param_shape(x.shape.begin() + axis, x.shape.end());
  Value grad_weight = b.convert(sum(b, b.multiply(g, xhat), batch_dims), x.type);
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
  Value xhat =
      b.multiply(b.subtract(xf, broadcast_to(b, mean, grouped)), broadcast_to(b, rstd, grouped));
  auto weight = ctx.optional_tensor(4);
  Value gw = weight ? b.multiply(g, b.broadcast_in_dim(b.convert(*weight, acc), channels, {1})) : g;
  gw = b.reshape(gw, grouped);
  Value count = splat(b, static_cast<double>(grouped[2]), acc, stat);
  Value mean_gw = b.divide(b.reshape(sum(b, gw, {2}), stat), count);
  Value mean_gw_xhat = b.divide(b.reshape(sum(b, b.multiply(gw, xhat), {2}), stat), count);
  Value gi = b.multiply(broadcast_to(b, rstd, grouped),
                        b.subtract(b.subtract(gw, broadcast_to(b, mean_gw, grouped)),
                                   b.multiply(xhat, broadcast_to(b, mean_gw_xhat, grouped))));
  Value xhat_channels = b.reshape(xhat, channels);
  Value grad_weight = sum(b, b.multiply(g, xhat_channels), {0, 2});
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
    total = b.add(total, b.pad(piece, zero, low, high, interior));
  }
  return Values{total};
});

// native_group_norm runs ATen's composite kernel, which views its input as [N, G, -1]: that
// needs a contiguous input, so a channels-last one (a convolution's output, say) is made
// contiguous first, and the result goes back to the input's layout, as CPU's kernel returns it.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, c10::SymInt n, c10::SymInt c, c10::SymInt hw,
    int64_t group, double eps) {
  TORCH_CHECK(input.sym_numel() == n * c * hw, "native_group_norm: expected the input's ",
              input.sym_numel(), " elements to be N * C * HxW = ", n, " * ", c, " * ", hw);
  check_parameter_dtypes(input, {weight, bias});
  auto [out, mean, rstd] = at::_ops::native_group_norm::redispatch(
      c10::DispatchKeySet(c10::DispatchKey::CompositeExplicitAutograd), input.contiguous(), weight,
      bias, std::move(n), std::move(c), std::move(hw), group, eps);
  return {out.contiguous(input.suggest_memory_format()), mean, rstd};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("native_group_norm", &native_group_norm); }

}  // namespace
}  // namespace torch_tpu::aten
