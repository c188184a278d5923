// Fills, ranges and random numbers. Random bits come from the device generator (three-fry),
// so sequences repeat under torch.tpu.manual_seed.
#include <ATen/Dispatch_v2.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>

#include "csrc/aten/common.h"
#include "csrc/aten/complex_elementary.h"

namespace torch_tpu::aten {
namespace {

Shape shape_of(const at::Tensor& tensor) {
  return Shape(tensor.sizes().begin(), tensor.sizes().end());
}

LOWER({"fill_.Scalar", "fill.Scalar", "fill.Scalar_out"}, [](LoweringContext& ctx) {
  const at::Tensor& self = ctx.tensor_meta(0);
  ElementType t = et(self.scalar_type());
  return Values{as(ctx.b, ctx.scalar(1, t), t, shape_of(self))};
});
LOWER({"fill_.Tensor", "fill.Tensor", "fill.Tensor_out"}, [](LoweringContext& ctx) {
  const at::Tensor& self = ctx.tensor_meta(0);
  TORCH_CHECK(ctx.tensor_meta(1).dim() == 0,
              "fill_ only supports 0-dimension value tensor but got "
              "tensor with ",
              ctx.tensor_meta(1).dim(), " dimensions.");
  ElementType t = et(self.scalar_type());
  return Values{as(ctx.b, ctx.tensor(1), t, shape_of(self))};
});
LOWER({"zero_", "zero", "zero.out"}, [](LoweringContext& ctx) {
  const at::Tensor& self = ctx.tensor_meta(0);
  return Values{splat(ctx.b, 0, et(self.scalar_type()), shape_of(self))};
});

// arange.start_out(start, end, step, *, out): the bounds decide the length, so they are static.
LOWER({"arange.start_out"},
      [](LoweringContext& ctx) {
        const at::Tensor& out = ctx.tensor_meta(3);
        double start_value = ctx.arg(0).toScalar().toDouble(),
               end_value = ctx.arg(1).toScalar().toDouble();
        double step_value = ctx.arg(2).toScalar().toDouble();
        TORCH_CHECK(step_value != 0, "step must be nonzero");
        TORCH_CHECK((step_value > 0 && end_value >= start_value) ||
                        (step_value < 0 && end_value <= start_value),
                    "upper bound and larger bound inconsistent with step sign");
        Shape shape{static_cast<int64_t>(std::ceil((end_value - start_value) / step_value))};
        ElementType t = et(out.scalar_type());
        ElementType acc = hlo::is_float(t) ? ElementType::F64 : ElementType::S64;
        if (t == ElementType::F32 || t == ElementType::F16 || t == ElementType::BF16)
          acc = ElementType::F32;
        Value index = ctx.b.iota(shape, acc, 0);
        Value start = as(ctx.b, ctx.scalar(0, acc), acc, shape);
        Value step = as(ctx.b, ctx.scalar(2, acc), acc, shape);
        return Values{ctx.b.convert(ctx.b.add(start, ctx.b.multiply(index, step)), t)};
      },
      {0, 1, 2});

// x * y + z rounded once (what CPU's compiled kernels compute for a product and a sum: the
// compiler fuses them), for float32 and float64 operands: float32's product is exact in
// float64; float64's is summed from its exact halves (Knuth's two-sum).
Value fused_multiply_add(Builder& b, const Value& x, const Value& y, const Value& z) {
  if (x.type == ElementType::F32) {
    auto wide = [&](const Value& v) { return b.convert(v, ElementType::F64); };
    return b.convert(b.add(b.multiply(wide(x), wide(y)), wide(z)), ElementType::F32);
  }
  auto [product, product_error] = b.exact_product(x, y);
  Value sum = b.add(z, product);
  Value z_part = b.subtract(sum, product);
  Value sum_error = b.add(b.subtract(product, b.subtract(sum, z_part)), b.subtract(z, z_part));
  return b.add(sum, b.add(sum_error, product_error));
}

// steps - 1 as a runtime input (steps is the op's argument `steps_arg`), broadcast to `shape`:
// XLA turns a division by a constant into a product with its rounded reciprocal, a last bit
// away from the division CPU does.
Value steps_less_one(LoweringContext& ctx, int steps_arg, const Shape& shape) {
  Value steps = as(ctx.b, ctx.scalar(steps_arg, ElementType::S64), ElementType::S64, shape);
  return ctx.b.subtract(steps, splat(ctx.b, 1, ElementType::S64, shape));
}

// How CPU's kernel computes start + step * k: in float16 or bfloat16, rounded at each
// operation (as c10's Half and BFloat16 do; XLA keeps wider intermediates unless told); fused
// in float32 and float64 (see fused_multiply_add); otherwise a product and a sum as written.
enum class StepArithmetic { Plain, Fused, Float16, BFloat16 };

// steps (>= 2) points from start to end, each computed from the nearer end as torch's linspace
// kernel does; start and end are [steps] values of the type to compute in. As there, the
// positions are integers converted to that type, and so is the divisor steps - 1.
// `last` is steps - 1 given at run time ([steps] S64, see steps_less_one).
Value symmetric_steps(Builder& b, const Value& start, const Value& end, int64_t steps,
                      const Value& last, StepArithmetic arithmetic = StepArithmetic::Plain) {
  const ElementType acc = start.type;
  const Shape& shape = start.shape;
  auto rounded = [&](const Value& x) {
    if (arithmetic == StepArithmetic::Float16) return b.reduce_precision(x, 5, 10);
    if (arithmetic == StepArithmetic::BFloat16) return b.reduce_precision(x, 8, 7);
    return x;
  };
  auto in_acc = [&](const Value& integer) {
    return rounded(hlo::is_complex(acc)
                       ? b.convert(b.convert(integer, hlo::component_type(acc)), acc)
                       : b.convert(integer, acc));
  };
  Value position = b.iota(shape, ElementType::S64, 0);
  Value step = rounded(b.divide(rounded(b.subtract(end, start)), in_acc(last)));
  auto step_from = [&](const Value& base, const Value& count, bool forward) {
    Value k = in_acc(count);
    if (arithmetic == StepArithmetic::Fused)
      return fused_multiply_add(b, step, forward ? k : b.negate(k), base);
    Value offset = rounded(b.multiply(step, k));
    return forward ? b.add(base, offset) : b.subtract(base, offset);
  };
  Value first_half =
      b.lt(position, splat(b, static_cast<double>(steps / 2), ElementType::S64, shape));
  return b.select(first_half, step_from(start, position, true),
                  step_from(end, b.subtract(last, position), false));
}

// linspace.out(start, end, steps, *, out): symmetric from both ends, as torch's kernel.
LOWER({"linspace.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  const at::Tensor& out = ctx.tensor_meta(3);
  int64_t steps = ctx.arg(2).toInt();
  Shape shape{steps};
  ElementType t = et(out.scalar_type());
  // CPU's kernel steps in the out's own type (complex ones part by part), integral types in
  // float64 with each value truncated.
  const ElementType part = hlo::is_complex(t) ? hlo::component_type(t) : t;
  const bool floating = hlo::is_float(part);
  const ElementType acc =
      part == ElementType::F64 || !floating ? ElementType::F64 : ElementType::F32;
  const StepArithmetic arithmetic = part == ElementType::F16    ? StepArithmetic::Float16
                                    : part == ElementType::BF16 ? StepArithmetic::BFloat16
                                                                : StepArithmetic::Fused;
  auto endpoint = [&](int index) {
    Value v = ctx.scalar(index, hlo::is_complex(t) ? t : part);
    if (!floating) v = b.convert(v, t);  // the ends truncated to the integral type first
    return v;
  };
  auto steps_of = [&](const Value& start, const Value& end) {
    Value from = as(b, start, acc, shape), to = as(b, end, acc, shape);
    if (steps <= 1) return from;
    return symmetric_steps(b, from, to, steps, steps_less_one(ctx, 2, shape), arithmetic);
  };
  Value start = endpoint(0), end = endpoint(1);
  if (!hlo::is_complex(t)) return Values{b.convert(steps_of(start, end), t)};
  return Values{b.complex(b.convert(steps_of(b.real(start), b.real(end)), part),
                          b.convert(steps_of(b.imag(start), b.imag(end)), part))};
});

// logspace(start, end, steps, base) as CPU computes it: start and end in the out's type, the
// exponents from whichever end is nearer (as linspace; in float64, or in the complex type),
// base ** each (in float64, or glibc's cpow).
LOWER({"logspace.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  const at::Tensor& out = ctx.tensor_meta(4);
  const int64_t steps = ctx.arg(2).toInt();
  const Shape shape{steps};
  const ElementType t = et(out.scalar_type());
  const bool complex = hlo::is_complex(t);
  const ElementType acc = complex ? t : ElementType::F64;
  auto endpoint = [&](int index) {
    Value v = as(b, ctx.scalar(index, acc), acc, shape);
    return complex ? v : b.convert(b.convert(v, t), acc);
  };
  Value start = endpoint(0), end = endpoint(1);
  Value base = b.convert(splat(b, ctx.arg(3).toDouble(), ElementType::F64, shape), acc);
  auto power = [&](const Value& exponent) {
    return b.convert(complex ? complex_pow(b, base, exponent) : b.power(base, exponent), t);
  };
  if (steps <= 1) return Values{power(start)};
  return Values{power(symmetric_steps(b, start, end, steps, steps_less_one(ctx, 2, shape)))};
});

Values eye(LoweringContext& ctx, int out_index) {
  const at::Tensor& out = ctx.tensor_meta(out_index);
  int64_t n = ctx.arg(0).toInt(), m = out_index == 2 ? ctx.arg(1).toInt() : n;
  TORCH_CHECK(n >= 0 && m >= 0, "n and m must be greater or equal to 0, got ", n, " and ", m);
  Shape shape{n, m};
  Value rows = ctx.b.iota(shape, ElementType::S64, 0);
  Value cols = ctx.b.iota(shape, ElementType::S64, 1);
  return {ctx.b.convert(ctx.b.eq(rows, cols), et(out.scalar_type()))};
}
LOWER({"eye.out"}, [](LoweringContext& ctx) { return eye(ctx, 1); });
LOWER({"eye.m_out"}, [](LoweringContext& ctx) { return eye(ctx, 2); });

// Uniform floats in [0, 1): random mantissa bits under the exponent of 1.0 give [1, 2).
Value uniform01(LoweringContext& ctx, const Shape& shape, ElementType t) {
  Builder& b = ctx.b;
  const bool wide = t == ElementType::F64;
  const ElementType bits_type = wide ? ElementType::U64 : ElementType::U32;
  const ElementType float_type = wide ? ElementType::F64 : ElementType::F32;
  const int64_t exponent_bits = wide ? 12 : 9;  // sign + exponent width
  const int64_t one = wide ? 0x3FF0000000000000LL : 0x3F800000;
  Value bits = ctx.random_bits(shape, bits_type);
  Value mantissa = b.shift_right_logical(bits, b.constant_int(exponent_bits, bits_type, shape));
  Value f = b.bitcast_convert(b.or_(mantissa, b.constant_int(one, bits_type, shape)), float_type);
  return b.subtract(f, splat(b, 1.0, float_type, shape));
}

ElementType compute_type(ElementType t) {
  return t == ElementType::F64 ? ElementType::F64 : ElementType::F32;
}

LOWER({"uniform_", "uniform", "uniform.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  const at::Tensor& self = ctx.tensor_meta(0);
  Shape shape = shape_of(self);
  ElementType t = et(self.scalar_type());
  ElementType acc = compute_type(t);
  double from = ctx.arg(1).toDouble(), to = ctx.arg(2).toDouble();
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from,
              " > to=", to);
  if (hlo::is_complex(t)) {
    // As CPU: both parts of the real view drawn from [from, to) (complex32's halves computed
    // in f32, as its real view's would be).
    ElementType part = hlo::component_type(t);
    ElementType part_acc = compute_type(part);
    auto draw = [&] {
      return b.convert(
          b.add(splat(b, from, part_acc, shape),
                b.multiply(uniform01(ctx, shape, part_acc), splat(b, to - from, part_acc, shape))),
          part);
    };
    Value re = draw();
    return Values{b.complex(re, draw())};
  }
  Value u = uniform01(ctx, shape, acc);
  Value r = b.add(splat(b, from, acc, shape), b.multiply(u, splat(b, to - from, acc, shape)));
  return Values{b.convert(r, t)};
});

// Box-Muller on two uniform streams, drawn as one draw of pairs: each draw expands into a few
// hundred instructions, and compiling that twice doubled the op's compile time. Element i
// takes numbers 2i and 2i + 1, so a longer draw begins with the same values (size_buckets.h).
Value standard_normal(LoweringContext& ctx, const Shape& shape, ElementType acc) {
  Builder& b = ctx.b;
  Shape pair = shape;
  pair.push_back(2);
  Value both = uniform01(ctx, pair, acc);
  auto half = [&](int64_t index) {
    std::vector<int64_t> start(pair.size(), 0), limit(pair.begin(), pair.end());
    start.back() = index;
    limit.back() = index + 1;
    return b.reshape(b.slice(both, start, limit, std::vector<int64_t>(pair.size(), 1)), shape);
  };
  Value u1 = half(0);
  Value u2 = half(1);
  Value one = splat(b, 1.0, acc, shape);
  Value radius = b.sqrt(b.multiply(splat(b, -2.0, acc, shape), b.log(b.subtract(one, u1))));
  Value angle = b.multiply(splat(b, 6.283185307179586, acc, shape), u2);
  return b.multiply(radius, b.cosine(angle));
}

LOWER({"normal_", "normal_functional", "normal.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  const at::Tensor& self = ctx.tensor_meta(0);
  Shape shape = shape_of(self);
  ElementType t = et(self.scalar_type());
  ElementType acc = compute_type(t);
  double mean = ctx.arg(1).toDouble(), std = ctx.arg(2).toDouble();
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  if (hlo::is_complex(t)) {
    // As CPU: both parts drawn as normal_(mean, std / sqrt(2)) of the real view.
    ElementType part = hlo::component_type(t);
    ElementType part_acc = compute_type(part);
    auto draw = [&] {
      return b.convert(b.add(splat(b, mean, part_acc, shape),
                             b.multiply(standard_normal(ctx, shape, part_acc),
                                        splat(b, std / std::sqrt(2.0), part_acc, shape))),
                       part);
    };
    Value re = draw();
    return Values{b.complex(re, draw())};
  }
  Value z = standard_normal(ctx, shape, acc);
  Value r = b.add(splat(b, mean, acc, shape), b.multiply(z, splat(b, std, acc, shape)));
  return Values{b.convert(r, t)};
});

LOWER({"bernoulli_.float", "bernoulli.p"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  const at::Tensor& self = ctx.tensor_meta(0);
  Shape shape = shape_of(self);
  double p = ctx.arg(1).toDouble();
  TORCH_CHECK(p >= 0 && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  Value u = uniform01(ctx, shape, ElementType::F32);
  return Values{b.convert(b.lt(u, splat(b, p, ElementType::F32, shape)), et(self.scalar_type()))};
});
LOWER({"bernoulli_.Tensor", "bernoulli", "bernoulli.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  const at::Tensor& self = ctx.tensor_meta(0);
  Shape shape = shape_of(self);
  bool has_p = ctx.num_args() > 1 && ctx.arg(1).isTensor();
  Value p = has_p ? ctx.tensor(1) : ctx.tensor(0);
  p = as(b, p, ElementType::F32, shape);
  Value u = uniform01(ctx, shape, ElementType::F32);
  return Values{b.convert(b.lt(u, p), et(self.scalar_type()))};
});

// random_.from(self, from, to?, generator): integers uniform in [from, to).
LOWER(
    {"random_.from", "random.from", "random.from_out", "random_.to", "random.to", "random.to_out"},
    [](LoweringContext& ctx) {
      Builder& b = ctx.b;
      const at::Tensor& self = ctx.tensor_meta(0);
      Shape shape = shape_of(self);
      // The .from overloads take (self, from, to, generator[, out]); the .to ones (self, to,
      // generator[, out]): random_(2)'s absent generator is not a `to`.
      bool has_from = ctx.num_args() >= 4 && !ctx.arg(3).isTensor();
      int64_t from = has_from ? ctx.arg(1).toInt() : 0;
      c10::IValue to_value = has_from ? ctx.arg(2) : ctx.arg(1);
      // The inclusive upper bound: to - 1, or without `to` (CPU's) the dtype's largest
      // integer, or 2^digits for a float type (every integer up to it is exact).
      int64_t last = 0;
      if (!to_value.isNone()) {
        int64_t to = to_value.toInt();
        TORCH_CHECK(from < to, "random_ expects 'from' to be less than 'to', but got from=", from,
                    " >= to=", to);
        last = to - 1;
      } else {
        last = AT_DISPATCH_V2(self.scalar_type(), "random_", AT_WRAP([&] {
                                if constexpr (std::is_floating_point_v<scalar_t> ||
                                              std::is_same_v<scalar_t, at::Half> ||
                                              std::is_same_v<scalar_t, at::BFloat16>) {
                                  return int64_t{1} << std::numeric_limits<scalar_t>::digits;
                                } else {
                                  return static_cast<int64_t>(std::numeric_limits<scalar_t>::max());
                                }
                              }),
                              AT_EXPAND(AT_ALL_TYPES), at::kHalf, at::kBFloat16, at::kBool);
        TORCH_CHECK(from <= last, "random_ expects 'from' to be at most ", last, ", but got ",
                    from);
      }
      // The range's size in unsigned 64-bit arithmetic: up to 2^64 - 1, or 0 for the whole
      // of int64 (the bits themselves). Unsigned constants past 2^63 are written as the signed
      // ones with their bits (the module text would print them negative).
      uint64_t range = static_cast<uint64_t>(last) - static_cast<uint64_t>(from) + 1;
      Value bits = ctx.random_bits(shape, ElementType::U64);
      Value r = bits;
      if (range != 0) {
        Value bound = b.bitcast_convert(
            b.constant_int(static_cast<int64_t>(range), ElementType::S64, shape), ElementType::U64);
        r = b.remainder(bits, bound);
      }
      Value v = b.add(b.bitcast_convert(r, ElementType::S64),
                      b.constant_int(from, ElementType::S64, shape));
      return Values{b.convert(v, et(self.scalar_type()))};
    });

LOWER({"native_dropout", "native_dropout.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  double p = ctx.arg(1).toDouble();
  bool train = ctx.arg(2).isNone() || ctx.arg(2).toBool();
  if (!train || p == 0) return Values{x, splat(b, 1, ElementType::Pred, x.shape)};
  Value keep =
      b.ge(uniform01(ctx, x.shape, ElementType::F32), splat(b, p, ElementType::F32, x.shape));
  double scale = p >= 1 ? 0.0 : 1.0 / (1.0 - p);
  Value y =
      b.multiply(b.select(keep, x, splat(b, 0, x.type, x.shape)), splat(b, scale, x.type, x.shape));
  return Values{y, keep};
});
LOWER({"native_dropout_backward", "native_dropout_backward.out"}, [](LoweringContext& ctx) {
  // grad * mask * scale, as CPU computes it: in the promoted type, with the mask's values
  // (not only whether they are zero).
  Builder& b = ctx.b;
  Shape shape = operand_shape(ctx, {0, 1});
  // The float scale promotes a bool or integer product to the default float dtype.
  ElementType t = et(float_type(promoted_type(ctx, {0, 1})));
  Value masked = b.multiply(operand(ctx, 0, t, shape), operand(ctx, 1, t, shape));
  return Values{b.multiply(masked, as(b, ctx.scalar(2, t), t, shape))};
});

// In-place samplers from one uniform stream u in [0, 1), computed in f32 (f64 for doubles).
Values sample_from_uniform(LoweringContext& ctx,
                           const std::function<Value(Builder&, const Value&)>& transform) {
  const at::Tensor& self = ctx.tensor_meta(0);
  Shape shape = shape_of(self);
  ElementType t = et(self.scalar_type());
  Value u = uniform01(ctx, shape, compute_type(t));
  return {ctx.b.convert(transform(ctx.b, u), t)};
}
// exponential_(lambd): -log(1 - u) / lambd.
LOWER({"exponential_", "exponential", "exponential.out"}, [](LoweringContext& ctx) {
  double lambd = ctx.arg(1).toDouble();
  TORCH_CHECK(lambd > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambd);
  return sample_from_uniform(ctx, [lambd](Builder& b, const Value& u) {
    Value tail = b.log_plus_one(b.negate(u));
    return b.divide(b.negate(tail), splat(b, lambd, u.type, u.shape));
  });
});
// cauchy_(median, sigma): median + sigma tan(pi (u - 1/2)).
LOWER({"cauchy_", "cauchy", "cauchy.out"}, [](LoweringContext& ctx) {
  double median = ctx.arg(1).toDouble(), sigma = ctx.arg(2).toDouble();
  TORCH_CHECK(sigma > 0.0, "cauchy_ expects sigma > 0.0, but found sigma=", sigma);
  return sample_from_uniform(ctx, [median, sigma](Builder& b, const Value& u) {
    Value angle = b.multiply(splat(b, 3.14159265358979323846, u.type, u.shape),
                             b.subtract(u, splat(b, 0.5, u.type, u.shape)));
    return b.add(splat(b, median, u.type, u.shape),
                 b.multiply(splat(b, sigma, u.type, u.shape), b.tan(angle)));
  });
});
// geometric_(p): ceil(log(1 - u) / log(1 - p)), the number of trials to the first success.
LOWER({"geometric_", "geometric", "geometric.out"}, [](LoweringContext& ctx) {
  double p = ctx.arg(1).toDouble();
  TORCH_CHECK(p > 0 && p < 1, "geometric_ expects p to be in (0, 1), but got p=", p);
  return sample_from_uniform(ctx, [p](Builder& b, const Value& u) {
    Value trials = b.divide(b.log_plus_one(b.negate(u)), splat(b, std::log1p(-p), u.type, u.shape));
    return extremum(b, BinaryOp::Maximum, b.ceil(trials), splat(b, 1, u.type, u.shape));
  });
});
// log_normal_(mean, std): exp(mean + std z).
LOWER({"log_normal_", "log_normal", "log_normal.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  const at::Tensor& self = ctx.tensor_meta(0);
  double mean = ctx.arg(1).toDouble(), std = ctx.arg(2).toDouble();
  TORCH_CHECK(std > 0.0, "log_normal_ expects std > 0.0, but found std=", std);
  Shape shape = shape_of(self);
  ElementType t = et(self.scalar_type()), acc = compute_type(t);
  Value z = standard_normal(ctx, shape, acc);
  Value r =
      b.exponential(b.add(splat(b, mean, acc, shape), b.multiply(z, splat(b, std, acc, shape))));
  return Values{b.convert(r, t)};
});
// normal(mean, std) with a tensor mean and/or std: mean + std z, broadcast.
Values normal_with_tensors(LoweringContext& ctx) {
  Builder& b = ctx.b;
  bool mean_tensor = ctx.arg(0).isTensor(), std_tensor = ctx.arg(1).isTensor();
  Shape shape;
  if (mean_tensor) shape = shape_of(ctx.tensor_meta(0));
  if (std_tensor) {
    Shape s = shape_of(ctx.tensor_meta(1));
    shape = mean_tensor ? broadcast_shapes(shape, s) : s;
  }
  ElementType t =
      et(mean_tensor ? ctx.tensor_meta(0).scalar_type() : ctx.tensor_meta(1).scalar_type());
  TORCH_CHECK(hlo::is_float(t), "normal expects floating-point mean and std");
  ElementType acc = compute_type(t);
  Value mean = mean_tensor ? broadcast_to(b, b.convert(ctx.tensor(0), acc), shape)
                           : splat(b, ctx.arg(0).toDouble(), acc, shape);
  Value std = std_tensor ? broadcast_to(b, b.convert(ctx.tensor(1), acc), shape)
                         : splat(b, ctx.arg(1).toDouble(), acc, shape);
  Value z = standard_normal(ctx, shape, acc);
  return {b.convert(b.add(mean, b.multiply(std, z)), t)};
}
LOWER({"normal.Tensor_float", "normal.Tensor_float_out", "normal.float_Tensor",
       "normal.float_Tensor_out", "normal.Tensor_Tensor", "normal.Tensor_Tensor_out"},
      normal_with_tensors);

// multinomial(self [C] or [D, C], num_samples, replacement): with replacement, inverse-CDF
// sampling (how many cumulative weights lie below u * total); without, the Gumbel-max trick
// (the num_samples largest log p + Gumbel noise).
LOWER({"multinomial", "multinomial.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value p0 = ctx.tensor(0);
  TORCH_CHECK(p0.rank() == 1 || p0.rank() == 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(hlo::is_float(p0.type), "multinomial only supports floating-point dtypes for input");
  int64_t samples = ctx.arg(1).toInt();
  bool replacement = ctx.arg(2).toBool();
  TORCH_CHECK(samples > 0, "cannot sample n_sample <= 0 samples");
  bool batched = p0.rank() == 2;
  Value p = b.convert(batched ? p0 : b.reshape(p0, {1, p0.shape[0]}), ElementType::F32);
  int64_t d = p.shape[0], c = p.shape[1];
  // CPU checks the probabilities before sampling; here they are checked on the device.
  Value finite_nonnegative =
      b.and_(b.ge(p, splat(b, 0, ElementType::F32, p.shape)),
             b.le(p, splat(b, highest(ElementType::F32), ElementType::F32, p.shape)));
  b.check_at_runtime(all_of(b, finite_nonnegative), Builder::CheckKind::RaisesRuntimeError,
                     "a probability tensor holding `inf`, `nan` or an element < 0");
  b.check_at_runtime(all_of(b, b.gt(sum(b, p, {1}), splat(b, 0, ElementType::F32, {d}))),
                     Builder::CheckKind::RaisesRuntimeError, "probabilities whose sum is <= 0");
  TORCH_CHECK(replacement || samples <= c,
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  Value out;
  if (replacement) {
    std::vector<int64_t> window{1, c}, ones{1, 1};
    Value cdf = b.reduce_window(p, b.constant(0, ElementType::F32), window, ones, ones, ones,
                                {{0, 0}, {c - 1, 0}}, BinaryOp::Add);
    Value total = b.broadcast_in_dim(sum(b, p, {1}), {d, samples}, {0});
    Value u = b.multiply(uniform01(ctx, {d, samples}, ElementType::F32), total);
    Value below = b.le(b.broadcast_in_dim(cdf, {d, samples, c}, {0, 2}),
                       b.broadcast_in_dim(u, {d, samples, c}, {0, 1}));
    Value index = b.reduce(b.convert(below, ElementType::S64), b.constant_int(0, ElementType::S64),
                           {2}, BinaryOp::Add);
    out = b.clamp(splat(b, 0, ElementType::S64, {d, samples}), index,
                  splat(b, static_cast<double>(c - 1), ElementType::S64, {d, samples}));
  } else {
    Value u = uniform01(ctx, {d, c}, ElementType::F32);
    Value tiny = splat(b, 1e-20, ElementType::F32, {d, c});
    Value gumbel = b.negate(b.log(b.negate(b.log(b.add(u, tiny)))));
    Value keys = b.add(b.log(p), gumbel);
    Value positions = b.iota({d, c}, ElementType::S64, 1);
    auto sorted = b.sort({keys, positions}, 1, true, [](Builder& r, const std::vector<Value>& a) {
      return std::vector<Value>{r.gt(a[0], a[1])};
    });
    out = b.slice(sorted[1], {0, 0}, {d, samples}, {1, 1});
  }
  return Values{batched ? out : b.reshape(out, {samples})};
});

}  // namespace
}  // namespace torch_tpu::aten
