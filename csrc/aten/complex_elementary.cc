#include "csrc/aten/complex_elementary.h"

#include <cmath>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

// Constants and tests over one part's type and shape.
struct Real {
  Builder& b;
  Value like;
  Value constant(double v) const { return splat(b, v, like.type, like.shape); }
  Value nan() const { return constant(NAN); }
  Value is_nan(const Value& v) const { return b.ne(v, v); }
  Value is_inf(const Value& v) const { return b.eq(b.abs(v), constant(INFINITY)); }
  Value is_finite(const Value& v) const { return b.lt(b.abs(v), constant(INFINITY)); }
  Value with_sign_of(const Value& magnitude, const Value& sign) const {
    return b.select(sign_bit(b, sign), b.negate(b.abs(magnitude)), b.abs(magnitude));
  }
  // Where `where` holds, (re, im) becomes (new_re, new_im).
  void set(const Value& where, Value& re, Value& im, const Value& new_re,
           const Value& new_im) const {
    re = b.select(where, new_re, re);
    im = b.select(where, new_im, im);
  }
};

// C99's values of exp(x + iy) where y is 0 or x infinite, over the regular ones (re, im).
Value exp_special_values(Builder& b, const Value& z, Value re, Value im) {
  Value x = b.real(z), y = b.imag(z);
  Real r{b, x};
  Value inf = r.constant(INFINITY), zero = r.constant(0);
  // On the real axis, e^x + i y: y's sign kept, NaN and infinite x included.
  r.set(b.eq(y, zero), re, im, b.exponential(x), y);
  Value y_not_finite = b.not_(r.is_finite(y));
  r.set(b.and_(b.eq(x, inf), y_not_finite), re, im, inf, r.nan());
  r.set(b.and_(b.eq(x, b.negate(inf)), y_not_finite), re, im, zero, r.with_sign_of(zero, y));
  return b.complex(re, im);
}

}  // namespace

Value complex_exp(Builder& b, const Value& z) {
  Value x = b.real(z), y = b.imag(z);
  Real r{b, x};
  Value e = b.exponential(z);
  // Where e^x overflows, e^x cos y may not ((1e20 i)^2 is -inf - 8.7e32 i in complex64): as
  // glibc scales it, h (h cos y) with h = e^(x / 2).
  Value h = b.exponential(b.multiply(x, r.constant(0.5)));
  Value overflow = b.eq(b.exponential(x), r.constant(INFINITY));
  Value re = b.select(overflow, b.multiply(h, b.multiply(h, b.cosine(y))), b.real(e));
  Value im = b.select(overflow, b.multiply(h, b.multiply(h, b.sine(y))), b.imag(e));
  return exp_special_values(b, z, re, im);
}

Value complex_log(Builder& b, const Value& z) {
  Value x = b.real(z), y = b.imag(z);
  Real r{b, x};
  Value l = b.log(z);
  Value re = b.real(l), im = b.imag(l);
  // An infinite part makes the modulus infinite whatever the other (NaN too); else a NaN part
  // makes both NaN (log(1 + i NaN) is NaN + i NaN, not log 1 + i NaN).
  r.set(b.or_(r.is_nan(x), r.is_nan(y)), re, im, r.nan(), r.nan());
  r.set(b.or_(r.is_inf(x), r.is_inf(y)), re, im, r.constant(INFINITY), b.atan2(y, x));
  return b.complex(re, im);
}

Value complex_sqrt(Builder& b, const Value& z) {
  Value x = b.real(z), y = b.imag(z);
  Real r{b, x};
  Value s = b.sqrt(z);
  // sqrt(conj z) = conj sqrt z: the imaginary part has y's sign, -0 included.
  Value re = b.real(s), im = r.with_sign_of(b.imag(s), y);
  Value inf = r.constant(INFINITY), zero = r.constant(0);
  Value y_nan = r.is_nan(y);
  r.set(b.or_(r.is_nan(x), y_nan), re, im, r.nan(), r.nan());
  r.set(b.eq(x, inf), re, im, inf, b.select(y_nan, y, r.with_sign_of(zero, y)));
  r.set(b.eq(x, b.negate(inf)), re, im, b.select(y_nan, y, zero), r.with_sign_of(inf, y));
  r.set(r.is_inf(y), re, im, inf, y);
  return b.complex(re, im);
}

Value complex_tanh(Builder& b, const Value& z) {
  Value x = b.real(z), y = b.imag(z);
  Real r{b, x};
  Value t = b.tanh(z);
  Value re = b.real(t), im = b.imag(t);
  Value zero = r.constant(0);
  // tanh(x +- 0i) = tanh x +- 0i (NaN x included); tanh(+-0 + iy) = +-0 + i tan y, NaN where y
  // is not finite (C11).
  r.set(b.eq(y, zero), re, im, b.tanh(x), y);
  r.set(b.eq(x, zero), re, im, x, b.select(r.is_finite(y), im, r.nan()));
  // tanh(+-inf + iy) = +-1 + i0, the zero signed as sin 2y for finite |y| > 1, else as y.
  Value by_double_angle = b.and_(r.is_finite(y), b.gt(b.abs(y), r.constant(1)));
  Value signed_zero =
      r.with_sign_of(zero, b.select(by_double_angle, b.multiply(b.sine(y), b.cosine(y)), y));
  r.set(r.is_inf(x), re, im, r.with_sign_of(r.constant(1), x), signed_zero);
  return b.complex(re, im);
}

Value complex_multiply(Builder& b, const Value& z, const Value& w) {
  Value a = b.real(z), bi = b.imag(z), c = b.real(w), d = b.imag(w);
  Real r{b, a};
  Value ac = b.multiply(a, c), bd = b.multiply(bi, d), ad = b.multiply(a, d),
        bc = b.multiply(bi, c);
  Value re = b.subtract(ac, bd), im = b.add(ad, bc);
  Value zero = r.constant(0), one = r.constant(1);
  // An infinite factor is "boxed" to a signed 1 or 0 per part, NaNs in the other factor made
  // signed zeros, and the product taken again times infinity (C99 Annex G.5.1).
  auto box = [&](const Value& v) { return r.with_sign_of(b.select(r.is_inf(v), one, zero), v); };
  auto zero_nan = [&](const Value& when, const Value& v) {
    return b.select(b.and_(when, r.is_nan(v)), r.with_sign_of(zero, v), v);
  };
  Value z_inf = b.or_(r.is_inf(a), r.is_inf(bi));
  Value w_inf = b.or_(r.is_inf(c), r.is_inf(d));
  Value a1 = b.select(z_inf, box(a), a), b1 = b.select(z_inf, box(bi), bi);
  Value c1 = zero_nan(z_inf, c), d1 = zero_nan(z_inf, d);
  Value c2 = b.select(w_inf, box(c1), c1), d2 = b.select(w_inf, box(d1), d1);
  Value a2 = zero_nan(w_inf, a1), b2 = zero_nan(w_inf, b1);
  // Neither factor infinite but a product overflowed: NaNs become zeros.
  Value overflow = b.and_(b.not_(b.or_(z_inf, w_inf)), b.or_(b.or_(r.is_inf(ac), r.is_inf(bd)),
                                                             b.or_(r.is_inf(ad), r.is_inf(bc))));
  Value a3 = zero_nan(overflow, a2), b3 = zero_nan(overflow, b2);
  Value c3 = zero_nan(overflow, c2), d3 = zero_nan(overflow, d2);
  Value inf = r.constant(INFINITY);
  Value again_re = b.multiply(inf, b.subtract(b.multiply(a3, c3), b.multiply(b3, d3)));
  Value again_im = b.multiply(inf, b.add(b.multiply(a3, d3), b.multiply(b3, c3)));
  Value recover = b.and_(b.and_(r.is_nan(re), r.is_nan(im)), b.or_(b.or_(z_inf, w_inf), overflow));
  r.set(recover, re, im, again_re, again_im);
  return b.complex(re, im);
}

Value complex_pow(Builder& b, const Value& z, const Value& w) {
  if (z.type != ElementType::C64) return complex_exp(b, complex_multiply(b, w, complex_log(b, z)));
  // complex64 as glibc's cpowf rounds it: w log z amplifies each rounding on the way (CPU is
  // 5e-6 off the exact value at |z^w| = 1e5), so tpu takes the same steps. glibc's float
  // functions are (nearly always) correctly rounded: here each is taken in float64 and rounded.
  // clogf's real part is log of the float hypot, its imaginary part atan2; the product is
  // float's; cexpf multiplies the floats expf(x) and cosf(y), sinf(y).
  const ElementType f64 = ElementType::F64, f32 = ElementType::F32;
  auto in_double = [&](const Value& v) { return b.convert(v, f64); };
  auto rounded = [&](const Value& v) { return b.convert(v, f32); };
  Value x = b.real(z), y = b.imag(z);
  // (Squares of floats are exact in float64, and cannot overflow it.)
  Value dx = in_double(x), dy = in_double(y);
  Value modulus = rounded(b.sqrt(b.add(b.multiply(dx, dx), b.multiply(dy, dy))));
  Value log_z = complex_log(b, z);
  Value log_re = rounded(b.log(in_double(modulus)));
  Value log_im = rounded(b.atan2(dy, dx));
  // complex_log's special values (NaN, infinite and zero parts) stay.
  Real r{b, x};
  Value regular = b.and_(b.and_(r.is_finite(x), r.is_finite(y)), b.ne(modulus, r.constant(0)));
  log_z = b.select(regular, b.complex(log_re, log_im), log_z);
  Value p = complex_multiply(b, w, log_z);
  Value px = in_double(b.real(p)), py = in_double(b.imag(p));
  Value e = rounded(b.exponential(px));
  Value re = b.multiply(e, rounded(b.cosine(py))), im = b.multiply(e, rounded(b.sine(py)));
  // Where expf overflows, e^x cos y may not ((1e20 i)^2 is -inf - 8.7e32 i): in float64.
  Value overflow = b.eq(e, r.constant(INFINITY));
  Value wide_e = b.exponential(px);
  re = b.select(overflow, rounded(b.multiply(wide_e, b.cosine(py))), re);
  im = b.select(overflow, rounded(b.multiply(wide_e, b.sine(py))), im);
  return exp_special_values(b, p, re, im);
}

}  // namespace torch_tpu::aten
