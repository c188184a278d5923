// Losses: nll_loss (what cross_entropy lowers to), mse_loss, binary_cross_entropy, smooth_l1
// and huber, forward and backward.
#include <c10/util/Exception.h>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

constexpr int64_t kReductionNone = 0, kReductionMean = 1;

// Per-sample picked log-probabilities and weights of nll_loss; self is [N, C] or [C].
struct NllTerms {
  Value dot;      // [N]: w[t] * self[n, t], 0 where ignored
  Value picked;   // [N]: -dot
  Value weights;  // [N]: w[t], 0 where ignored
  Value onehot;   // [N, C]: w[t] where class == t
};

NllTerms nll_terms(LoweringContext& ctx, const Value& self2d, const Value& target_values,
                   int weight_index, int ignore_index_arg) {
  Builder& b = ctx.b;
  int64_t n = self2d.shape[0], c = self2d.shape[1];
  Value target = b.reshape(b.convert(target_values, ElementType::S64), {n});
  int64_t ignore = ctx.arg(ignore_index_arg).toInt();
  check_index_range(b, target, 0, c, ignore);
  Value classes = b.iota({n, c}, ElementType::S64, 1);
  Value hit = b.eq(classes, b.broadcast_in_dim(target, {n, c}, {0}));
  Value class_weight = splat(b, 1, self2d.type, {n, c});
  if (auto w = ctx.optional_tensor(weight_index))
    class_weight = b.broadcast_in_dim(b.convert(*w, self2d.type), {n, c}, {1});
  Value valid = b.ne(target, splat(b, static_cast<double>(ignore), ElementType::S64, {n}));
  Value valid2d = b.broadcast_in_dim(valid, {n, c}, {0});
  Value zero = splat(b, 0, self2d.type, {n, c});
  Value onehot = b.select(b.and_(hit, valid2d), class_weight, zero);
  NllTerms terms;
  terms.onehot = onehot;
  terms.weights = sum(b, onehot, {1});
  terms.dot = sum(b, b.multiply(onehot, self2d), {1});
  terms.picked = b.negate(terms.dot);
  return terms;
}

// nll_loss(2d)_forward's (output, total_weight) over samples `flat` [n, C]; the arguments
// (target, weight?, reduction, ignore_index) sit at positions 1-4 in both schemas.
Values nll_forward(LoweringContext& ctx, const Value& flat, const Shape& unreduced_shape) {
  Builder& b = ctx.b;
  NllTerms t = nll_terms(ctx, flat, ctx.tensor(1), 2, 4);
  int64_t reduction = ctx.arg(3).toInt();
  Value total_weight = sum(b, t.weights, {0});
  if (reduction == kReductionNone) return {b.reshape(t.picked, unreduced_shape), total_weight};
  // CPU subtracts each term from a zero accumulator, so a loss of zero is +0; the sum of the
  // negated terms would be -0 (XLA drops the zero init of a one-sample sum), which prints as
  // "-0.0000e+00" where CPU prints "0.0000e+00".
  Value total = b.subtract(splat(b, 0, flat.type, {}), sum(b, t.dot, {0}));
  if (reduction == kReductionMean) total = b.divide(total, total_weight);
  return {total, total_weight};
}

// The gradient [n, C] over samples `flat`; (grad_output, self, target, weight?, reduction,
// ignore_index, total_weight) sit at the same positions in both backward schemas.
Value nll_backward(LoweringContext& ctx, const Value& flat) {
  Builder& b = ctx.b;
  NllTerms t = nll_terms(ctx, flat, ctx.tensor(2), 3, 5);
  Value grad = ctx.tensor(0);
  int64_t reduction = ctx.arg(4).toInt();
  Value scale;
  if (reduction == kReductionNone) {
    scale = b.broadcast_in_dim(b.reshape(grad, {flat.shape[0]}), flat.shape, {0});
  } else {
    Value g = b.reshape(grad, {});
    if (reduction == kReductionMean) g = b.divide(g, b.reshape(ctx.tensor(6), {}));
    scale = broadcast_to(b, g, flat.shape);
  }
  return b.negate(b.multiply(t.onehot, scale));
}

// nll_loss_forward(self, target, weight?, reduction, ignore_index) -> (output, total_weight)
LOWER({"nll_loss_forward", "nll_loss_forward.output"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value self = ctx.tensor(0);
  TORCH_CHECK(self.rank() == 1 || self.rank() == 2, "input tensor should be 1D or 2D");
  const at::Tensor& target = ctx.tensor_meta(1);
  TORCH_CHECK(target.dim() <= 1, "0D or 1D target tensor expected, multi-target not supported");
  int64_t batch = self.rank() == 2 ? self.shape[0] : 1;
  TORCH_CHECK(target.numel() == batch, "Expected input batch_size (", batch,
              ") to match target batch_size (", target.numel(), ").");
  Value self2d = self.rank() == 2 ? self : b.reshape(self, {1, self.shape[0]});
  return nll_forward(ctx, self2d, self.rank() == 2 ? Shape{self.shape[0]} : Shape{});
});

// nll_loss_backward(grad_output, self, target, weight?, reduction, ignore_index, total_weight)
LOWER({"nll_loss_backward", "nll_loss_backward.grad_input"}, [](LoweringContext& ctx) {
  Value self = ctx.tensor(1);
  Value self2d = self.rank() == 2 ? self : ctx.b.reshape(self, {1, self.shape[0]});
  return Values{ctx.b.reshape(nll_backward(ctx, self2d), self.shape)};
});

// [N, C, d...] -> [N * d..., C]: spatial positions become samples.
Value samples_by_class(Builder& b, const Value& self) {
  std::vector<int64_t> permutation{0};
  for (int64_t d = 2; d < self.rank(); ++d) permutation.push_back(d);
  permutation.push_back(1);
  int64_t c = self.shape[1];
  return b.reshape(b.transpose(self, permutation), {hlo::num_elements(self.shape) / c, c});
}

// nll_loss2d_forward(self [N, C, H, W], target [N, H, W], weight?, reduction, ignore_index)
LOWER({"nll_loss2d_forward", "nll_loss2d_forward.output"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value self = ctx.tensor(0);
  TORCH_CHECK(self.rank() == 4,
              "only batches of spatial inputs supported (4D tensors), but got "
              "input of size: [",
              hlo::join(self.shape), "]");
  const at::Tensor& target = ctx.tensor_meta(1);
  TORCH_CHECK(target.dim() == 3 && target.size(0) == self.shape[0] &&
                  target.size(1) == self.shape[2] && target.size(2) == self.shape[3],
              "only batches of spatial targets supported (3D tensors) matching the input");
  return nll_forward(ctx, samples_by_class(b, self), {self.shape[0], self.shape[2], self.shape[3]});
});

// nll_loss2d_backward(grad_output, self, target, weight?, reduction, ignore_index, total_weight)
LOWER({"nll_loss2d_backward", "nll_loss2d_backward.grad_input"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value self = ctx.tensor(1);
  Value out = nll_backward(ctx, samples_by_class(b, self));
  // [N*H*W, C] -> [N, H, W, C] -> [N, C, H, W]
  Value nhwc = b.reshape(out, {self.shape[0], self.shape[2], self.shape[3], self.shape[1]});
  return Values{b.transpose(nhwc, {0, 3, 1, 2})};
});

Value reduce_loss(Builder& b, const Value& loss, int64_t reduction) {
  if (reduction == kReductionNone) return loss;
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < loss.rank(); ++d) dims.push_back(d);
  Value total = sum(b, loss, dims);
  if (reduction == kReductionMean) {
    total =
        b.divide(total, b.constant(static_cast<double>(hlo::num_elements(loss.shape)), loss.type));
  }
  return total;
}

LOWER({"mse_loss", "mse_loss.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(promoted_type(ctx, {0, 1}));
  Value diff = b.subtract(operand(ctx, 0, t, shape), operand(ctx, 1, t, shape));
  return Values{reduce_loss(b, b.multiply(diff, diff), ctx.arg(2).toInt())};
});
LOWER({"mse_loss_backward", "mse_loss_backward.grad_input"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Shape shape = operand_shape(ctx, {1, 2});
  ElementType t = et(promoted_type(ctx, {1, 2}));
  Value diff = b.subtract(operand(ctx, 1, t, shape), operand(ctx, 2, t, shape));
  double factor = ctx.arg(3).toInt() == kReductionMean ? 2.0 / hlo::num_elements(shape) : 2.0;
  Value g = broadcast_to(b, b.convert(ctx.tensor(0), t), shape);
  return Values{b.multiply(b.multiply(diff, splat(b, factor, t, shape)), g)};
});

// The upstream gradient of a reduced loss, broadcast over the elements, with mean's 1/N.
Value loss_grad(Builder& b, const Value& grad, int64_t reduction, ElementType t,
                const Shape& shape) {
  Value g = broadcast_to(b, b.convert(grad, t), shape);
  if (reduction != kReductionMean) return g;
  return b.divide(g, splat(b, static_cast<double>(hlo::num_elements(shape)), t, shape));
}

// binary_cross_entropy(self, target, weight?, reduction): -w (t log x + (1 - t) log(1 - x)),
// each log clamped at -100 as on CPU.
LOWER({"binary_cross_entropy", "binary_cross_entropy.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x0 = ctx.tensor(0);
  ElementType m = opmath(x0.type);
  Value x = b.convert(x0, m), t = as(b, ctx.tensor(1), m, x.shape);
  Value floor = splat(b, -100, m, x.shape), one = splat(b, 1, m, x.shape);
  // CPU checks every input (NaN fails too); here the device does, raising at the next sync.
  b.check_at_runtime(all_of(b, b.and_(b.ge(x, splat(b, 0, m, x.shape)), b.le(x, one))),
                     Builder::CheckKind::RaisesRuntimeError,
                     "an input outside [0, 1] (all elements of input should be between 0 and 1)");
  Value log_x = extremum(b, BinaryOp::Maximum, b.log(x), floor);
  Value log_1mx = extremum(b, BinaryOp::Maximum, b.log(b.subtract(one, x)), floor);
  Value loss = b.negate(b.add(b.multiply(t, log_x), b.multiply(b.subtract(one, t), log_1mx)));
  if (auto w = ctx.optional_tensor(2)) loss = b.multiply(loss, as(b, *w, m, x.shape));
  return Values{b.convert(reduce_loss(b, loss, ctx.arg(3).toInt()), x0.type)};
});
// binary_cross_entropy_backward(grad, self, target, weight?, reduction):
// grad w (x - t) / max(x (1 - x), 1e-12).
LOWER({"binary_cross_entropy_backward", "binary_cross_entropy_backward.grad_input"},
      [](LoweringContext& ctx) {
        Builder& b = ctx.b;
        Value x0 = ctx.tensor(1);
        ElementType m = opmath(x0.type);
        Value x = b.convert(x0, m), t = as(b, ctx.tensor(2), m, x.shape);
        Value one = splat(b, 1, m, x.shape);
        Value denominator = extremum(b, BinaryOp::Maximum, b.multiply(x, b.subtract(one, x)),
                                     splat(b, 1e-12, m, x.shape));
        Value r = b.divide(b.subtract(x, t), denominator);
        if (auto w = ctx.optional_tensor(3)) r = b.multiply(r, as(b, *w, m, x.shape));
        r = b.multiply(r, loss_grad(b, ctx.tensor(0), ctx.arg(4).toInt(), m, x.shape));
        return Values{b.convert(r, x0.type)};
      });

// smooth_l1_loss(self, target, reduction, beta): 0.5 d^2 / beta where |d| < beta, else
// |d| - beta / 2; huber_loss(self, target, reduction, delta): 0.5 d^2 where |d| < delta, else
// delta (|d| - delta / 2).
Values piecewise_loss(LoweringContext& ctx, bool huber) {
  Builder& b = ctx.b;
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType m = opmath(et(promoted_type(ctx, {0, 1})));
  // As on CPU, huber_loss writes into a tensor like `self` (computed in the promoted type);
  // smooth_l1_loss returns the promoted type.
  ElementType t = huber ? et(ctx.tensor_meta(0).scalar_type()) : et(promoted_type(ctx, {0, 1}));
  Value d = b.subtract(operand(ctx, 0, m, shape), operand(ctx, 1, m, shape));
  Value z = b.abs(d);
  double k = ctx.arg(3).toDouble();
  Value kv = splat(b, k, m, shape), half = splat(b, 0.5, m, shape);
  Value square = b.multiply(half, b.multiply(z, z));
  Value linear = b.subtract(z, b.multiply(half, kv));
  Value loss;
  if (huber) {
    loss = b.select(b.lt(z, kv), square, b.multiply(kv, linear));
  } else if (k == 0) {
    loss = z;
  } else {
    loss = b.select(b.lt(z, kv), b.divide(square, kv), linear);
  }
  return {b.convert(reduce_loss(b, loss, ctx.arg(2).toInt()), t)};
}
// The gradients: d clamped to [-k, k], divided by beta for smooth_l1 (sign(d) when beta is 0).
Values piecewise_loss_backward(LoweringContext& ctx, bool huber) {
  Builder& b = ctx.b;
  Shape shape = operand_shape(ctx, {1, 2});
  ElementType t = et(promoted_type(ctx, {1, 2})), m = opmath(t);
  Value d = b.subtract(operand(ctx, 1, m, shape), operand(ctx, 2, m, shape));
  double k = ctx.arg(4).toDouble();
  Value slope;
  if (!huber && k == 0) {
    slope = b.sign(d);
  } else {
    slope = b.clamp(splat(b, -k, m, shape), d, splat(b, k, m, shape));
    if (!huber) slope = b.divide(slope, splat(b, k, m, shape));
  }
  Value g = loss_grad(b, ctx.tensor(0), ctx.arg(3).toInt(), m, shape);
  return {b.convert(b.multiply(slope, g), t)};
}
LOWER({"smooth_l1_loss", "smooth_l1_loss.out"},
      [](LoweringContext& ctx) { return piecewise_loss(ctx, false); });
LOWER({"smooth_l1_loss_backward", "smooth_l1_loss_backward.grad_input"},
      [](LoweringContext& ctx) { return piecewise_loss_backward(ctx, false); });
LOWER({"huber_loss", "huber_loss.out"},
      [](LoweringContext& ctx) { return piecewise_loss(ctx, true); });
LOWER({"huber_loss_backward", "huber_loss_backward.out"},
      [](LoweringContext& ctx) { return piecewise_loss_backward(ctx, true); });

Value classify_real(Builder& b, const Value& x, bool positive, bool negative, bool finite) {
  if (!hlo::is_float(x.type)) return splat(b, finite ? 1 : 0, ElementType::Pred, x.shape);
  if (finite) {
    Value a = b.abs(x);
    return b.lt(a, splat(b, INFINITY, x.type, x.shape));
  }
  Value pos = b.eq(x, splat(b, INFINITY, x.type, x.shape));
  Value neg = b.eq(x, splat(b, -INFINITY, x.type, x.shape));
  if (positive && negative) return b.or_(pos, neg);
  return positive ? pos : neg;
}

// isinf/isfinite of a complex number look at both parts: infinite if either is, finite if
// both are.
Values classify(LoweringContext& ctx, bool positive, bool negative, bool finite) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  if (!hlo::is_complex(x.type)) return {classify_real(b, x, positive, negative, finite)};
  Value re = classify_real(b, b.real(x), positive, negative, finite);
  Value im = classify_real(b, b.imag(x), positive, negative, finite);
  return {b.binary(finite ? BinaryOp::And : BinaryOp::Or, re, im)};
}
LOWER({"isinf"}, [](LoweringContext& ctx) { return classify(ctx, true, true, false); });
LOWER({"isposinf", "isposinf.out"},
      [](LoweringContext& ctx) { return classify(ctx, true, false, false); });
LOWER({"isneginf", "isneginf.out"},
      [](LoweringContext& ctx) { return classify(ctx, false, true, false); });
LOWER({"isfinite"}, [](LoweringContext& ctx) { return classify(ctx, false, false, true); });

}  // namespace
}  // namespace torch_tpu::aten
