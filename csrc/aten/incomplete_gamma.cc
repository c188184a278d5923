// The regularized incomplete gamma functions igamma = P(a, x) and igammac = Q(a, x) in float64:
// P by its power series where x < a + 1, Q by its continued fraction (modified Lentz) beyond,
// each a device loop that runs until every element has converged, with CPU's values at the edges
// (negative arguments, a = 0, x = 0, infinities).
#include <c10/util/Exception.h>

#include <cmath>

#include "csrc/aten/arith.h"
#include "csrc/aten/common.h"
#include "csrc/aten/special.h"

namespace torch_tpu::aten {
namespace {

constexpr int64_t kMaxTerms = 2000;
constexpr double kEps = 1e-16;
constexpr double kTiny = 1e-300;

std::vector<int64_t> all_dims(const Value& x) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.rank(); ++d) dims.push_back(d);
  return dims;
}

Value any_of(Builder& b, const Value& pred) {
  return b.reduce(pred, b.constant(0, ElementType::Pred), all_dims(pred), BinaryOp::Or);
}

Value keep_iterating(Builder& q, const Value& busy, const Value& step) {
  Value more = q.lt(step, q.constant_int(kMaxTerms, ElementType::S64));
  return q.and_(any_of(q, busy), more);
}

// P(a, x) exp(x) x^-a Gamma(a) = sum_n x^n / (a (a+1) ... (a+n)), for the `busy` elements.
Value series(Builder& b, const Value& a, const Value& x, const Value& busy) {
  Value first = b.divide(c(b, 1, a), a);
  auto state = b.while_loop(
      {first, first, a, x, busy, b.constant_int(0, ElementType::S64)},
      [](Builder& q, const std::vector<Value>& s) {
        return std::vector<Value>{keep_iterating(q, s[4], s[5])};
      },
      [](Builder& q, const std::vector<Value>& s) {
        const Value &total = s[0], &term = s[1], &ap = s[2], &xs = s[3], &on = s[4];
        Value next_ap = q.add(ap, c(q, 1, ap));
        Value next_term = q.divide(q.multiply(term, xs), next_ap);
        Value next_total = q.add(total, next_term);
        Value still = q.and_(
            on, q.ge(q.abs(next_term), q.multiply(q.abs(next_total), c(q, kEps, next_total))));
        Value step = q.add(s[5], q.constant_int(1, ElementType::S64));
        return std::vector<Value>{q.select(on, next_total, total),
                                  q.select(on, next_term, term),
                                  q.select(on, next_ap, ap),
                                  xs,
                                  still,
                                  step};
      });
  return state[0];
}

// Q(a, x) exp(x) x^-a Gamma(a) by its continued fraction 1/(x+1-a- 1(1-a)/(x+3-a- ...)),
// evaluated by the modified Lentz method, for the `busy` elements.
Value continued_fraction(Builder& b, const Value& a, const Value& x, const Value& busy) {
  Value b0 = b.add(b.subtract(x, a), c(b, 1, x));
  Value d0 = b.divide(c(b, 1, x), b0);
  auto state = b.while_loop(
      {b0, c(b, 1 / kTiny, x), d0, d0, c(b, 0, x), a, busy, b.constant_int(0, ElementType::S64)},
      [](Builder& q, const std::vector<Value>& s) {
        return std::vector<Value>{keep_iterating(q, s[6], s[7])};
      },
      [](Builder& q, const std::vector<Value>& s) {
        const Value &bn = s[0], &cn = s[1], &dn = s[2], &h = s[3], &i = s[4], &as = s[5];
        const Value& on = s[6];
        Value tiny = c(q, kTiny, bn);
        auto away_from_zero = [&](const Value& v) {
          return q.select(q.lt(q.abs(v), tiny), tiny, v);
        };
        Value next_i = q.add(i, c(q, 1, i));
        Value an = q.negate(q.multiply(next_i, q.subtract(next_i, as)));
        Value next_b = q.add(bn, c(q, 2, bn));
        Value next_d = q.divide(c(q, 1, dn), away_from_zero(q.add(q.multiply(an, dn), next_b)));
        Value next_c = away_from_zero(q.add(next_b, q.divide(an, cn)));
        Value delta = q.multiply(next_d, next_c);
        Value next_h = q.multiply(h, delta);
        Value still = q.and_(on, q.ge(q.abs(q.subtract(delta, c(q, 1, delta))), c(q, kEps, delta)));
        Value step = q.add(s[7], q.constant_int(1, ElementType::S64));
        return std::vector<Value>{q.select(on, next_b, bn),
                                  q.select(on, next_c, cn),
                                  q.select(on, next_d, dn),
                                  q.select(on, next_h, h),
                                  q.select(on, next_i, i),
                                  as,
                                  still,
                                  step};
      });
  return state[3];
}

// igamma (lower = true) or igammac of float64 a and x.
Value incomplete_gamma(Builder& b, const Value& a, const Value& x, bool lower) {
  Value zero = c(b, 0, a), inf = c(b, INFINITY, a), nan = c(b, NAN, a);
  Value regular = b.and_(b.and_(b.gt(a, zero), b.gt(x, zero)), b.and_(b.lt(a, inf), b.lt(x, inf)));
  Value use_series = b.lt(x, b.add(a, c(b, 1, a)));
  Value safe_a = b.select(regular, a, c(b, 1, a)), safe_x = b.select(regular, x, c(b, 1, x));
  Value prefactor = b.exponential(
      b.subtract(b.subtract(b.multiply(safe_a, b.log(safe_x)), safe_x), log_gamma(b, safe_a)));
  Value p = b.multiply(series(b, safe_a, safe_x, b.and_(regular, use_series)), prefactor);
  Value q = b.multiply(continued_fraction(b, safe_a, safe_x, b.and_(regular, b.not_(use_series))),
                       prefactor);
  Value one = c(b, 1, a);
  Value result = lower ? b.select(use_series, p, b.subtract(one, q))
                       : b.select(use_series, b.subtract(one, p), q);
  // CPU's edges, checked from the last to the first so that the first that applies wins.
  Value full = lower ? one : zero, none = lower ? zero : one;
  Value x_inf = b.eq(x, inf), a_inf = b.eq(a, inf);
  result = b.select(x_inf, full, result);
  result = b.select(a_inf, b.select(x_inf, nan, none), result);
  result = b.select(b.eq(x, zero), none, result);
  result = b.select(b.eq(a, zero), b.select(b.gt(x, zero), full, nan), result);
  Value negative = b.or_(b.lt(x, zero), b.lt(a, zero));
  result = b.select(negative, nan, result);
  Value either_nan = b.or_(b.ne(a, a), b.ne(x, x));
  return b.select(either_nan, nan, result);
}

Values lowering(LoweringContext& ctx, bool lower) {
  ElementType t = et(float_type(promoted_type(ctx, {0, 1})));
  Shape shape = operand_shape(ctx, {0, 1});
  Value a = operand(ctx, 0, ElementType::F64, shape);
  Value x = operand(ctx, 1, ElementType::F64, shape);
  return Values{ctx.b.convert(incomplete_gamma(ctx.b, a, x, lower), t)};
}

LOWER({"igamma", "igamma_", "igamma.out"},
      [](LoweringContext& ctx) { return lowering(ctx, true); });
LOWER({"igammac", "igammac_", "igammac.out"},
      [](LoweringContext& ctx) { return lowering(ctx, false); });

}  // namespace
}  // namespace torch_tpu::aten
