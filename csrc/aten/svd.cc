// The singular value decomposition by one-sided Jacobi (Hestenes): plane rotations make the
// columns of A pairwise orthogonal, then S holds their norms, U the normalised columns and V
// the accumulated rotations. Each round rotates n/2 disjoint column pairs at once and then
// moves the columns on by the round-robin tournament schedule, so every pair meets once per
// sweep of n - 1 rounds; a device while loop runs rounds until a whole sweep needs no rotation.
// U is completed to an orthonormal basis (full_matrices, or zero singular values) through the
// Householder QR of the normalised columns. Everything composite (svdvals, pinv, matrix_rank,
// matrix norms, cond, and the backward formula) builds on _linalg_svd.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

#include "csrc/aten/arith.h"
#include "csrc/aten/common.h"
#include "csrc/aten/householder.h"
#include "csrc/aten/jacobi.h"
#include "csrc/aten/matrix.h"

namespace torch_tpu::aten {
namespace {

// Per-column sums of squares and products of two column blocks: [..., 1, h].
Value column_dots(Builder& b, const Value& x, const Value& y) {
  const int64_t r = x.rank();
  Shape shape = x.shape;
  shape[r - 2] = 1;
  return b.reshape(sum(b, b.multiply(x, y), {r - 2}), shape);
}

struct Jacobi {
  Value columns;    // [..., M, N2]: A V, with orthogonal columns
  Value rotations;  // [..., N2, N2]: V
};

Jacobi orthogonalize_columns(Builder& b, const Value& a) {
  const int64_t r = a.rank(), rows = a.shape[r - 2], n2 = a.shape[r - 1], h = n2 / 2;
  const double tolerance =
      epsilon(a.type) * std::sqrt(static_cast<double>(std::max<int64_t>(rows, 1)));
  const int64_t rounds_per_sweep = n2 - 1;
  Value v = identity(b, batch_of(a), n2, n2, a.type);
  auto state = b.while_loop(
      {a, v, b.constant_int(0, ElementType::S64), b.constant_int(0, ElementType::S64)},
      [&](Builder& q, const std::vector<Value>& s) {
        return std::vector<Value>{keep_going(q, s[2], s[3], rounds_per_sweep)};
      },
      [&](Builder& q, const std::vector<Value>& s) {
        Value x = cols_of(q, s[0], 0, h), y = cols_of(q, s[0], h, n2);
        Value alpha = column_dots(q, x, x), beta = column_dots(q, y, y);
        Value gamma = column_dots(q, x, y);
        Value threshold = q.multiply(c(q, tolerance, alpha), q.sqrt(q.multiply(alpha, beta)));
        Rotation rotation = jacobi_rotation(q, alpha, beta, gamma, threshold);
        auto [round, quiet] = next_counters(q, s[2], s[3], rotation.active);
        return std::vector<Value>{rotate_column_pairs(q, s[0], rotation),
                                  rotate_column_pairs(q, s[1], rotation), round, quiet};
      });
  return {state[0], state[1]};
}

// `x` [..., rows, n] sorted along its columns by `key` [..., 1, n], largest first.
Value sort_columns(Builder& b, const Value& key, const Value& x) {
  const int64_t last = x.rank() - 1;
  auto sorted = b.sort(
      {broadcast_to(b, key, x.shape), x}, last, /*stable=*/true,
      [](Builder& q, const std::vector<Value>& a) { return std::vector<Value>{q.gt(a[0], a[1])}; });
  return sorted[1];
}

struct Svd {
  Value u;   // [..., M, M or N]
  Value s;   // [..., N]
  Value vh;  // [..., N, N]
};

// The SVD of a tall (M >= N) batch of matrices.
Svd tall_svd(Builder& b, const Value& a, bool full_matrices, bool compute_uv) {
  const int64_t r = a.rank(), rows = a.shape[r - 2], n = a.shape[r - 1];
  const int64_t n2 = n + n % 2;
  Value padded = a;
  if (n2 != n) {
    padded = b.concatenate({a, splat(b, 0, a.type, with_matrix(batch_of(a), rows, 1))}, r - 1);
  }
  if (n == 0) {
    Shape s_shape = batch_of(a);
    s_shape.push_back(0);
    return {identity(b, batch_of(a), rows, full_matrices ? rows : 0, a.type),
            splat(b, 0, a.type, s_shape), splat(b, 0, a.type, with_matrix(batch_of(a), 0, 0))};
  }
  Jacobi j = orthogonalize_columns(b, padded);
  Value norms = b.sqrt(column_dots(b, j.columns, j.columns));  // [..., 1, N2]
  Value key = norms;
  if (n2 != n) {
    // The padding column is never rotated: V's last row marks it; it sorts last.
    Value marker = rows_of(b, j.rotations, n2 - 1, n2);
    key = b.select(b.eq(marker, c(b, 1, marker)), c(b, -1, key), key);
  }
  Value s = cols_of(b, sort_columns(b, key, norms), 0, n);
  Shape s_shape = batch_of(a);
  s_shape.push_back(n);
  Svd out{Value(), b.reshape(s, s_shape), Value()};
  if (!compute_uv) return out;
  Value columns = cols_of(b, sort_columns(b, key, j.columns), 0, n);
  Value v = block(b, sort_columns(b, key, j.rotations), 0, n, 0, n);
  Value s_wide = broadcast_to(b, s, columns.shape);
  Value zero = c(b, 0, columns);
  Value u = b.select(b.gt(s_wide, zero), b.divide(columns, s_wide), zero);
  // Q of u's QR is u up to column signs where s > 0, and completes it everywhere else.
  Reflectors f = householder(b, u);
  Value basis = identity(b, batch_of(a), rows, full_matrices ? rows : n, a.type);
  Value q = apply_reflectors(b, f.packed, f.tau, basis, /*transposed=*/false);
  if (n > 0) {
    Value on_diagonal = b.eq(b.iota(f.packed.shape, ElementType::S64, r - 2),
                             b.iota(f.packed.shape, ElementType::S64, r - 1));
    Value diagonal = sum(b, b.select(on_diagonal, f.packed, c(b, 0, f.packed)), {r - 2});
    Value flip = b.reshape(b.lt(diagonal, c(b, 0, diagonal)), with_matrix(batch_of(a), 1, n));
    Value sign = b.select(flip, splat(b, -1, a.type, flip.shape), splat(b, 1, a.type, flip.shape));
    if (q.shape[r - 1] > n) {
      sign = b.concatenate(
          {sign, splat(b, 1, a.type, with_matrix(batch_of(a), 1, q.shape[r - 1] - n))}, r - 1);
    }
    q = b.multiply(q, broadcast_to(b, sign, q.shape));
  }
  out.u = q;
  out.vh = matrix_transpose(b, v);
  return out;
}

// _linalg_svd(A, full_matrices, compute_uv, driver) -> (U, S, Vh); U and Vh are empty without
// compute_uv. A wide A is decomposed through its transpose: A^T = U' S V'^T gives U = V',
// Vh = U'^T.
LOWER({"_linalg_svd", "_linalg_svd.U"}, [](LoweringContext& ctx) {
  Value a = matrix_input(ctx, 0, "torch.linalg.svd");
  Builder& b = ctx.b;
  bool full_matrices = ctx.arg(1).toBool(), compute_uv = ctx.arg(2).toBool();
  // CPU's LAPACK refuses a NaN matrix, and an infinite one where it computes U and V (its
  // singular values alone come out NaN, so matrix_rank of an infinite matrix answers 0): here
  // the device checks the same (matrix_rank and pinv of a NaN matrix answered 0 and zeros).
  check_no_nan_at_runtime(
      b, a, /*infinity_too=*/compute_uv,
      "a matrix holding non-finite values (linalg.svd: The algorithm failed to converge because "
      "the input matrix contained non-finite values.)");
  const int64_t r = a.rank(), m = a.shape[r - 2], n = a.shape[r - 1];
  bool wide_matrix = m < n;
  Value x = wide(b, a);
  if (wide_matrix) x = matrix_transpose(b, x);
  Svd d = tall_svd(b, x, full_matrices, compute_uv);
  Value s = b.convert(d.s, a.type);
  if (!compute_uv) return Values{splat(b, 0, a.type, {0}), s, splat(b, 0, a.type, {0})};
  Value u = wide_matrix ? matrix_transpose(b, d.vh) : d.u;
  Value vh = wide_matrix ? matrix_transpose(b, d.u) : d.vh;
  return Values{b.convert(u, a.type), s, b.convert(vh, a.type)};
});

}  // namespace
}  // namespace torch_tpu::aten
