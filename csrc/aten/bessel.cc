// Bessel functions of orders 0 and 1: I, K (and their exponentially scaled forms), J, Y and the
// spherical j0. Each is its power series near zero and its Hankel asymptotic expansion beyond a
// switch point where both are accurate to double precision's last few digits; everything is
// computed in float64 and rounded to the input's float type.
#include <c10/util/Exception.h>

#include <cmath>

#include "csrc/aten/arith.h"
#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kEulerGamma = 0.57721566490153286061;

constexpr int kSeriesTerms = 48;

// The power series of I_nu (alternating = false) or J_nu (true) for nu in {0, 1}, and beside
// it the series with harmonic weights that K_nu and Y_nu need:
//   plain    = sum_k s^k t_k,                 t_k = (x^2/4)^k / (k! (k + nu)!)
//   weighted = sum_k s^k t_k (psi(k + 1) + psi(k + nu + 1)),  s = -1 when alternating.
// Both without the (x/2)^nu factor.
struct Series {
  Value plain, weighted;
};
Series power_series(Builder& b, const Value& x, int nu, bool alternating) {
  Value q = b.multiply(b.multiply(x, x), c(b, alternating ? -0.25 : 0.25, x));
  double psi_k = -kEulerGamma, psi_k_nu = nu == 0 ? -kEulerGamma : 1 - kEulerGamma;
  double factor = nu == 0 ? 1.0 : 1.0;  // 1 / (0! nu!)
  Value term = c(b, factor, x);
  Value plain = term;
  Value weighted = b.multiply(term, c(b, psi_k + psi_k_nu, x));
  for (int k = 1; k < kSeriesTerms; ++k) {
    term = b.multiply(term, b.divide(q, c(b, static_cast<double>(k) * (k + nu), x)));
    psi_k += 1.0 / k;
    psi_k_nu += 1.0 / (k + nu);
    plain = b.add(plain, term);
    weighted = b.add(weighted, b.multiply(term, c(b, psi_k + psi_k_nu, x)));
  }
  return {plain, weighted};
}

// Terms r_k = prod_{j<=k} (4 nu^2 - (2j - 1)^2) / (8 j x) of the Hankel expansions.
std::vector<Value> hankel_terms(Builder& b, const Value& x, int nu, int count) {
  std::vector<Value> terms{c(b, 1, x)};
  for (int j = 1; j < count; ++j) {
    double numerator = 4.0 * nu * nu - (2.0 * j - 1) * (2.0 * j - 1);
    terms.push_back(b.multiply(terms.back(), b.divide(c(b, numerator / (8.0 * j), x), x)));
  }
  return terms;
}

// I_nu(|x|) e^{-|x|} for large |x|: sum (-1)^k r_k / sqrt(2 pi x).
Value scaled_i_asymptotic(Builder& b, const Value& ax, int nu) {
  std::vector<Value> r = hankel_terms(b, ax, nu, 16);
  Value sum = c(b, 0, ax);
  for (size_t k = 0; k < r.size(); ++k) sum = k % 2 ? b.subtract(sum, r[k]) : b.add(sum, r[k]);
  // sqrt(2 pi) sqrt(x): 2 pi x overflows near float64's largest x, making I_0 there 0 x inf.
  return b.divide(sum, b.multiply(c(b, std::sqrt(2 * kPi), ax), b.sqrt(ax)));
}
// K_nu(x) e^{x} for large x: sqrt(pi / 2x) sum r_k.
Value scaled_k_asymptotic(Builder& b, const Value& x, int nu) {
  std::vector<Value> r = hankel_terms(b, x, nu, 16);
  Value sum = c(b, 0, x);
  for (const Value& term : r) sum = b.add(sum, term);
  return b.multiply(sum, b.sqrt(b.divide(c(b, kPi / 2, x), x)));
}

constexpr double kSwitchI = 15.0, kSwitchK = 8.0, kSwitchJ = 12.0;

// e^{-|x|} I_nu(x) when `scaled`, else I_nu(x); I_1 is odd.
Value bessel_i(Builder& b, const Value& x, int nu, bool scaled) {
  Value ax = b.abs(x);
  Value small_x = b.select(b.le(ax, c(b, kSwitchI, x)), ax, c(b, 1, x));
  Value series = power_series(b, small_x, nu, false).plain;
  if (nu == 1) series = b.multiply(series, b.multiply(small_x, c(b, 0.5, x)));
  if (scaled) series = b.multiply(series, b.exponential(b.negate(small_x)));
  Value large_x = b.select(b.le(ax, c(b, kSwitchI, x)), c(b, 2 * kSwitchI, x), ax);
  Value asymptotic = scaled_i_asymptotic(b, large_x, nu);
  // e^{x} whole, as CPU and SciPy: inf from x = 709.8 on, where I_0 itself still fits.
  if (!scaled) asymptotic = b.multiply(asymptotic, b.exponential(large_x));
  Value r = b.select(b.le(ax, c(b, kSwitchI, x)), series, asymptotic);
  // At +-inf CPU gives 0 scaled and NaN unscaled.
  r = b.select(b.eq(ax, c(b, INFINITY, x)), c(b, scaled ? 0 : NAN, x), r);
  if (nu == 1) r = b.multiply(r, b.sign(x));
  return b.select(is_nan(b, x), x, r);
}

// e^{x} K_nu(x) when `scaled`, else K_nu(x); x > 0 (K(0) = inf, negative x NaN).
Value bessel_k(Builder& b, const Value& x, int nu, bool scaled) {
  Value small = b.le(x, c(b, kSwitchK, x));
  Value sx = b.select(b.and_(small, b.gt(x, c(b, 0, x))), x, c(b, 1, x));
  Series s = power_series(b, sx, nu, false);
  Value log_half = b.log(b.multiply(sx, c(b, 0.5, x)));
  Value series;
  if (nu == 0) {
    // K0 = -ln(x/2) I0 + sum psi(k+1) t_k
    series = b.add(b.negate(b.multiply(log_half, s.plain)), b.multiply(s.weighted, c(b, 0.5, x)));
  } else {
    // K1 = 1/x + ln(x/2) I1 - (x/4) sum (psi(k+1) + psi(k+2)) t_k
    Value i1 = b.multiply(s.plain, b.multiply(sx, c(b, 0.5, x)));
    series = b.add(b.add(b.divide(c(b, 1, x), sx), b.multiply(log_half, i1)),
                   b.negate(b.multiply(b.multiply(sx, c(b, 0.25, x)), s.weighted)));
  }
  if (scaled) series = b.multiply(series, b.exponential(sx));
  Value lx = b.select(small, c(b, 2 * kSwitchK, x), x);
  Value asymptotic = scaled_k_asymptotic(b, lx, nu);
  if (!scaled) asymptotic = b.multiply(asymptotic, b.exponential(b.negate(lx)));
  Value r = b.select(small, series, asymptotic);
  r = b.select(b.eq(x, c(b, 0, x)), c(b, INFINITY, x), r);
  r = b.select(b.lt(x, c(b, 0, x)), c(b, NAN, x), r);
  return b.select(b.eq(x, c(b, INFINITY, x)), c(b, 0, x), r);
}

// J_nu (want_y = false) or Y_nu (true) of x: the series up to 12, then Hankel's P and Q.
Value bessel_jy(Builder& b, const Value& x, int nu, bool want_y) {
  Value ax = b.abs(x);
  Value small = b.le(ax, c(b, kSwitchJ, x));
  Value sx = b.select(b.and_(small, b.gt(ax, c(b, 0, x))), ax, c(b, 1, x));
  Series s = power_series(b, sx, nu, true);
  Value j_series = nu == 0 ? s.plain : b.multiply(s.plain, b.multiply(sx, c(b, 0.5, x)));
  Value series = j_series;
  if (want_y) {
    Value log_half = b.log(b.multiply(sx, c(b, 0.5, x)));
    Value two_over_pi = c(b, 2 / kPi, x);
    if (nu == 0) {
      // Y0 = (2/pi) ln(x/2) J0 - (1/pi) sum 2 psi(k+1) (-x^2/4)^k / (k!)^2
      series = b.subtract(b.multiply(two_over_pi, b.multiply(log_half, j_series)),
                          b.multiply(c(b, 1 / kPi, x), s.weighted));
    } else {
      // Y1 = -2/(pi x) + (2/pi) ln(x/2) J1 - (x / 2pi) sum (psi(k+1) + psi(k+2)) (-x^2/4)^k / ...
      series = b.add(b.negate(b.divide(two_over_pi, sx)),
                     b.subtract(b.multiply(two_over_pi, b.multiply(log_half, j_series)),
                                b.multiply(b.multiply(sx, c(b, 0.5 / kPi, x)), s.weighted)));
    }
  }
  Value lx = b.select(small, c(b, 2 * kSwitchJ, x), ax);
  std::vector<Value> r = hankel_terms(b, lx, nu, 20);
  Value p = c(b, 0, x), q = c(b, 0, x);
  for (size_t k = 0; k < r.size(); ++k) {
    bool negative = (k / 2) % 2 == 1;
    Value& target = k % 2 == 0 ? p : q;
    target = negative ? b.subtract(target, r[k]) : b.add(target, r[k]);
  }
  Value chi = b.subtract(lx, c(b, (nu / 2.0 + 0.25) * kPi, x));
  Value cos_chi = b.cosine(chi), sin_chi = b.sine(chi);
  Value amplitude = b.sqrt(b.divide(c(b, 2 / kPi, x), lx));
  Value asymptotic =
      want_y ? b.multiply(amplitude, b.add(b.multiply(p, sin_chi), b.multiply(q, cos_chi)))
             : b.multiply(amplitude, b.subtract(b.multiply(p, cos_chi), b.multiply(q, sin_chi)));
  Value result = b.select(small, series, asymptotic);
  Value inf = c(b, INFINITY, x);
  // CPU gives NaN at +-inf for J and Y.
  if (want_y) {
    result = b.select(b.eq(x, c(b, 0, x)), c(b, -INFINITY, x), result);
    result = b.select(b.lt(x, c(b, 0, x)), c(b, NAN, x), result);
    return b.select(b.eq(x, inf), c(b, NAN, x), b.select(is_nan(b, x), x, result));
  }
  if (nu == 0) result = b.select(b.eq(x, c(b, 0, x)), c(b, 1, x), result);
  if (nu == 1) {
    result = b.select(b.eq(x, c(b, 0, x)), c(b, 0, x), result);
    result = b.multiply(result, b.select(b.lt(x, c(b, 0, x)), c(b, -1, x), c(b, 1, x)));
  }
  result = b.select(b.eq(ax, inf), c(b, NAN, x), result);
  return b.select(is_nan(b, x), x, result);
}

// sin(x) / x, 1 at 0, 0 at +-inf.
Value spherical_j0(Builder& b, const Value& x) {
  Value safe = b.select(b.eq(x, c(b, 0, x)), c(b, 1, x), x);
  Value r = b.divide(b.sine(safe), safe);
  r = b.select(b.eq(x, c(b, 0, x)), c(b, 1, x), r);
  return b.select(b.eq(b.abs(x), c(b, INFINITY, x)), c(b, 0, x), r);
}

// torch.kaiser_window(length, periodic=True, beta=12): I0(beta sqrt(1 - ((n - a) / a)^2)) /
// I0(beta) with a = (N - 1) / 2 over N = length points (one more when periodic, the last left out),
// in float64 and rounded to the window's float type. `arg` indexes the overload's arguments
// (periodic, beta and dtype; -1 where the overload has none). CPU's kernel runs through a
// dispatch stub that has no tpu entry, so the op reached an internal assert.
Values kaiser_window(LoweringContext& ctx, int periodic_arg, int beta_arg, int dtype_arg) {
  Builder& b = ctx.b;
  const int64_t length = ctx.arg(0).toInt();
  const bool periodic = periodic_arg < 0 || ctx.arg(periodic_arg).toBool();
  const double beta = beta_arg < 0 ? 12.0 : ctx.arg(beta_arg).toDouble();
  const at::ScalarType dtype = ctx.arg(dtype_arg).isNone()
                                   ? c10::typeMetaToScalarType(at::get_default_dtype())
                                   : static_cast<at::ScalarType>(ctx.arg(dtype_arg).toInt());
  TORCH_CHECK(at::isFloatingType(dtype),
              "kaiser_window expects floating point dtypes, got: ", c10::toString(dtype));
  TORCH_CHECK(length >= 0,
              "kaiser_window requires non-negative window_length, got window_length=", length);
  const ElementType t = et(dtype);
  if (length <= 1) return {splat(b, 1, t, {length})};
  const int64_t points = periodic ? length + 1 : length;
  const Shape shape{length};
  Value n = b.convert(b.iota(shape, ElementType::S64, 0), ElementType::F64);
  const double alpha = static_cast<double>(points - 1) / 2.0;
  Value ratio = b.divide(b.subtract(n, c(b, alpha, n)), c(b, alpha, n));
  Value root = b.sqrt(b.abs(b.subtract(c(b, 1, n), b.multiply(ratio, ratio))));
  Value window = b.divide(bessel_i(b, b.multiply(c(b, beta, n), root), 0, false),
                          bessel_i(b, c(b, beta, n), 0, false));
  return {b.convert(window, t)};
}
LOWER({"kaiser_window"}, [](LoweringContext& ctx) { return kaiser_window(ctx, -1, -1, 1); });
LOWER({"kaiser_window.periodic"},
      [](LoweringContext& ctx) { return kaiser_window(ctx, 1, -1, 2); });
LOWER({"kaiser_window.beta"}, [](LoweringContext& ctx) { return kaiser_window(ctx, 1, 2, 3); });

#define TORCH_TPU_BESSEL(name, expression)                                         \
  LOWER({#name, #name ".out"}, [](LoweringContext& ctx) {                          \
    return in_float64(ctx, [](Builder& b, const Value& x) { return expression; }); \
  })
LOWER({"i0", "i0_", "i0.out"}, [](LoweringContext& ctx) {
  return in_float64(ctx, [](Builder& b, const Value& x) { return bessel_i(b, x, 0, false); });
});
TORCH_TPU_BESSEL(special_i0e, bessel_i(b, x, 0, true));
TORCH_TPU_BESSEL(special_i1, bessel_i(b, x, 1, false));
TORCH_TPU_BESSEL(special_i1e, bessel_i(b, x, 1, true));
TORCH_TPU_BESSEL(special_modified_bessel_i0, bessel_i(b, x, 0, false));
TORCH_TPU_BESSEL(special_modified_bessel_i1, bessel_i(b, x, 1, false));
TORCH_TPU_BESSEL(special_modified_bessel_k0, bessel_k(b, x, 0, false));
TORCH_TPU_BESSEL(special_modified_bessel_k1, bessel_k(b, x, 1, false));
TORCH_TPU_BESSEL(special_scaled_modified_bessel_k0, bessel_k(b, x, 0, true));
TORCH_TPU_BESSEL(special_scaled_modified_bessel_k1, bessel_k(b, x, 1, true));
TORCH_TPU_BESSEL(special_bessel_j0, bessel_jy(b, x, 0, false));
TORCH_TPU_BESSEL(special_bessel_j1, bessel_jy(b, x, 1, false));
TORCH_TPU_BESSEL(special_bessel_y0, bessel_jy(b, x, 0, true));
TORCH_TPU_BESSEL(special_bessel_y1, bessel_jy(b, x, 1, true));
TORCH_TPU_BESSEL(special_spherical_bessel_j0, spherical_j0(b, x));

}  // namespace
}  // namespace torch_tpu::aten
