// Special functions: lgamma (Lanczos approximation, g = 7, with the reflection formula below
// 1/2) and digamma (as CPU: recurrence up to 10, the asymptotic series, reflection), computed
// in float64 and rounded to the input's float type.
#include "csrc/aten/special.h"

#include <c10/util/Exception.h>

#include <array>
#include <cmath>

#include "csrc/aten/arith.h"
#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

constexpr double kPi = 3.14159265358979323846;

Value is_nonpositive_integer(Builder& b, const Value& x) {
  return b.and_(b.le(x, c(b, 0, x)), b.eq(x, b.floor(x)));
}

// pi x for a reflection formula whose trigonometric factor has period pi, with the whole part
// of x dropped first: pi x of a large x has lost the fraction.
Value pi_times_fraction(Builder& b, const Value& x) {
  Value whole = b.multiply(b.sign(x), b.floor(b.abs(x)));
  return b.multiply(c(b, kPi, x), b.subtract(x, whole));
}

// log|Gamma(x)| for x >= 1/2.
Value lanczos_lgamma(Builder& b, const Value& x) {
  static constexpr std::array<double, 9> kCoefficients = {
      0.99999999999980993,  676.5203681218851,     -1259.1392167224028,
      771.32342877765313,   -176.61502916214059,   12.507343278686905,
      -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7};
  Value z = b.subtract(x, c(b, 1, x));
  Value series = c(b, kCoefficients[0], x);
  for (size_t i = 1; i < kCoefficients.size(); ++i) {
    series = b.add(series,
                   b.divide(c(b, kCoefficients[i], x), b.add(z, c(b, static_cast<double>(i), x))));
  }
  Value t = b.add(z, c(b, 7.5, x));
  Value result = b.multiply(b.add(z, c(b, 0.5, x)), b.log(t));
  result = b.subtract(result, t);
  result = b.add(result, c(b, 0.9189385332046727, x));  // log(2 pi) / 2
  return b.add(result, b.log(series));
}

Value lgamma(Builder& b, const Value& x) {
  Value reflect = b.lt(x, c(b, 0.5, x));
  Value y = b.select(reflect, b.subtract(c(b, 1, x), x), x);
  Value direct = lanczos_lgamma(b, y);
  // lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x)
  Value sine = b.abs(b.sine(pi_times_fraction(b, x)));
  Value reflected = b.subtract(b.log(b.divide(c(b, kPi, x), sine)), direct);
  Value result = b.select(reflect, reflected, direct);
  Value inf = c(b, INFINITY, x);
  result = b.select(is_nonpositive_integer(b, x), inf, result);
  return b.select(b.eq(b.abs(x), inf), inf, result);
}

// As CPU computes it (Cephes' psi): the recurrence up to 10, psi(10) exactly, the asymptotic
// series past it, and below 0 the reflection through tan(pi r), r the fraction of x (pi x of a
// large x has lost it: digamma(-1931.99999994) was off by 14.2).
Value digamma(Builder& b, const Value& x) {
  Value reflect = b.lt(x, c(b, 0, x));
  Value y = b.select(reflect, b.subtract(c(b, 1, x), x), x);
  // psi(y) = psi(y + 1) - 1/y, until y >= 10 (y > 0 here; ten steps suffice from 1 on).
  Value shift = c(b, 0, x);
  for (int step = 0; step < 10; ++step) {
    Value small = b.lt(y, c(b, 10, x));
    shift = b.select(small, b.subtract(shift, b.divide(c(b, 1, x), y)), shift);
    y = b.select(small, b.add(y, c(b, 1, x)), y);
  }
  Value inv2 = b.divide(c(b, 1, x), b.multiply(y, y));
  static constexpr std::array<double, 7> kSeries = {
      8.33333333333333333333E-2,  -2.10927960927960927961E-2, 7.57575757575757575758E-3,
      -4.16666666666666666667E-3, 3.96825396825396825397E-3,  -8.33333333333333333333E-3,
      8.33333333333333333333E-2};
  Value poly = c(b, kSeries[0], x);
  for (size_t i = 1; i < kSeries.size(); ++i)
    poly = b.add(b.multiply(poly, inv2), c(b, kSeries[i], x));
  Value series = b.select(b.lt(y, c(b, 1e17, x)), b.multiply(inv2, poly), c(b, 0, x));
  Value direct = b.subtract(b.subtract(b.log(y), b.divide(c(b, 0.5, x), y)), series);
  direct = b.select(b.eq(y, c(b, 10, x)), c(b, 2.25175258906672110764, x), direct);  // psi(10)
  direct = b.add(shift, direct);
  // psi(x) = psi(1 - x) - pi / tan(pi r)
  Value reflected = b.subtract(direct, b.divide(c(b, kPi, x), b.tan(pi_times_fraction(b, x))));
  Value result = b.select(reflect, reflected, direct);
  // CPU: digamma(+-0) = -+inf, negative integers NaN.
  result = b.select(is_nonpositive_integer(b, x), c(b, NAN, x), result);
  result = b.select(b.eq(x, c(b, 0, x)), b.negate(b.divide(c(b, 1, x), x)), result);
  return b.select(b.eq(x, c(b, INFINITY, x)), x, result);
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
// Hurwitz zeta(s, q) for q >= 1/2 (Euler-Maclaurin: ten terms, then the tail with twelve
// Bernoulli corrections, as Cephes does; its early exits only skip negligible terms).
Value hurwitz_zeta(Builder& b, const Value& s, const Value& q) {
  static constexpr std::array<double, 12> kA = {12.0,
                                                -720.0,
                                                30240.0,
                                                -1209600.0,
                                                47900160.0,
                                                -1.8924375803183791606e9,
                                                7.47242496e10,
                                                -2.950130727918164224e12,
                                                1.1646782814350067249e14,
                                                -4.5979787224074726105e15,
                                                1.8152105401943546773e17,
                                                -7.1661652561756670113e18};
  Value exponent = b.negate(s);
  Value sum = c(b, 0, q);
  Value a = q;
  Value term = c(b, 0, q);
  for (int k = 0; k <= 9; ++k) {
    a = k == 0 ? q : b.add(a, c(b, 1, q));
    term = b.power(a, exponent);
    sum = b.add(sum, term);
  }
  Value w = a;
  sum = b.add(sum, b.divide(b.multiply(term, w), b.subtract(s, c(b, 1, q))));
  sum = b.subtract(sum, b.multiply(c(b, 0.5, q), term));
  Value factor = c(b, 1, q);
  double k = 0.0;
  Value bt = term;
  for (double coefficient : kA) {
    factor = b.multiply(factor, b.add(s, c(b, k, q)));
    bt = b.divide(bt, w);
    sum = b.add(sum, b.multiply(b.divide(factor, c(b, coefficient, q)), bt));
    k += 1;
    factor = b.multiply(factor, b.add(s, c(b, k, q)));
    bt = b.divide(bt, w);
    k += 1;
  }
  return sum;
}

// zeta(x, q) for any q: the terms below 1/2 are summed directly by a device loop first; CPU's
// domain rules: x = 1 is inf, x < 1 NaN, q a nonpositive integer inf, q < 0 with x not an
// integer NaN.
Value zeta(Builder& b, const Value& x, const Value& q) {
  std::vector<int64_t> all_dims;
  for (int64_t d = 0; d < q.rank(); ++d) all_dims.push_back(d);
  auto shifted = b.while_loop(
      {x, q, c(b, 0, q)},
      [&](Builder& r, const std::vector<Value>& s) {
        Value low = r.lt(s[1], splat(r, 0.5, s[1].type, s[1].shape));
        return std::vector<Value>{
            r.reduce(low, r.constant(0, hlo::ElementType::Pred), all_dims, BinaryOp::Or)};
      },
      [](Builder& r, const std::vector<Value>& s) {
        Value low = r.lt(s[1], splat(r, 0.5, s[1].type, s[1].shape));
        Value term = r.power(s[1], r.negate(s[0]));
        return std::vector<Value>{
            s[0], r.select(low, r.add(s[1], splat(r, 1, s[1].type, s[1].shape)), s[1]),
            r.select(low, r.add(s[2], term), s[2])};
      });
  Value result = b.add(shifted[2], hurwitz_zeta(b, x, shifted[1]));
  Value nan = c(b, NAN, q), inf = c(b, INFINITY, q);
  Value integer_x = b.eq(x, b.floor(x));
  result = b.select(b.and_(b.lt(q, c(b, 0, q)), b.not_(integer_x)), nan, result);
  result = b.select(is_nonpositive_integer(b, q), inf, result);
  result = b.select(b.lt(x, c(b, 1, x)), nan, result);
  result = b.select(b.eq(x, c(b, 1, x)), inf, result);
  return b.select(b.or_(is_nan(b, x), is_nan(b, q)), nan, result);
}
LOWER({"special_zeta", "special_zeta.out", "special_zeta.self_scalar", "special_zeta.other_scalar",
       "special_zeta.self_scalar_out", "special_zeta.other_scalar_out"},
      [](LoweringContext& ctx) {
        ElementType t = et(float_type(promoted_type(ctx, {0, 1})));
        Shape shape = operand_shape(ctx, {0, 1});
        Value x = operand(ctx, 0, ElementType::F64, shape);
        Value q = operand(ctx, 1, ElementType::F64, shape);
        return Values{ctx.b.convert(zeta(ctx.b, x, q), t)};
      });

// d^n/dx^n cot(pi x) = pi^n Q_n(cot(pi x)), with Q_0(u) = u and Q_{k+1} = -(1 + u^2) Q_k'.
Value cot_derivative(Builder& b, int64_t n, const Value& x) {
  std::vector<double> q{0, 1};  // coefficients of u^0, u^1, ...
  for (int64_t k = 0; k < n; ++k) {
    std::vector<double> derivative(q.size() > 1 ? q.size() - 1 : 1, 0.0);
    for (size_t i = 1; i < q.size(); ++i) derivative[i - 1] = q[i] * static_cast<double>(i);
    std::vector<double> next(derivative.size() + 2, 0.0);
    for (size_t i = 0; i < derivative.size(); ++i) {
      next[i] -= derivative[i];
      next[i + 2] -= derivative[i];
    }
    q = next;
  }
  Value angle = b.multiply(c(b, kPi, x), x);
  Value cot = b.divide(b.cosine(angle), b.sine(angle));
  Value poly = c(b, q.back(), x);
  for (size_t i = q.size() - 1; i-- > 0;) {
    poly = b.add(b.multiply(poly, cot), c(b, q[i], x));
  }
  return b.multiply(c(b, std::pow(kPi, static_cast<double>(n)), x), poly);
}
// polygamma(n, x) = (-1)^(n+1) n! zeta(n+1, x) for x >= 1/2; below, the reflection
// psi_n(x) = (-1)^n psi_n(1 - x) - pi d^n/dx^n cot(pi x).
Value polygamma(Builder& b, int64_t n, const Value& x) {
  double factorial = 1;
  for (int64_t i = 2; i <= n; ++i) factorial *= static_cast<double>(i);
  double sign = n % 2 == 1 ? 1.0 : -1.0;  // (-1)^(n+1)
  Value reflect = b.lt(x, c(b, 0.5, x));
  Value y = b.select(reflect, b.subtract(c(b, 1, x), x), x);
  Value direct = b.multiply(c(b, sign * factorial, x), hurwitz_zeta(b, c(b, n + 1.0, y), y));
  Value reflected = b.subtract(b.multiply(c(b, -sign, x), direct),
                               b.multiply(c(b, kPi, x), cot_derivative(b, n, x)));
  Value result = b.select(reflect, reflected, direct);
  return b.select(is_nonpositive_integer(b, x), c(b, sign * INFINITY, x), result);
}

// trigamma (polygamma of order 1) as ATen computes it: reflection through 1/sin^2 below 1/2,
// recurrence up to 6, then the asymptotic series.
Value trigamma(Builder& b, const Value& x) {
  Value reflect = b.lt(x, c(b, 0.5, x));
  Value sine = b.sine(b.multiply(c(b, kPi, x), x));
  Value result =
      b.select(reflect, b.negate(b.divide(c(b, kPi * kPi, x), b.multiply(sine, sine))), c(b, 0, x));
  Value y = b.select(reflect, b.subtract(c(b, 1, x), x), x);
  for (int i = 0; i < 6; ++i) {
    result = b.add(result, b.divide(c(b, 1, x), b.multiply(y, y)));
    y = b.add(y, c(b, 1, x));
  }
  Value ixx = b.divide(c(b, 1, x), b.multiply(y, y));
  Value series = b.multiply(
      ixx, b.subtract(
               c(b, 1.0 / 6, x),
               b.multiply(ixx, b.subtract(c(b, 1.0 / 30, x), b.multiply(ixx, c(b, 1.0 / 42, x))))));
  Value tail = b.divide(
      b.add(b.add(c(b, 1, x), b.divide(c(b, 1, x), b.multiply(c(b, 2, x), y))), series), y);
  result = b.add(result, tail);
  return b.select(reflect, b.negate(result), result);
}

// polygamma(n, self) and polygamma_(self, n): n = 0 is digamma, 1 trigamma.
Values polygamma_lowering(LoweringContext& ctx, int64_t n, int tensor_index) {
  TORCH_CHECK(n >= 0, "polygamma(n, x) does not support negative n.");
  Value x = ctx.tensor(tensor_index);
  ElementType t = et(float_type(to_scalar_type(x.type)));
  // trigamma in the input's own precision, as ATen: near its poles 1/sin^2 follows the
  // rounding of sin. The rest in float64.
  Value wide = ctx.b.convert(x, n == 1 ? opmath(t) : ElementType::F64);
  Value result = n == 0   ? digamma(ctx.b, wide)
                 : n == 1 ? trigamma(ctx.b, wide)
                          : polygamma(ctx.b, n, wide);
  return {ctx.b.convert(result, t)};
}
LOWER({"polygamma", "polygamma.out"},
      [](LoweringContext& ctx) { return polygamma_lowering(ctx, ctx.arg(0).toInt(), 1); });
LOWER({"polygamma_"},
      [](LoweringContext& ctx) { return polygamma_lowering(ctx, ctx.arg(1).toInt(), 0); });

}  // namespace

Value log_gamma(Builder& b, const Value& x) { return lgamma(b, x); }

}  // namespace torch_tpu::aten
