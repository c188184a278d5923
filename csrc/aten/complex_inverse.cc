#include "csrc/aten/complex_inverse.h"

#include <cmath>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

constexpr double kLog2 = 0.69314718055994531;
constexpr double kHalfPi = 1.5707963267948966;
// Past this modulus the functions take their asymptotic forms (log 2z, 1/z): the exact forms
// square z on the way.
constexpr double kLarge = 1e8;

// A real part's constants and tests, over one part's type and shape.
struct Parts {
  Builder& b;
  const Value& like;
  Value constant(double v) const { return splat(b, v, like.type, like.shape); }
  // The sign bit, -0 included: the functions are odd, and C99 keeps a zero's sign.
  Value negative(const Value& v) const { return sign_bit(b, v); }
  Value with_sign_of(const Value& magnitude, const Value& sign) const {
    return b.select(negative(sign), b.negate(b.abs(magnitude)), b.abs(magnitude));
  }
  Value hypot(const Value& u, const Value& v) const { return aten::hypot(b, u, v); }
};

Value complex_of(Builder& b, const Value& re, const Value& im) { return b.complex(re, im); }

// log 2w, its modulus by hypot: log(NaN + i inf) is inf + i NaN (C99), not NaN + i NaN.
Value log_of_twice(Builder& b, const Value& w) {
  Value re = b.real(w), im = b.imag(w);
  Parts p{b, re};
  return b.complex(b.add(b.log(p.hypot(re, im)), p.constant(kLog2)), b.atan2(im, re));
}

// Hull, Fairgrieve and Tang's asin(X + iY): with x = |X|, y = |Y|, r = |(x + 1, y)|,
// s = |(x - 1, y)| and A = (r + s) / 2, asin = atan2(X, q) + i sign(Y) p and
// acos = atan2(q, X) - i sign(Y) p, where p = log1p(A - 1 + sqrt((A - 1)(A + 1))) and
// q = sqrt((A + x)(A - x)); A - 1 and A - x are written without cancellation, and y^2 / d as
// y (y / d) (y^2 underflows for y = 1e-20 in float32), so both parts stay exact near the branch
// points +-1.
struct HullParts {
  Value p, q;
};
HullParts hull_parts(Builder& b, const Value& re, const Value& im) {
  Parts c{b, re};
  Value x = b.abs(re), y = b.abs(im), one = c.constant(1), half = c.constant(0.5);
  auto y_squared_over = [&](const Value& d) { return b.multiply(y, b.divide(y, d)); };
  Value r = c.hypot(b.add(x, one), y), s = c.hypot(b.subtract(x, one), y);
  Value big_a = b.multiply(half, b.add(r, s));
  Value over_r = y_squared_over(b.add(r, b.add(x, one)));
  Value inside = b.lt(x, one);  // x < 1: s + (1 - x) has no cancellation, else s + (x - 1)
  Value s_plus_one_minus_x = b.add(s, b.subtract(one, x));
  Value s_plus_x_minus_one = b.add(s, b.subtract(x, one));  // 0 at X = +-1, Y = 0; so is y
  Value over_s = b.select(b.eq(y, c.constant(0)), y, y_squared_over(s_plus_x_minus_one));
  Value a_minus_one = b.multiply(
      half,
      b.add(over_r, b.select(inside, y_squared_over(s_plus_one_minus_x), s_plus_x_minus_one)));
  Value a_minus_x = b.multiply(half, b.add(over_r, b.select(inside, s_plus_one_minus_x, over_s)));
  return {b.log_plus_one(b.add(a_minus_one, b.sqrt(b.multiply(a_minus_one, b.add(big_a, one))))),
          b.sqrt(b.multiply(b.add(big_a, x), a_minus_x))};
}

Value is_large(Builder& b, const Value& z) {
  Parts c{b, b.real(z)};
  Value modulus = c.hypot(b.real(z), b.imag(z));
  return b.gt(modulus, c.constant(kLarge));
}

// Re z = +-0 with a NaN Im z: there acos keeps pi/2 and acosh i pi/2 (C99; CPU gives them).
Value zero_and_nan(Builder& b, const Value& z) {
  Value re = b.real(z), im = b.imag(z);
  return b.and_(b.eq(re, splat(b, 0, re.type, re.shape)), b.ne(im, im));
}

// i z and -i z.
Value times_i(Builder& b, const Value& z) { return b.complex(b.negate(b.imag(z)), b.real(z)); }
Value times_minus_i(Builder& b, const Value& z) {
  return b.complex(b.imag(z), b.negate(b.real(z)));
}

// acos z's two parts before Im's sign: atan2(q, X) and p; past kLarge (q ~ |Y|,
// p ~ log 2|z|), atan2(|Y|, X) and log 2|z|, C99's values at infinity included.
struct AcosParts {
  Value angle, log_modulus;
};
AcosParts acos_parts(Builder& b, const Value& z) {
  Value re = b.real(z), im = b.imag(z);
  HullParts h = hull_parts(b, re, im);
  Value large = is_large(b, z);
  return {b.select(large, b.atan2(b.abs(im), re), b.atan2(h.q, re)),
          b.select(large, b.real(log_of_twice(b, z)), h.p)};
}

}  // namespace

// asinh(a + ib) = -i asin(-b + ia); past kLarge, log 2w for w = z or -z, whichever has the
// non-negative real part (asinh is odd).
Value complex_asinh(Builder& b, const Value& z) {
  Value re = b.real(z), im = b.imag(z);
  Parts c{b, re};
  HullParts h = hull_parts(b, b.negate(im), re);
  // On the real axis the imaginary part is Im z itself, NaN real parts included (C99).
  Value imag = b.select(b.eq(im, c.constant(0)), im, b.atan2(im, h.q));
  Value exact = complex_of(b, c.with_sign_of(h.p, re), imag);
  Value flip = c.negative(re);
  Value large = log_of_twice(b, b.select(flip, b.negate(z), z));
  large = b.select(flip, b.negate(large), large);
  return b.select(is_large(b, z), large, exact);
}

// asin z = -i asinh(iz).
Value complex_asin(Builder& b, const Value& z) {
  return times_minus_i(b, complex_asinh(b, times_i(b, z)));
}

// acos z = angle - i sign(Im z) p.
Value complex_acos(Builder& b, const Value& z) {
  Parts c{b, b.real(z)};
  AcosParts a = acos_parts(b, z);
  Value angle = b.select(zero_and_nan(b, z), c.constant(kHalfPi), a.angle);
  Value imag = b.negate(c.with_sign_of(a.log_modulus, b.imag(z)));
  if (z.type == hlo::ElementType::C128) {
    // CPU's complex128 acos (not its complex64 one) gives +0 on the real segment [-1, 1],
    // whatever Im z's sign; C99 gives -0 for Im z = +0.
    Value x = b.real(z), y = b.imag(z), zero = c.constant(0);
    Value segment = b.and_(b.eq(y, zero), b.le(b.abs(x), c.constant(1)));
    imag = b.select(segment, zero, imag);
  }
  return complex_of(b, angle, imag);
}

// acosh z = +-i acos z = p + i sign(Im z) angle: Re acosh >= 0 and Im acosh has the sign of
// Im z, -0 included (acosh(0 - 0i) = 0 - i pi/2).
Value complex_acosh(Builder& b, const Value& z) {
  Parts c{b, b.real(z)};
  AcosParts a = acos_parts(b, z);
  Value angle =
      b.select(zero_and_nan(b, z), c.constant(kHalfPi), c.with_sign_of(a.angle, b.imag(z)));
  return complex_of(b, a.log_modulus, angle);
}

// atanh(x + iy) = log1p(4x / ((1 - x)^2 + y^2)) / 4 + i atan2(2y, (1 - x)(1 + x) - y^2) / 2
// (no cancellation of two logs: atanh(89 + i) kept 3 digits that way); where 1 -+ z is small
// its square may underflow (atanh(1 + 1e-20i) is 23.4 + i pi/4, not inf), so the real part
// is (log|1 + z| - log|1 - z|) / 2 by hypot there. Past kLarge, 1/z + i sign(Im z) pi/2 (the
// next term is 1/3z^3), whose real part is a signed zero at infinity and whose imaginary part is
// NaN where Im z is (C99).
Value complex_atanh(Builder& b, const Value& z) {
  Value x = b.real(z), y = b.imag(z);
  Parts c{b, x};
  Value one = c.constant(1);
  Value one_minus_x = b.subtract(one, x);
  // The real part is odd in x: from |x|, log1p's argument is positive (near -1 it lost digits).
  Value a = b.abs(x), one_minus_a = b.subtract(one, a);
  Value denominator = b.add(b.multiply(one_minus_a, one_minus_a), b.multiply(y, y));
  Value re = b.multiply(c.constant(0.25),
                        b.log_plus_one(b.divide(b.multiply(c.constant(4), a), denominator)));
  re = c.with_sign_of(re, x);
  Value to_plus = c.hypot(b.add(one, x), y), to_minus = c.hypot(one_minus_x, y);
  Value by_hypot = b.multiply(c.constant(0.5), b.subtract(b.log(to_plus), b.log(to_minus)));
  Value near_one = b.lt(b.minimum(to_plus, to_minus), c.constant(1e-4));
  re = b.select(near_one, by_hypot, re);
  Value im =
      b.multiply(c.constant(0.5),
                 b.atan2(b.multiply(c.constant(2), y),
                         b.subtract(b.multiply(one_minus_x, b.add(one, x)), b.multiply(y, y))));
  Value exact = complex_of(b, re, im);
  Value modulus = c.hypot(x, y);
  Value inf = c.constant(INFINITY);
  // 1/z = (x - i y) / |z|^2, each part divided twice by |z| (|z|^2 may overflow).
  Value reciprocal_re = b.divide(b.divide(x, modulus), modulus);
  Value reciprocal_im = b.divide(b.divide(y, modulus), modulus);
  Value infinite = b.eq(modulus, inf);
  Value large_re = b.select(infinite, c.with_sign_of(c.constant(0), x), reciprocal_re);
  Value quarter_turn = c.with_sign_of(c.constant(kHalfPi), y);
  Value large_im = b.select(infinite, quarter_turn, b.subtract(quarter_turn, reciprocal_im));
  large_im = b.select(b.ne(y, y), y, large_im);
  Value result = b.select(is_large(b, z), complex_of(b, large_re, large_im), exact);
  // On the imaginary axis the real part is x itself, a NaN y included (C99: atanh(0 + i NaN) is
  // 0 + i NaN; so atan(NaN + 0i) is NaN + 0i).
  return complex_of(b, b.select(b.eq(x, c.constant(0)), x, b.real(result)), b.imag(result));
}

// atan z = -i atanh(iz).
Value complex_atan(Builder& b, const Value& z) {
  return times_minus_i(b, complex_atanh(b, times_i(b, z)));
}

}  // namespace torch_tpu::aten
