#include "csrc/aten/jacobi.h"

#include "csrc/aten/arith.h"
#include "csrc/aten/matrix.h"

namespace torch_tpu::aten {
namespace {

// Column order of the next round: seat 0 stays, the others move one seat round the table.
std::vector<int64_t> next_round_order(int64_t h) {
  std::vector<int64_t> source(2 * h);
  for (int64_t d = 0; d < 2 * h; ++d) source[d] = d;
  if (h == 1) return source;
  for (int64_t i = 1; i + 1 < h; ++i) source[i + 1] = i;
  source[2 * h - 1] = h - 1;
  for (int64_t i = 0; i + 1 < h; ++i) source[h + i] = h + i + 1;
  source[1] = h;
  return source;
}

}  // namespace

Value keep_going(Builder& b, const Value& round, const Value& quiet, int64_t rounds_per_sweep) {
  Value more = b.lt(round, b.constant_int(kMaxSweeps * rounds_per_sweep, ElementType::S64));
  Value unsettled = b.lt(quiet, b.constant_int(rounds_per_sweep, ElementType::S64));
  return b.and_(more, unsettled);
}

std::pair<Value, Value> next_counters(Builder& b, const Value& round, const Value& quiet,
                                      const Value& active) {
  std::vector<int64_t> all_dims;
  for (int64_t d = 0; d < active.rank(); ++d) all_dims.push_back(d);
  Value any = b.reduce(active, b.constant(0, ElementType::Pred), all_dims, BinaryOp::Or);
  Value one = b.constant_int(1, ElementType::S64);
  return {b.add(round, one), b.select(any, b.constant_int(0, ElementType::S64), b.add(quiet, one))};
}

double epsilon(ElementType type) {
  return type == ElementType::F64 ? 2.220446049250313e-16 : 1.1920928955078125e-07;
}

Rotation jacobi_rotation(Builder& b, const Value& alpha, const Value& beta, const Value& gamma,
                         const Value& threshold) {
  Value active = b.gt(b.abs(gamma), threshold);
  // tan of the angle, the smaller root of t^2 + 2 zeta t - 1 = 0.
  Value zeta = b.divide(b.subtract(beta, alpha), b.multiply(c(b, 2, gamma), gamma));
  Value sign = b.select(b.ge(zeta, c(b, 0, zeta)), c(b, 1, zeta), c(b, -1, zeta));
  Value t =
      b.divide(sign, b.add(b.abs(zeta), b.sqrt(b.add(c(b, 1, zeta), b.multiply(zeta, zeta)))));
  Value cosine = b.rsqrt(b.add(c(b, 1, t), b.multiply(t, t)));
  Value sine = b.multiply(cosine, t);
  return {b.select(active, cosine, c(b, 1, cosine)), b.select(active, sine, c(b, 0, sine)), active};
}

Value rotate_column_pairs(Builder& b, const Value& m, const Rotation& rotation) {
  const int64_t last = m.rank() - 1, width = m.shape[last];
  Value x = cols_of(b, m, 0, width / 2), y = cols_of(b, m, width / 2, width);
  Value cosine = broadcast_to(b, rotation.cosine, x.shape);
  Value sine = broadcast_to(b, rotation.sine, x.shape);
  Value turned = b.concatenate({b.subtract(b.multiply(cosine, x), b.multiply(sine, y)),
                                b.add(b.multiply(sine, x), b.multiply(cosine, y))},
                               last);
  if (width == 2) return turned;
  std::vector<Value> entries;
  for (int64_t source : next_round_order(width / 2)) {
    entries.push_back(b.constant_int(source, ElementType::S64, {1}));
  }
  return take_slices(b, turned, last, b.concatenate(entries, 0));
}

}  // namespace torch_tpu::aten
