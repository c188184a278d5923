// Piecewise activations (hardswish, hardsigmoid, hard/soft shrink, glu, prelu, rrelu in eval,
// logit) and their gradients, each as ATen's CPU kernel defines it at the break points.
#include <c10/util/Exception.h>

#include "csrc/aten/arith.h"
#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

Value scalar_like(LoweringContext& ctx, int index, const Value& like) {
  return as(ctx.b, ctx.scalar(index, like.type), like.type, like.shape);
}
Value zeros_like(Builder& b, const Value& like) { return c(b, 0, like); }
Value between(Builder& b, const Value& x, const Value& lo, const Value& hi) {
  return b.and_(b.ge(x, lo), b.le(x, hi));
}

// hardswish(x) = x * min(max(x + 3, 0), 6) / 6, in opmath.
LOWER({"hardswish", "hardswish_", "hardswish.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x0 = ctx.tensor(0);
  Value x = b.convert(x0, opmath(x0.type));
  Value relu6 = b.clamp(c(b, 0, x), b.add(x, c(b, 3, x)), c(b, 6, x));
  return Values{b.convert(b.divide(b.multiply(x, relu6), c(b, 6, x)), x0.type)};
});
// 0 up to -3, grad (x / 3 + 1/2) below 3, grad from 3 on (CPU's break points).
LOWER({"hardswish_backward", "hardswish_backward.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value g0 = ctx.tensor(0), x0 = ctx.tensor(1);
  ElementType m = opmath(x0.type);
  Value g = b.convert(g0, m), x = b.convert(x0, m);
  Value middle = b.multiply(g, b.add(b.divide(x, c(b, 3, x)), c(b, 0.5, x)));
  Value r = b.select(b.lt(x, c(b, 3, x)), middle, g);
  r = b.select(b.le(x, c(b, -3, x)), zeros_like(b, x), r);
  return Values{b.convert(r, g0.type)};
});

LOWER({"hardsigmoid", "hardsigmoid_", "hardsigmoid.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x0 = ctx.tensor(0);
  Value x = b.convert(x0, opmath(x0.type));
  Value relu6 = b.clamp(c(b, 0, x), b.add(x, c(b, 3, x)), c(b, 6, x));
  return Values{b.convert(b.divide(relu6, c(b, 6, x)), x0.type)};
});
LOWER({"hardsigmoid_backward", "hardsigmoid_backward.grad_input"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value g0 = ctx.tensor(0), x0 = ctx.tensor(1);
  ElementType m = opmath(x0.type);
  Value g = b.convert(g0, m), x = b.convert(x0, m);
  Value inside = b.and_(b.gt(x, c(b, -3, x)), b.lt(x, c(b, 3, x)));
  return Values{b.convert(b.select(inside, b.divide(g, c(b, 6, x)), zeros_like(b, x)), g0.type)};
});

// hardshrink(x, lambda): 0 on [-lambda, lambda], x elsewhere.
LOWER({"hardshrink", "hardshrink.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  Value lambda = scalar_like(ctx, 1, x);
  return Values{b.select(between(b, x, b.negate(lambda), lambda), zeros_like(b, x), x)};
});
LOWER({"hardshrink_backward", "hardshrink_backward.grad_input"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value g = ctx.tensor(0), x = ctx.tensor(1);
  Value lambda = scalar_like(ctx, 2, x);
  return Values{b.select(between(b, x, b.negate(lambda), lambda), zeros_like(b, g), g)};
});
// softshrink(x, lambda): x - lambda above lambda, x + lambda below -lambda, else 0.
LOWER({"softshrink", "softshrink.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x0 = ctx.tensor(0);
  ElementType m = opmath(x0.type);
  Value x = b.convert(x0, m);
  Value lambda = as(b, ctx.scalar(1, m), m, x.shape);
  Value r = b.select(b.gt(x, lambda), b.subtract(x, lambda),
                     b.select(b.lt(x, b.negate(lambda)), b.add(x, lambda), zeros_like(b, x)));
  // NaN stays NaN, as on CPU.
  return Values{b.convert(b.select(is_nan(b, x), x, r), x0.type)};
});
LOWER({"softshrink_backward", "softshrink_backward.grad_input"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value g = ctx.tensor(0), x = ctx.tensor(1);
  Value lambda = scalar_like(ctx, 2, x);
  return Values{b.select(between(b, x, b.negate(lambda), lambda), zeros_like(b, g), g)};
});

// glu(x, dim) = a * sigmoid(b) over the two halves of dim.
struct Halves {
  Value first, second;
  int64_t dim;
};
Halves halves(LoweringContext& ctx, const Value& x, int dim_index) {
  int64_t dim = wrap_dim(ctx.arg(dim_index).toInt(), x.rank());
  TORCH_CHECK(x.shape[dim] % 2 == 0, "Halving dimension must be even, but dimension ", dim,
              " is size ", x.shape[dim]);
  int64_t half = x.shape[dim] / 2;
  std::vector<int64_t> start(x.rank(), 0), mid = x.shape, stride(x.rank(), 1);
  mid[dim] = half;
  std::vector<int64_t> second_start(x.rank(), 0);
  second_start[dim] = half;
  return {ctx.b.slice(x, start, mid, stride), ctx.b.slice(x, second_start, x.shape, stride), dim};
}
LOWER({"glu", "glu.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x0 = ctx.tensor(0);
  TORCH_CHECK(x0.rank() > 0, "glu does not support scalars because halving size must be even");
  Value x = b.convert(x0, opmath(x0.type));
  Halves h = halves(ctx, x, 1);
  return Values{b.convert(b.multiply(h.first, b.logistic(h.second)), x0.type)};
});
// glu_backward(grad, self, dim) = concat(grad s, grad a s (1 - s)), s = sigmoid(second half).
LOWER({"glu_backward", "glu_backward.grad_input"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value g0 = ctx.tensor(0), x0 = ctx.tensor(1);
  ElementType m = opmath(x0.type);
  Value g = b.convert(g0, m), x = b.convert(x0, m);
  Halves h = halves(ctx, x, 2);
  Value s = b.logistic(h.second);
  Value grad_first = b.multiply(g, s);
  Value grad_second = b.multiply(b.multiply(grad_first, h.first), b.subtract(c(b, 1, s), s));
  return Values{b.convert(b.concatenate({grad_first, grad_second}, h.dim), x0.type)};
});

// _prelu_kernel(self, weight): weight already broadcast to self's shape by the caller.
LOWER({"_prelu_kernel"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  Value w = broadcast_to(b, b.convert(ctx.tensor(1), x.type), x.shape);
  return Values{b.select(b.gt(x, zeros_like(b, x)), x, b.multiply(w, x))};
});
// -> (grad_input, grad_weight), both shaped like self; autograd sums grad_weight to weight.
LOWER({"_prelu_kernel_backward"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value g = ctx.tensor(0), x = ctx.tensor(1);
  Value w = broadcast_to(b, b.convert(ctx.tensor(2), x.type), x.shape);
  Value positive = b.gt(x, zeros_like(b, x));
  return Values{b.select(positive, g, b.multiply(w, g)),
                b.select(positive, zeros_like(b, x), b.multiply(x, g))};
});

// logit(x, eps?) = log(z / (1 - z)), z = x clamped to [eps, 1 - eps] when eps is given.
LOWER({"logit", "logit_", "logit.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x0 = ctx.tensor(0);
  ElementType t = et(float_type(to_scalar_type(x0.type)));
  Value x = b.convert(x0, opmath(t));
  if (!ctx.arg(1).isNone()) {
    double eps = ctx.arg(1).toDouble();
    x = b.clamp(c(b, eps, x), x, c(b, 1 - eps, x));
  }
  Value r = b.log(b.divide(x, b.subtract(c(b, 1, x), x)));
  return Values{b.convert(r, t)};
});
// logit_backward(grad, self, eps?): grad / (x (1 - x)); 0 outside [eps, 1 - eps] with eps.
LOWER({"logit_backward", "logit_backward.grad_input"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value g0 = ctx.tensor(0), x0 = ctx.tensor(1);
  ElementType m = opmath(x0.type);
  Value g = b.convert(g0, m), x = b.convert(x0, m);
  Value r = b.divide(g, b.multiply(x, b.subtract(c(b, 1, x), x)));
  if (ctx.arg(2).isNone()) {
    Value outside = b.or_(b.lt(x, c(b, 0, x)), b.gt(x, c(b, 1, x)));
    r = b.select(outside, c(b, NAN, x), r);
  } else {
    double eps = ctx.arg(2).toDouble();
    Value outside = b.or_(b.lt(x, c(b, eps, x)), b.gt(x, c(b, 1 - eps, x)));
    r = b.select(outside, zeros_like(b, x), r);
  }
  return Values{b.convert(r, g0.type)};
});

}  // namespace
}  // namespace torch_tpu::aten
