// The error function family in float64: erf by its series of positive terms up to 2, erfc by
// its continued fraction beyond (no cancellation in the tail), and what follows from them:
// erfcx, log_ndtr, and the inverses ndtri and erfinv by Newton steps from the Abramowitz-Stegun
// 26.2.23 start.
#include "csrc/aten/error_function.h"

#include <c10/util/Exception.h>

#include <cmath>

#include "csrc/aten/arith.h"
#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

constexpr double kSqrtPi = 1.7724538509055160273;
constexpr double kSqrt2 = 1.4142135623730950488;

// Below it erf comes from its series, above erfc from its continued fraction (accurate to an
// ulp from 2 up at the depth below; at 1 it is still off by 3e-9).
constexpr double kSeriesLimit = 2.0;

// erf(x) = 2/sqrt(pi) x exp(-x^2) sum (2x^2)^n / (1 3 5 ... (2n+1)), for |x| <= 2: its terms
// are all positive, so no digits cancel (the alternating Taylor series loses four by 3).
Value erf_series(Builder& b, const Value& x) {
  Value two_x2 = b.multiply(c(b, 2, x), b.multiply(x, x));
  Value term = c(b, 1, x);
  Value total = term;
  for (int n = 1; n < 60; ++n) {
    term = b.multiply(term, b.divide(two_x2, c(b, 2.0 * n + 1, x)));
    total = b.add(total, term);
  }
  Value gauss = b.exponential(b.negate(b.multiply(x, x)));
  return b.multiply(b.multiply(c(b, 2 / kSqrtPi, x), x), b.multiply(gauss, total));
}

// 1 / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))): erfc(x) = exp(-x^2) / sqrt(pi) times
// this, for x >= 3, evaluated from a fixed depth up.
Value erfc_fraction(Builder& b, const Value& x) {
  Value tail = x;
  for (int k = 60; k >= 1; --k) tail = b.add(x, b.divide(c(b, k / 2.0, x), tail));
  return b.divide(c(b, 1, x), tail);
}

// erfcx(x) = exp(x^2) erfc(x) for x >= 0, without overflow.
Value erfcx_nonnegative(Builder& b, const Value& x) {
  Value small = b.le(x, c(b, kSeriesLimit, x));
  Value sx = b.select(small, x, c(b, 0, x));
  Value near =
      b.multiply(b.exponential(b.multiply(sx, sx)), b.subtract(c(b, 1, x), erf_series(b, sx)));
  Value lx = b.select(small, c(b, kSeriesLimit + 1, x), x);
  Value far = b.divide(erfc_fraction(b, lx), c(b, kSqrtPi, x));
  return b.select(small, near, far);
}

// erfc(x) for any x.
Value erfc(Builder& b, const Value& x) {
  Value ax = b.abs(x);
  Value positive =
      b.multiply(b.exponential(b.negate(b.multiply(ax, ax))), erfcx_nonnegative(b, ax));
  return b.select(b.lt(x, c(b, 0, x)), b.subtract(c(b, 2, x), positive), positive);
}

// erfcx for any x: below zero, 2 exp(x^2) - erfcx(-x) (inf once exp(x^2) overflows).
Value erfcx(Builder& b, const Value& x) {
  Value ax = b.abs(x);
  Value positive = erfcx_nonnegative(b, ax);
  Value negative = b.subtract(b.multiply(c(b, 2, x), b.exponential(b.multiply(x, x))), positive);
  Value r = b.select(b.lt(x, c(b, 0, x)), negative, positive);
  r = b.select(b.eq(x, c(b, INFINITY, x)), c(b, 0, x), r);
  return b.select(is_nan(b, x), x, r);
}

// log Phi(x) as CPU computes it: log1p(-erfc(x / sqrt 2) / 2) from -1 up (the log of a number
// near 1 lost the tail: log_ndtr(9) is -1.1e-19, not 0), below it log(erfcx(t) / 2) - t^2,
// t = -x / sqrt 2, without underflow.
Value log_ndtr(Builder& b, const Value& x) {
  Value t = b.divide(b.negate(x), c(b, kSqrt2, x));
  Value upper = b.log_plus_one(b.multiply(c(b, -0.5, x), erfc(b, b.negate(t))));
  Value tail = b.subtract(b.log(b.multiply(c(b, 0.5, x), erfcx(b, t))), b.multiply(t, t));
  Value r = b.select(b.lt(x, c(b, -1, x)), tail, upper);
  return b.select(b.eq(x, c(b, -INFINITY, x)), c(b, -INFINITY, x), r);
}

// Phi^-1(p) for p in (0, 1): the A&S start, then Newton steps on Phi(x) = p, done on the lower
// tail (p <= 1/2) where Phi(x) is accurate, and mirrored.
Value ndtri(Builder& b, const Value& p) {
  Value upper = b.gt(p, c(b, 0.5, p));
  Value q = b.select(upper, b.subtract(c(b, 1, p), p), p);  // in (0, 1/2]
  Value t = b.sqrt(b.multiply(c(b, -2, p), b.log(q)));
  Value numerator = b.add(
      c(b, 2.515517, p), b.multiply(t, b.add(c(b, 0.802853, p), b.multiply(t, c(b, 0.010328, p)))));
  Value denominator = b.add(
      c(b, 1, p),
      b.multiply(t,
                 b.add(c(b, 1.432788, p),
                       b.multiply(t, b.add(c(b, 0.189269, p), b.multiply(t, c(b, 0.001308, p)))))));
  Value x = b.subtract(b.divide(numerator, denominator), t);  // <= 0
  for (int step = 0; step < 4; ++step) {
    // Newton in log space: log Phi(x) - log q over its derivative phi(x) / Phi(x).
    Value log_phi_cdf = log_ndtr(b, x);
    Value log_pdf =
        b.subtract(b.multiply(c(b, -0.5, p), b.multiply(x, x)), c(b, 0.91893853320467274178, p));
    Value slope = b.exponential(b.subtract(log_pdf, log_phi_cdf));
    x = b.subtract(x, b.divide(b.subtract(log_phi_cdf, b.log(q)), slope));
  }
  Value r = b.select(upper, b.negate(x), x);
  r = b.select(b.eq(p, c(b, 0.5, p)), c(b, 0, p), r);
  r = b.select(b.eq(p, c(b, 0, p)), c(b, -INFINITY, p), r);
  r = b.select(b.eq(p, c(b, 1, p)), c(b, INFINITY, p), r);
  Value outside = b.or_(b.lt(p, c(b, 0, p)), b.gt(p, c(b, 1, p)));
  return b.select(b.or_(outside, is_nan(b, p)), c(b, NAN, p), r);
}

// erfinv(y) = sign(y) * -ndtri((1 - |y|) / 2) / sqrt 2: 1 - |y| is exact for a float input.
Value erfinv(Builder& b, const Value& y) {
  Value ay = b.abs(y);
  Value magnitude = b.divide(
      b.negate(ndtri(b, b.multiply(b.subtract(c(b, 1, y), ay), c(b, 0.5, y)))), c(b, kSqrt2, y));
  Value r = b.multiply(b.sign(y), magnitude);
  r = b.select(b.eq(y, c(b, 0, y)), y, r);
  return b.select(b.or_(b.gt(ay, c(b, 1, y)), is_nan(b, y)), c(b, NAN, y), r);
}

LOWER({"erfinv", "erfinv_", "erfinv.out"},
      [](LoweringContext& ctx) { return in_float64(ctx, erfinv); });
LOWER({"special_ndtri", "special_ndtri.out"},
      [](LoweringContext& ctx) { return in_float64(ctx, ndtri); });
LOWER({"special_log_ndtr", "special_log_ndtr.out"},
      [](LoweringContext& ctx) { return in_float64(ctx, log_ndtr); });
LOWER({"special_erfcx", "special_erfcx.out"},
      [](LoweringContext& ctx) { return in_float64(ctx, erfcx); });

}  // namespace

Value erf_float64(Builder& b, const Value& x) {
  Value ax = b.abs(x);
  Value far = b.multiply(b.sign(x), b.subtract(c(b, 1, x), erfc(b, ax)));
  Value r = b.select(b.le(ax, c(b, kSeriesLimit, x)), erf_series(b, x), far);
  return b.select(is_nan(b, x), x, r);
}

Value erfc_float64(Builder& b, const Value& x) { return b.select(is_nan(b, x), x, erfc(b, x)); }

}  // namespace torch_tpu::aten
