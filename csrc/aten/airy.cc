// The Airy function Ai (torch.special.airy_ai), in float64: its Maclaurin series on
// [-6, 5], where double precision absorbs the series' cancellation, and the asymptotic
// expansions in zeta = 2/3 |x|^(3/2) beyond (DLMF 9.7.5 and 9.7.9), exponentially decaying to
// the right and oscillating to the left. As CPU: 0 beyond x = 103.892, NaN at +-inf.
#include <cmath>
#include <vector>

#include "csrc/aten/arith.h"
#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

constexpr double kPi = 3.14159265358979323846;
// Ai(0) and -Ai'(0).
constexpr double kAiryAt0 = 0.355028053887817239260;
constexpr double kAiryDerivativeAt0 = 0.258819403792806798405;
constexpr int kSeriesTerms = 40;
constexpr int kAsymptoticTerms = 12;

// u_k of the asymptotic expansions: u_0 = 1, u_k = u_{k-1} (6k-5)(6k-3)(6k-1) / (216 k (2k-1)).
std::vector<double> asymptotic_coefficients() {
  std::vector<double> u{1.0};
  for (int k = 1; k < kAsymptoticTerms; ++k) {
    u.push_back(u.back() * (6.0 * k - 5) * (6.0 * k - 3) * (6.0 * k - 1) /
                (216.0 * k * (2.0 * k - 1)));
  }
  return u;
}

// Ai(x) = Ai(0) f(x) + Ai'(0) g(x), f = sum x^{3k} 1·4·…(3k-2)/(3k)!,
// g = sum x^{3k+1} 2·5·…(3k-1)/(3k+1)!.
Value series(Builder& b, const Value& x) {
  Value cube = b.multiply(b.multiply(x, x), x);
  Value f_term = c(b, 1, x), g_term = x;
  Value f = f_term, g = g_term;
  for (int k = 0; k < kSeriesTerms; ++k) {
    f_term = b.multiply(f_term, b.divide(cube, c(b, (3.0 * k + 2) * (3.0 * k + 3), x)));
    g_term = b.multiply(g_term, b.divide(cube, c(b, (3.0 * k + 3) * (3.0 * k + 4), x)));
    f = b.add(f, f_term);
    g = b.add(g, g_term);
  }
  return b.subtract(b.multiply(c(b, kAiryAt0, x), f), b.multiply(c(b, kAiryDerivativeAt0, x), g));
}

// x > 0: e^{-zeta} / (2 sqrt(pi) x^{1/4}) sum (-1)^k u_k zeta^{-k}.
Value decaying(Builder& b, const Value& x, const std::vector<double>& u) {
  Value zeta = b.multiply(c(b, 2.0 / 3.0, x), b.multiply(x, b.sqrt(x)));
  Value inverse = b.divide(c(b, 1, x), zeta);
  Value sum = c(b, u.back(), x);
  for (int k = static_cast<int>(u.size()) - 2; k >= 0; --k) {
    sum = b.add(c(b, u[k], x), b.multiply(b.negate(inverse), sum));
  }
  Value scale = b.divide(b.exponential(b.negate(zeta)),
                         b.multiply(c(b, 2 * std::sqrt(kPi), x), b.sqrt(b.sqrt(x))));
  return b.multiply(scale, sum);
}

// x = -z < 0: (cos(zeta - pi/4) P + sin(zeta - pi/4) Q) / (sqrt(pi) z^{1/4}), with
// P = sum (-1)^k u_{2k} zeta^{-2k} and Q = sum (-1)^k u_{2k+1} zeta^{-2k-1}.
Value oscillating(Builder& b, const Value& x, const std::vector<double>& u) {
  Value z = b.negate(x);
  Value zeta = b.multiply(c(b, 2.0 / 3.0, x), b.multiply(z, b.sqrt(z)));
  Value inverse = b.divide(c(b, 1, x), zeta);
  Value minus_inverse_squared = b.negate(b.multiply(inverse, inverse));
  Value p = c(b, 0, x), q = c(b, 0, x);
  for (int k = (static_cast<int>(u.size()) - 1) / 2; k >= 0; --k) {
    p = b.add(c(b, u[2 * k], x), b.multiply(minus_inverse_squared, p));
    if (2 * k + 1 < static_cast<int>(u.size())) {
      q = b.add(c(b, u[2 * k + 1], x), b.multiply(minus_inverse_squared, q));
    }
  }
  q = b.multiply(q, inverse);
  Value phase = b.subtract(zeta, c(b, kPi / 4, x));
  Value wave = b.add(b.multiply(b.cosine(phase), p), b.multiply(b.sine(phase), q));
  return b.divide(wave, b.multiply(c(b, std::sqrt(kPi), x), b.sqrt(b.sqrt(z))));
}

Value airy_ai(Builder& b, const Value& x) {
  static const std::vector<double> u = asymptotic_coefficients();
  // Each branch sees a harmless argument where it is not chosen.
  Value near = b.select(b.le(b.abs(x), c(b, 6, x)), x, c(b, 0, x));
  Value right = b.select(b.gt(x, c(b, 5, x)), x, c(b, 6, x));
  Value left = b.select(b.lt(x, c(b, -6, x)), x, c(b, -7, x));
  Value result = b.select(b.gt(x, c(b, 5, x)), decaying(b, right, u),
                          b.select(b.lt(x, c(b, -6, x)), oscillating(b, left, u), series(b, near)));
  result = b.select(b.gt(x, c(b, 103.892, x)), c(b, 0, x), result);
  Value infinite = b.eq(b.abs(x), c(b, INFINITY, x));
  return b.select(b.or_(infinite, is_nan(b, x)), c(b, NAN, x), result);
}

LOWER({"special_airy_ai", "special_airy_ai.out"},
      [](LoweringContext& ctx) { return in_float64(ctx, airy_ai); });

}  // namespace
}  // namespace torch_tpu::aten
