#include "csrc/aten/householder.h"

#include <algorithm>

#include "csrc/aten/matrix.h"

namespace torch_tpu::aten {
namespace {

// The reflector of step j, v = (1, packed[j+1:, j]), as a column [..., m - j, 1].
Value reflector(Builder& b, const Value& packed, int64_t j) {
  const int64_t m = packed.shape[packed.rank() - 2];
  Shape one = with_matrix(batch_of(packed), 1, 1);
  Value head = splat(b, 1, packed.type, one);
  if (j + 1 == m) return head;
  return b.concatenate({head, block(b, packed, j + 1, m, j, j + 1)}, packed.rank() - 2);
}

// x[j:, :] -= tau_j v (v^T x[j:, :]), the reflector H_j = I - tau_j v v^T applied from the left.
Value reflect_rows(Builder& b, const Value& x, const Value& v, const Value& tau_j, int64_t j) {
  const int64_t r = x.rank(), m = x.shape[r - 2], n = x.shape[r - 1];
  Value rows = rows_of(b, x, j, m);
  Value projection = matmul(b, v, rows, /*transpose_x=*/true);  // [..., 1, n]
  Value update = b.multiply(
      broadcast_to(b, tau_j, rows.shape),
      b.multiply(broadcast_to(b, v, rows.shape), broadcast_to(b, projection, rows.shape)));
  (void)n;
  return with_block(b, x, b.subtract(rows, update), j, 0);
}

// tau entry j of [..., k] as [..., 1, 1].
Value tau_at(Builder& b, const Value& tau, int64_t j) {
  const int64_t r = tau.rank();
  std::vector<int64_t> lo(r, 0), hi(tau.shape.begin(), tau.shape.end()), step(r, 1);
  lo[r - 1] = j;
  hi[r - 1] = j + 1;
  Shape shape(tau.shape.begin(), tau.shape.end() - 1);
  return b.reshape(b.slice(tau, lo, hi, step), with_matrix(shape, 1, 1));
}

}  // namespace

Reflectors householder(Builder& b, Value a) {
  const int64_t r = a.rank(), m = a.shape[r - 2], n = a.shape[r - 1], k = std::min(m, n);
  Shape one = with_matrix(batch_of(a), 1, 1);
  Value zero = splat(b, 0, a.type, one);
  std::vector<Value> taus;
  for (int64_t j = 0; j < k; ++j) {
    Value alpha = block(b, a, j, j + 1, j, j + 1);
    Value tail_norm2 = zero;
    Value tail;
    if (j + 1 < m) {
      tail = block(b, a, j + 1, m, j, j + 1);
      tail_norm2 = b.reshape(sum(b, b.multiply(tail, tail), {r - 2, r - 1}), one);
    }
    Value trivial = b.eq(tail_norm2, zero);
    Value norm = b.sqrt(b.add(b.multiply(alpha, alpha), tail_norm2));
    Value beta = b.select(b.ge(alpha, zero), b.negate(norm), norm);
    Value tau = b.select(trivial, zero, b.divide(b.subtract(beta, alpha), beta));
    Value diagonal = b.select(trivial, alpha, beta);
    a = with_block(b, a, diagonal, j, j);
    if (j + 1 < m) {
      Value scale =
          b.select(trivial, zero, b.divide(splat(b, 1, a.type, one), b.subtract(alpha, beta)));
      a = with_block(b, a, b.multiply(tail, broadcast_to(b, scale, tail.shape)), j + 1, j);
    }
    if (j + 1 < n) {
      // Apply H_j to the trailing columns.
      Value trailing = block(b, a, 0, m, j + 1, n);
      trailing = reflect_rows(b, trailing, reflector(b, a, j), tau, j);
      a = with_block(b, a, trailing, 0, j + 1);
    }
    taus.push_back(b.reshape(tau, with_matrix(batch_of(a), 1, 1)));
  }
  Shape tau_shape = batch_of(a);
  tau_shape.push_back(k);
  Value tau =
      k == 0 ? splat(b, 0, a.type, tau_shape) : b.reshape(b.concatenate(taus, r - 1), tau_shape);
  return {a, tau};
}

// LAPACK's orm2r order: for Q x the last reflector is applied first.
Value apply_reflectors(Builder& b, const Value& packed, const Value& tau, Value x,
                       bool transposed) {
  const int64_t k = tau.shape.back();
  for (int64_t step = 0; step < k; ++step) {
    int64_t j = transposed ? step : k - 1 - step;  // Q^T = H_{k-1} ... H_0
    x = reflect_rows(b, x, reflector(b, packed, j), tau_at(b, tau, j), j);
  }
  return x;
}

}  // namespace torch_tpu::aten
