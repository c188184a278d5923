// Small float functions with CPU's edge cases: heaviside, hypot, sinc, angle (real), signbit,
// nextafter and frexp (by the bits of the float), xlog1py and entr.
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

#include "csrc/aten/arith.h"
#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

// heaviside(x, values): values where x == 0, else x > 0 (NaN gives 0, as on CPU).
LOWER({"heaviside", "heaviside_", "heaviside.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  c10::ScalarType type = promoted_type(ctx, {0, 1});
  TORCH_CHECK(ctx.tensor_meta(0).scalar_type() == ctx.tensor_meta(1).scalar_type(),
              "heaviside is not yet implemented for tensors with different dtypes.");
  // A complex out= of real operands too (CPU's kernel checks the result; the Meta kernel not).
  TORCH_CHECK(ctx.num_args() < 3 || !ctx.arg(2).isTensor() || !ctx.tensor_meta(2).is_complex(),
              "heaviside is not yet implemented for complex tensors.");
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(type);
  Value x = operand(ctx, 0, t, shape), values = operand(ctx, 1, t, shape);
  Value step = b.convert(b.gt(x, splat(b, 0, t, shape)), t);
  return Values{b.select(b.eq(x, splat(b, 0, t, shape)), values, step)};
});

// hypot(x, y) = m sqrt(1 + (n / m)^2), m = max(|x|, |y|), n = min: no overflow on the way.
LOWER({"hypot", "hypot_", "hypot.out"}, [](LoweringContext& ctx) {
  ElementType t = et(float_type(promoted_type(ctx, {0, 1}))), m = opmath(t);
  Shape shape = operand_shape(ctx, {0, 1});
  Value r = hypot(ctx.b, operand(ctx, 0, m, shape), operand(ctx, 1, m, shape));
  return Values{ctx.b.convert(r, t)};
});

// sinc(x) = sin(pi x) / (pi x), 1 at 0.
LOWER({"sinc", "sinc_", "sinc.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x0 = ctx.tensor(0);
  ElementType t = et(float_type(to_scalar_type(x0.type)));
  Value x = b.convert(x0, opmath(t));
  Value product = b.multiply(x, c(b, 3.14159265358979323846, x));
  Value r = b.divide(b.sine(product), product);
  return Values{b.convert(b.select(b.eq(x, c(b, 0, x)), c(b, 1, x), r), t)};
});

// angle of a real number: pi below zero, NaN for NaN, else 0; of a complex one, its argument
// atan2(imag, real), a real number.
LOWER({"angle", "angle.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x0 = ctx.tensor(0);
  if (hlo::is_complex(x0.type)) return Values{b.atan2(b.imag(x0), b.real(x0))};
  ElementType t = et(float_type(to_scalar_type(x0.type)));
  Value x = b.convert(x0, t);
  Value r = b.select(b.lt(x, c(b, 0, x)), c(b, 3.14159265358979323846, x), c(b, 0, x));
  return Values{b.select(is_nan(b, x), x, r)};
});

LOWER({"signbit", "signbit.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  if (x.type == ElementType::Pred) return Values{splat(b, 0, ElementType::Pred, x.shape)};
  if (!hlo::is_float(x.type)) return Values{b.lt(x, splat(b, 0, x.type, x.shape))};
  return Values{sign_bit(b, x)};
});

// nextafter(x, y): the neighbouring float of x towards y, stepping the bit pattern.
LOWER({"nextafter", "nextafter_", "nextafter.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  ElementType t = et(promoted_type(ctx, {0, 1}));
  Shape shape = operand_shape(ctx, {0, 1});
  Value x = operand(ctx, 0, t, shape), y = operand(ctx, 1, t, shape);
  ElementType bits = bits_of(t);
  Value xb = b.bitcast_convert(x, bits);
  Value one = splat(b, 1, bits, shape);
  // Away from zero when |y| > |x| on x's side; the magnitude bits grow by one.
  Value up = b.eq(b.lt(x, y), b.gt(x, c(b, 0, x)));
  Value stepped = b.bitcast_convert(b.select(up, b.add(xb, one), b.subtract(xb, one)), t);
  // From zero: the smallest subnormal with y's sign.
  Value tiny = b.bitcast_convert(one, t);
  Value from_zero = b.select(b.lt(y, c(b, 0, y)), b.negate(tiny), tiny);
  Value r = b.select(b.eq(x, c(b, 0, x)), from_zero, stepped);
  r = b.select(b.eq(x, y), y, r);
  return Values{b.select(b.or_(is_nan(b, x), is_nan(b, y)), b.add(x, y), r)};
});

// frexp(x) -> (mantissa in [0.5, 1), int32 exponent); 0, inf and NaN keep x with exponent 0.
// Integer arithmetic on the bits throughout: the device may treat subnormal floats as zero.
LOWER({"frexp.Tensor", "frexp.Tensor_out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x0 = ctx.tensor(0);
  TORCH_CHECK(hlo::is_float(x0.type), "torch.frexp() only supports floating-point dtypes");
  const bool wide = x0.type == ElementType::F64;
  ElementType f = wide ? ElementType::F64 : ElementType::F32;
  ElementType bits = wide ? ElementType::S64 : ElementType::S32;
  const int64_t width = wide ? 64 : 32, mantissa_bits = wide ? 52 : 23;
  const int64_t exponent_mask = wide ? 0x7FF : 0xFF, bias_minus_one = wide ? 1022 : 126;
  const int64_t fraction_mask = (int64_t{1} << mantissa_bits) - 1;
  Value x = b.convert(x0, f);
  Value xb = b.bitcast_convert(x, bits);
  auto k = [&](int64_t v) { return b.constant_int(v, bits, x.shape); };
  Value biased = b.and_(b.shift_right_logical(xb, k(mantissa_bits)), k(exponent_mask));
  Value fraction = b.and_(xb, k(fraction_mask));
  // The sign bit as a signed constant of the bits' width (the most negative value).
  const int64_t sign_bit =
      wide ? std::numeric_limits<int64_t>::min() : int64_t{std::numeric_limits<int32_t>::min()};
  Value sign = b.and_(xb, k(sign_bit));
  // Normal numbers: exponent field - (bias - 1); the fraction keeps its bits.
  Value exponent = b.subtract(biased, k(bias_minus_one));
  // Subnormals: the highest set fraction bit p becomes the hidden bit.
  Value p = b.subtract(k(width - 1), b.count_leading_zeros(fraction));
  Value shift = b.subtract(k(mantissa_bits), p);
  Value sub_fraction = b.and_(b.shift_left(fraction, shift), k(fraction_mask));
  Value sub_exponent = b.subtract(p, k(bias_minus_one + mantissa_bits - 1));
  Value subnormal = b.and_(b.eq(biased, k(0)), b.ne(fraction, k(0)));
  fraction = b.select(subnormal, sub_fraction, fraction);
  exponent = b.select(subnormal, sub_exponent, exponent);
  Value mantissa =
      b.bitcast_convert(b.or_(b.or_(sign, fraction), k(bias_minus_one << mantissa_bits)), f);
  Value zero = b.and_(b.eq(biased, k(0)), b.eq(b.and_(xb, k(fraction_mask)), k(0)));
  Value special = b.or_(zero, b.eq(biased, k(exponent_mask)));
  // Specials keep x, selected by bits too (a float select may flush a subnormal x to zero).
  mantissa = b.bitcast_convert(b.select(special, xb, b.bitcast_convert(mantissa, bits)), f);
  exponent = b.select(special, k(0), exponent);
  return Values{b.convert(mantissa, x0.type), b.convert(exponent, ElementType::S32)};
});

// xlog1py(x, y) = x log1p(y), 0 where x is 0 unless y is NaN.
LOWER({"special_xlog1py", "special_xlog1py.other_scalar", "special_xlog1py.self_scalar",
       "special_xlog1py.out", "special_xlog1py.self_scalar_out",
       "special_xlog1py.other_scalar_out"},
      [](LoweringContext& ctx) {
        Builder& b = ctx.b;
        ElementType t = et(float_type(promoted_type(ctx, {0, 1}))), m = opmath(t);
        Shape shape = operand_shape(ctx, {0, 1});
        Value x = operand(ctx, 0, m, shape), y = operand(ctx, 1, m, shape);
        Value product = b.multiply(x, b.log_plus_one(y));
        Value take_zero = b.and_(b.eq(x, c(b, 0, x)), b.eq(y, y));
        // NaN selected explicitly (see xlogy: a bool x's product may be rewritten to a select).
        Value result = b.select(b.ne(y, y), y, b.select(take_zero, c(b, 0, x), product));
        return Values{b.convert(result, t)};
      });

// entr(x) = -x log x for x > 0, 0 at 0, -inf below; NaN stays.
LOWER({"special_entr", "special_entr.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x0 = ctx.tensor(0);
  ElementType t = et(float_type(to_scalar_type(x0.type)));
  Value x = b.convert(x0, opmath(t));
  Value r = b.negate(b.multiply(x, b.log(x)));
  r = b.select(b.eq(x, c(b, 0, x)), c(b, 0, x), r);
  r = b.select(b.lt(x, c(b, 0, x)), c(b, -INFINITY, x), r);
  return Values{b.convert(b.select(is_nan(b, x), x, r), t)};
});

}  // namespace
}  // namespace torch_tpu::aten
