// QR by Householder reflections, as LAPACK's geqrf/orgqr/ormqr compute it (so the signs of Q
// and R match CPU): geqrf, linalg_householder_product, ormqr and linalg_qr. Matrices are small
// and their sizes static, so the reflector steps are unrolled.
#include <c10/util/Exception.h>

#include <algorithm>
#include <string>

#include "csrc/aten/common.h"
#include "csrc/aten/matrix.h"

namespace torch_tpu::aten {
namespace {

struct Reflectors {
  Value packed;  // [..., m, n]: R on and above the diagonal, the reflectors' tails below
  Value tau;     // [..., min(m, n)]
};

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
  Value update = b.binary("multiply", broadcast_to(b, tau_j, rows.shape),
                          b.binary("multiply", broadcast_to(b, v, rows.shape),
                                   broadcast_to(b, projection, rows.shape)));
  (void)n;
  return with_block(b, x, b.binary("subtract", rows, update), j, 0);
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

// geqrf: for each column, LAPACK's dlarfg reflector beta = -sign(alpha) |(alpha, x)|,
// tau = (beta - alpha) / beta, v = x / (alpha - beta); tau = 0 when x is already zero.
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
      tail_norm2 = b.reshape(sum(b, b.binary("multiply", tail, tail), {r - 2, r - 1}), one);
    }
    Value trivial = b.compare("EQ", tail_norm2, zero);
    Value norm = b.unary("sqrt", b.binary("add", b.binary("multiply", alpha, alpha), tail_norm2));
    Value beta = b.select(b.compare("GE", alpha, zero), b.unary("negate", norm), norm);
    Value tau =
        b.select(trivial, zero, b.binary("divide", b.binary("subtract", beta, alpha), beta));
    Value diagonal = b.select(trivial, alpha, beta);
    a = with_block(b, a, diagonal, j, j);
    if (j + 1 < m) {
      Value scale =
          b.select(trivial, zero,
                   b.binary("divide", splat(b, 1, a.type, one), b.binary("subtract", alpha, beta)));
      a = with_block(b, a, b.binary("multiply", tail, broadcast_to(b, scale, tail.shape)), j + 1,
                     j);
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

// H_0 H_1 ... H_{k-1} applied to `x` from the left (LAPACK's orm2r/org2r order: the last
// reflector first). `packed` has the reflectors in its first k columns.
Value apply_reflectors(Builder& b, const Value& packed, const Value& tau, Value x,
                       bool transposed) {
  const int64_t k = tau.shape.back();
  for (int64_t step = 0; step < k; ++step) {
    int64_t j = transposed ? step : k - 1 - step;  // Q^T = H_{k-1} ... H_0
    x = reflect_rows(b, x, reflector(b, packed, j), tau_at(b, tau, j), j);
  }
  return x;
}

LOWER({"geqrf", "geqrf.a"}, [](LoweringContext& ctx) {
  Value a = matrix_input(ctx, 0, "torch.geqrf");
  Reflectors f = householder(ctx.b, wide(ctx.b, a));
  return Values{ctx.b.convert(f.packed, a.type), ctx.b.convert(f.tau, a.type)};
});

// linalg_householder_product(A [..., m, n], tau [..., k]) -> the first n columns of Q.
LOWER({"linalg_householder_product", "linalg_householder_product.out"}, [](LoweringContext& ctx) {
  Value a = matrix_input(ctx, 0, "torch.linalg.householder_product");
  Builder& b = ctx.b;
  Value tau = ctx.tensor(1);
  const int64_t m = a.shape[a.rank() - 2], n = a.shape[a.rank() - 1];
  TORCH_CHECK(m >= n,
              "torch.linalg.householder_product: input.shape[-2] must be greater than or "
              "equal to input.shape[-1]");
  TORCH_CHECK(tau.rank() == a.rank() - 1 && tau.shape.back() <= n,
              "torch.linalg.householder_product: input.shape[-1] must be greater than or equal "
              "to tau.shape[-1]");
  Value packed = wide(b, a);
  Value q = identity(b, batch_of(a), m, n, packed.type);
  q = apply_reflectors(b, packed, wide(b, tau), q, /*transposed=*/false);
  return Values{b.convert(q, a.type)};
});

// ormqr(A, tau, C, left, transpose): Q C, Q^T C, C Q or C Q^T with Q = H_0 ... H_{k-1}.
LOWER({"ormqr", "ormqr.out"}, [](LoweringContext& ctx) {
  Value a = matrix_input(ctx, 0, "torch.ormqr");
  Builder& b = ctx.b;
  Value c = ctx.tensor(2);
  bool left = ctx.arg(3).toBool(), transpose = ctx.arg(4).toBool();
  const int64_t m = a.shape[a.rank() - 2];
  TORCH_CHECK(c.rank() == a.rank(), "torch.ormqr: input and other must have the same rank");
  TORCH_CHECK(c.shape[c.rank() - (left ? 2 : 1)] == m, "torch.ormqr: other.shape[", left ? -2 : -1,
              "] must be equal to input.shape[-2]");
  Value packed = wide(b, a), tau = wide(b, ctx.tensor(1));
  Value x = wide(b, c);
  // From the right, C Q = (Q^T C^T)^T.
  if (!left) x = matrix_transpose(b, x);
  x = apply_reflectors(b, packed, tau, x, /*transposed=*/left == transpose);
  if (!left) x = matrix_transpose(b, x);
  return Values{b.convert(x, c.type)};
});

// linalg_qr(A, mode): "reduced" (Q m x k, R k x n), "complete" (Q m x m, R m x n) or "r"
// (R only; Q empty).
LOWER({"linalg_qr", "linalg_qr.out"}, [](LoweringContext& ctx) {
  Value a = matrix_input(ctx, 0, "torch.linalg.qr");
  Builder& b = ctx.b;
  std::string mode(ctx.arg(1).toStringView());
  TORCH_CHECK(mode == "reduced" || mode == "complete" || mode == "r",
              "qr received unrecognized mode '", mode,
              "' but expected one of 'reduced' (default), 'r', or 'complete'");
  const int64_t m = a.shape[a.rank() - 2], n = a.shape[a.rank() - 1], k = std::min(m, n);
  Reflectors f = householder(b, wide(b, a));
  bool complete = mode == "complete";
  Value r = triangle(b, complete ? f.packed : rows_of(b, f.packed, 0, k), /*upper=*/true);
  Value q = splat(b, 0, a.type, {0});
  if (mode != "r") {
    Value basis = identity(b, batch_of(a), m, complete ? m : k, f.packed.type);
    q = b.convert(apply_reflectors(b, f.packed, f.tau, basis, /*transposed=*/false), a.type);
  }
  return Values{q, b.convert(r, a.type)};
});

}  // namespace
}  // namespace torch_tpu::aten
