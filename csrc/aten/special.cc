// Special functions: lgamma (Lanczos approximation, g = 7, with the reflection formula below
// 1/2) and digamma (recurrence up to 6, then the asymptotic series, with reflection), computed
// in float64 and rounded to the input's float type.
#include <c10/util/Exception.h>

#include <array>
#include <cmath>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

constexpr double kPi = 3.14159265358979323846;

Value c(Builder& b, double value, const Value& like) {
  return splat(b, value, like.type, like.shape);
}

Value is_nonpositive_integer(Builder& b, const Value& x) {
  return b.binary("and", b.compare("LE", x, c(b, 0, x)), b.compare("EQ", x, b.unary("floor", x)));
}

// log|Gamma(x)| for x >= 1/2.
Value lanczos_lgamma(Builder& b, const Value& x) {
  static constexpr std::array<double, 9> kCoefficients = {
      0.99999999999980993,  676.5203681218851,     -1259.1392167224028,
      771.32342877765313,   -176.61502916214059,   12.507343278686905,
      -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7};
  Value z = b.binary("subtract", x, c(b, 1, x));
  Value series = c(b, kCoefficients[0], x);
  for (size_t i = 1; i < kCoefficients.size(); ++i) {
    series = b.binary("add", series,
                      b.binary("divide", c(b, kCoefficients[i], x),
                               b.binary("add", z, c(b, static_cast<double>(i), x))));
  }
  Value t = b.binary("add", z, c(b, 7.5, x));
  Value result = b.binary("multiply", b.binary("add", z, c(b, 0.5, x)), b.unary("log", t));
  result = b.binary("subtract", result, t);
  result = b.binary("add", result, c(b, 0.9189385332046727, x));  // log(2 pi) / 2
  return b.binary("add", result, b.unary("log", series));
}

Value lgamma(Builder& b, const Value& x) {
  Value reflect = b.compare("LT", x, c(b, 0.5, x));
  Value y = b.select(reflect, b.binary("subtract", c(b, 1, x), x), x);
  Value direct = lanczos_lgamma(b, y);
  // lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x)
  Value sine = b.unary("abs", b.unary("sine", b.binary("multiply", c(b, kPi, x), x)));
  Value reflected =
      b.binary("subtract", b.unary("log", b.binary("divide", c(b, kPi, x), sine)), direct);
  Value result = b.select(reflect, reflected, direct);
  Value inf = c(b, INFINITY, x);
  result = b.select(is_nonpositive_integer(b, x), inf, result);
  return b.select(b.compare("EQ", b.unary("abs", x), inf), inf, result);
}

Value digamma(Builder& b, const Value& x) {
  Value reflect = b.compare("LT", x, c(b, 0.5, x));
  Value y = b.select(reflect, b.binary("subtract", c(b, 1, x), x), x);
  // psi(y) = psi(y + 1) - 1/y, until y >= 6 (y >= 1/2 here, so six steps suffice).
  Value shift = c(b, 0, x);
  for (int step = 0; step < 6; ++step) {
    Value small = b.compare("LT", y, c(b, 6, x));
    shift = b.select(small, b.binary("subtract", shift, b.binary("divide", c(b, 1, x), y)), shift);
    y = b.select(small, b.binary("add", y, c(b, 1, x)), y);
  }
  Value inv = b.binary("divide", c(b, 1, x), y);
  Value inv2 = b.binary("multiply", inv, inv);
  // ln y - 1/(2y) - sum B_2k / (2k y^2k)
  static constexpr std::array<double, 6> kSeries = {1.0 / 12,   -1.0 / 120, 1.0 / 252,
                                                    -1.0 / 240, 1.0 / 132,  -691.0 / 32760};
  Value poly = c(b, kSeries.back(), x);
  for (size_t i = kSeries.size() - 1; i-- > 0;) {
    poly = b.binary("add", b.binary("multiply", poly, inv2), c(b, kSeries[i], x));
  }
  Value direct = b.binary(
      "subtract", b.unary("log", y),
      b.binary("add", b.binary("multiply", c(b, 0.5, x), inv), b.binary("multiply", poly, inv2)));
  direct = b.binary("add", direct, shift);
  // psi(x) = psi(1 - x) - pi / tan(pi x)
  Value angle = b.binary("multiply", c(b, kPi, x), x);
  Value cotangent = b.binary("divide", b.unary("cosine", angle), b.unary("sine", angle));
  Value reflected = b.binary("subtract", direct, b.binary("multiply", c(b, kPi, x), cotangent));
  Value result = b.select(reflect, reflected, direct);
  // CPU: digamma(0) = -inf, other nonpositive integers NaN.
  result = b.select(is_nonpositive_integer(b, x), c(b, NAN, x), result);
  result = b.select(b.compare("EQ", x, c(b, 0, x)), c(b, -INFINITY, x), result);
  return b.select(b.compare("EQ", x, c(b, INFINITY, x)), x, result);
}

Values special_unary(LoweringContext& ctx, int index, Value (*f)(Builder&, const Value&)) {
  Value x = ctx.tensor(index);
  ElementType t = et(float_type(to_scalar_type(x.type)));
  Value wide = ctx.b.convert(x, ElementType::F64);
  return {ctx.b.convert(f(ctx.b, wide), t)};
}

LOWER({"lgamma", "lgamma_", "lgamma.out"},
      [](LoweringContext& ctx) { return special_unary(ctx, 0, lgamma); });
LOWER({"digamma", "digamma_", "digamma.out"},
      [](LoweringContext& ctx) { return special_unary(ctx, 0, digamma); });
// polygamma(n, self): n = 0 is digamma; higher orders are not lowered yet.
LOWER({"polygamma", "polygamma.out"}, [](LoweringContext& ctx) {
  int64_t n = ctx.arg(0).toInt();
  TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
  TORCH_CHECK_NOT_IMPLEMENTED(n == 0, "torch_tpu: polygamma of order ", n,
                              " is not implemented for the tpu device yet");
  return special_unary(ctx, 1, digamma);
});
LOWER({"polygamma_"}, [](LoweringContext& ctx) {
  int64_t n = ctx.arg(1).toInt();
  TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
  TORCH_CHECK_NOT_IMPLEMENTED(n == 0, "torch_tpu: polygamma of order ", n,
                              " is not implemented for the tpu device yet");
  return special_unary(ctx, 0, digamma);
});

}  // namespace
}  // namespace torch_tpu::aten
