// Orthogonal polynomials of integer degree n (a tensor): Chebyshev T/U/V/W and their shifted
// forms, Hermite H/He, Laguerre L, Legendre P. As on CPU: the three-term recurrence in the input's
// float type, run by a device loop up to the largest degree that still needs it, with CPU's
// closed forms inside (-1, 1) for high degrees and its values at the interval ends.
#include <c10/util/Exception.h>

#include <cmath>

#include "csrc/aten/arith.h"
#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

enum class Family { T, U, V, W, H, He, L, P };

// The first two members, p0 = 1 and p1(x).
Value first_degree(Builder& b, Family family, const Value& x) {
  switch (family) {
    case Family::T:
    case Family::He:
    case Family::P:
      return x;
    case Family::U:
    case Family::H:
      return b.add(x, x);
    case Family::V:
      return b.subtract(b.add(x, x), c(b, 1, x));
    case Family::W:
      return b.add(b.add(x, x), c(b, 1, x));
    case Family::L:
      return b.subtract(c(b, 1, x), x);
  }
  return x;
}

// Step k (k = 1, 2, ...): p_{k+1} from p_k = q and p_{k-1} = p, with k a float of x's type.
Value next_degree(Builder& b, Family family, const Value& x, const Value& k, const Value& p,
                  const Value& q) {
  switch (family) {
    case Family::H:  // 2x q - 2k p
      return b.subtract(b.multiply(b.add(x, x), q), b.multiply(b.add(k, k), p));
    case Family::He:  // x q - k p
      return b.subtract(b.multiply(x, q), b.multiply(k, p));
    case Family::L:  // ((2k + (1 - x)) q - k p) / (k + 1)
      return b.divide(b.subtract(b.multiply(b.add(b.add(k, k), b.subtract(c(b, 1, x), x)), q),
                                 b.multiply(k, p)),
                      b.add(k, c(b, 1, x)));
    case Family::P:  // ((2k + 1) x q - k p) / (k + 1)
      return b.divide(b.subtract(b.multiply(b.multiply(b.add(b.add(k, k), c(b, 1, x)), x), q),
                                 b.multiply(k, p)),
                      b.add(k, c(b, 1, x)));
    default:  // Chebyshev: 2x q - p
      return b.subtract(b.multiply(b.add(x, x), q), p);
  }
}

// p_n(x) by the recurrence, for elements where `loop` holds (n >= 2 there).
Value recurrence(Builder& b, Family family, const Value& x, const Value& n, const Value& loop) {
  ElementType t = x.type;
  ElementType s64 = ElementType::S64;
  Value q = first_degree(b, family, x);
  Value p = c(b, 1, x);
  Value start = b.constant_int(1, s64);
  Value state_n = b.select(loop, n, splat(b, 0, s64, n.shape));
  std::vector<Value> state{start, p, q, x, state_n};
  auto condition = [&](Builder& r, const std::vector<Value>& s) {
    // Some element still below its degree, and not yet NaN (CPU stops there too).
    Value k = r.broadcast_in_dim(s[0], s[4].shape, {});
    Value pending = r.and_(r.lt(k, s[4]), r.eq(s[2], s[2]));
    Value any = r.reduce(
        pending, r.constant(0, ElementType::Pred),
        [&] {
          std::vector<int64_t> dims;
          for (int64_t d = 0; d < pending.rank(); ++d) dims.push_back(d);
          return dims;
        }(),
        BinaryOp::Or);
    return std::vector<Value>{any};
  };
  auto body = [&](Builder& r, const std::vector<Value>& s) {
    const Value &k = s[0], &pp = s[1], &qq = s[2], &xx = s[3], &nn = s[4];
    Value kk = r.broadcast_in_dim(k, nn.shape, {});
    Value kf = r.convert(kk, t);
    Value next = next_degree(r, family, xx, kf, pp, qq);
    Value active = r.lt(kk, nn);
    return std::vector<Value>{r.add(k, r.constant_int(1, s64)), r.select(active, qq, pp),
                              r.select(active, next, qq), xx, nn};
  };
  return b.while_loop(state, condition, body)[2];
}

// CPU's shortcut for high degrees inside (-1, 1), where y = acos(x).
Value closed_form(Builder& b, Family family, const Value& x, const Value& nf) {
  Value theta = b.atan2(b.sqrt(b.subtract(c(b, 1, x), b.multiply(x, x))), x);
  Value one = c(b, 1, x), half = c(b, 0.5, x);
  switch (family) {
    case Family::T:
      return b.cosine(b.multiply(nf, theta));
    case Family::U: {
      Value n1 = b.add(nf, one);
      Value s = b.sine(theta);
      Value regular = b.divide(b.sine(b.multiply(n1, theta)), s);
      Value at_root = b.divide(b.multiply(n1, b.cosine(b.multiply(n1, theta))), x);
      return b.select(b.ne(s, c(b, 0, x)), regular, at_root);
    }
    case Family::V: {
      Value half_theta = b.multiply(theta, half);
      Value regular = b.divide(b.cosine(b.multiply(b.add(nf, half), theta)), b.cosine(half_theta));
      return regular;
    }
    default: {  // W
      Value half_theta = b.multiply(theta, half);
      return b.divide(b.sine(b.multiply(b.add(nf, half), theta)), b.sine(half_theta));
    }
  }
}

Values polynomial(LoweringContext& ctx, Family family, bool shifted, int64_t closed_above) {
  Builder& b = ctx.b;
  ElementType t = et(float_type(promoted_type(ctx, {0, 1})));
  Shape shape = operand_shape(ctx, {0, 1});
  Value x_in = operand(ctx, 0, t, shape);
  Value nf_in = operand(ctx, 1, t, shape);
  // The degree truncates toward zero; NaN and infinite degrees count as negative.
  Value finite = b.lt(b.abs(nf_in), c(b, INFINITY, nf_in));
  Value n =
      b.select(finite, b.convert(nf_in, ElementType::S64), splat(b, -1, ElementType::S64, shape));
  Value nf = b.convert(n, t);
  Value x = shifted ? b.subtract(b.add(x_in, x_in), c(b, 1, x_in)) : x_in;
  auto n_is = [&](Comparison direction, int64_t value) {
    return b.compare(direction, n, splat(b, static_cast<double>(value), ElementType::S64, shape));
  };
  Value even = b.eq(b.remainder(n, splat(b, 2, ElementType::S64, shape)),
                    splat(b, 0, ElementType::S64, shape));
  Value one = c(b, 1, x), two_n_plus_one = b.add(b.add(nf, nf), one);
  Value parity = b.select(even, one, c(b, -1, x));
  Value loop = n_is(Comparison::GE, 2);
  Value result = b.select(n_is(Comparison::EQ, 0), one, first_degree(b, family, x));
  // Values at the ends of the interval (Chebyshev and Legendre), which CPU returns first.
  Value at_plus = b.eq(x, one), at_minus = b.eq(x, c(b, -1, x));
  Value plus_value, minus_value;
  switch (family) {
    case Family::T:
    case Family::P:
      plus_value = one, minus_value = parity;
      break;
    case Family::U:
      plus_value = b.add(nf, one), minus_value = b.multiply(parity, b.add(nf, one));
      break;
    case Family::V:
      plus_value = one, minus_value = b.multiply(parity, two_n_plus_one);
      break;
    case Family::W:
      plus_value = two_n_plus_one, minus_value = parity;
      break;
    default:
      break;
  }
  bool has_ends = family != Family::H && family != Family::He && family != Family::L;
  Value inside = b.lt(b.abs(x), one);
  Value closed = closed_above >= 0 ? b.and_(inside, n_is(Comparison::GT, closed_above))
                                   : splat(b, 0, ElementType::Pred, shape);
  if (has_ends) loop = b.and_(loop, b.not_(b.or_(closed, b.or_(at_plus, at_minus))));
  if (family == Family::L) loop = b.and_(loop, b.ne(x, c(b, 0, x)));
  if (family == Family::H || family == Family::He) {
    int64_t limit = t == ElementType::F64 ? 512 : 128;
    loop = b.and_(loop, n_is(Comparison::LE, limit));
  }
  result = b.select(loop, recurrence(b, family, x, n, loop), result);
  if (has_ends) {
    if (closed_above >= 0) {
      Value form = closed_form(b, family, b.select(closed, x, c(b, 0.5, x)), nf);
      result = b.select(closed, form, result);
    }
    result = b.select(at_minus, minus_value, result);
    result = b.select(at_plus, plus_value, result);
  }
  if (family == Family::L) result = b.select(b.eq(x, c(b, 0, x)), one, result);
  if (family == Family::H || family == Family::He) {
    int64_t limit = t == ElementType::F64 ? 512 : 128;
    result = b.select(n_is(Comparison::GT, limit), c(b, NAN, x), result);
  }
  return {b.select(n_is(Comparison::LT, 0), c(b, 0, x), result)};
}

#define TORCH_TPU_POLYNOMIAL(name, family, shifted, closed_above)                          \
  LOWER({#name, #name ".out", #name ".x_scalar", #name ".x_scalar_out", #name ".n_scalar", \
         #name ".n_scalar_out"},                                                           \
        [](LoweringContext& ctx) { return polynomial(ctx, family, shifted, closed_above); })
TORCH_TPU_POLYNOMIAL(special_chebyshev_polynomial_t, Family::T, false, 6);
TORCH_TPU_POLYNOMIAL(special_chebyshev_polynomial_u, Family::U, false, 8);
TORCH_TPU_POLYNOMIAL(special_chebyshev_polynomial_v, Family::V, false, 8);
TORCH_TPU_POLYNOMIAL(special_chebyshev_polynomial_w, Family::W, false, 8);
TORCH_TPU_POLYNOMIAL(special_shifted_chebyshev_polynomial_t, Family::T, true, 6);
TORCH_TPU_POLYNOMIAL(special_shifted_chebyshev_polynomial_u, Family::U, true, 6);
TORCH_TPU_POLYNOMIAL(special_shifted_chebyshev_polynomial_v, Family::V, true, 6);
TORCH_TPU_POLYNOMIAL(special_shifted_chebyshev_polynomial_w, Family::W, true, 4);
TORCH_TPU_POLYNOMIAL(special_hermite_polynomial_h, Family::H, false, -1);
TORCH_TPU_POLYNOMIAL(special_hermite_polynomial_he, Family::He, false, -1);
TORCH_TPU_POLYNOMIAL(special_laguerre_polynomial_l, Family::L, false, -1);
TORCH_TPU_POLYNOMIAL(special_legendre_polynomial_p, Family::P, false, -1);

}  // namespace
}  // namespace torch_tpu::aten
