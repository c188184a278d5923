// The symmetric eigendecomposition by parallel two-sided Jacobi: each round applies plane
// rotations J to both sides (A <- J^T A J) for n/2 disjoint index pairs, accumulating V <- V J,
// until a whole sweep needs no rotation; the diagonal then holds the eigenvalues (sorted
// ascending, as LAPACK's syevd) and V the eigenvectors. Only the triangle UPLO names is read.
#include <c10/util/Exception.h>

#include <cmath>
#include <string>

#include "csrc/aten/arith.h"
#include "csrc/aten/common.h"
#include "csrc/aten/jacobi.h"
#include "csrc/aten/matrix.h"

namespace torch_tpu::aten {
namespace {

// The symmetric matrix whose lower (or upper) triangle is that of `a`.
Value symmetric_from(Builder& b, const Value& a, bool lower) {
  Value triangle_part = triangle(b, a, /*upper=*/!lower);
  Value strict = triangle(b, a, /*upper=*/!lower, lower ? -1 : 1);
  return b.add(triangle_part, matrix_transpose(b, strict));
}

// The diagonal of `a` [..., n, n] as [..., 1, n].
Value diagonal_row(Builder& b, const Value& a) {
  const int64_t r = a.rank(), n = a.shape[r - 1];
  Value on_diagonal =
      b.eq(b.iota(a.shape, ElementType::S64, r - 2), b.iota(a.shape, ElementType::S64, r - 1));
  Value d = sum(b, b.select(on_diagonal, a, c(b, 0, a)), {r - 2});
  return b.reshape(d, with_matrix(batch_of(a), 1, n));
}

struct Eigen {
  Value values;   // [..., 1, n2], unsorted
  Value vectors;  // [..., n2, n2]
};

Eigen diagonalize(Builder& b, const Value& a) {
  const int64_t r = a.rank(), n2 = a.shape[r - 1], h = n2 / 2;
  const double eps = epsilon(a.type);
  Value v = identity(b, batch_of(a), n2, n2, a.type);
  auto state = b.while_loop(
      {a, v, b.constant_int(0, ElementType::S64), b.constant_int(0, ElementType::S64)},
      [&](Builder& q, const std::vector<Value>& s) {
        return std::vector<Value>{keep_going(q, s[2], s[3], n2 - 1)};
      },
      [&](Builder& q, const std::vector<Value>& s) {
        const Value& m = s[0];
        Value d = diagonal_row(q, m);
        Value alpha = cols_of(q, d, 0, h), beta = cols_of(q, d, h, n2);
        // a[i, h + i]: the diagonal of the top-right block.
        Value gamma = diagonal_row(q, block(q, m, 0, h, h, n2));
        // Off-diagonal entries below eps * sqrt(|a_pp a_qq|), or below eps times the matrix's
        // norm (which rotations keep), no longer move the eigenvalues.
        Value frobenius = q.sqrt(sum(q, q.multiply(m, m), {r - 2, r - 1}));
        Shape one = with_matrix(batch_of(m), 1, 1);
        Value floor = broadcast_to(q, q.reshape(frobenius, one), alpha.shape);
        Value threshold =
            q.multiply(c(q, eps, alpha), q.add(q.sqrt(q.abs(q.multiply(alpha, beta))), floor));
        Rotation rotation = jacobi_rotation(q, alpha, beta, gamma, threshold);
        Value turned = rotate_column_pairs(q, m, rotation);
        turned = matrix_transpose(q, rotate_column_pairs(q, matrix_transpose(q, turned), rotation));
        auto [round, quiet] = next_counters(q, s[2], s[3], rotation.active);
        return std::vector<Value>{turned, rotate_column_pairs(q, s[1], rotation), round, quiet};
      });
  return {diagonal_row(b, state[0]), state[1]};
}

// _linalg_eigh(A, UPLO, compute_v) -> (eigenvalues, eigenvectors); eigenvectors is empty
// without compute_v.
LOWER({"_linalg_eigh", "_linalg_eigh.eigenvalues"}, [](LoweringContext& ctx) {
  Value a = matrix_input(ctx, 0, "torch.linalg.eigh");
  Builder& b = ctx.b;
  std::string uplo(ctx.arg(1).toStringView());
  TORCH_CHECK(uplo == "L" || uplo == "U" || uplo == "l" || uplo == "u",
              "Expected UPLO argument to be 'L' or 'U', but got ", uplo);
  bool compute_v = ctx.arg(2).toBool();
  const int64_t r = a.rank(), n = a.shape[r - 1];
  TORCH_CHECK(a.shape[r - 2] == n, "torch.linalg.eigh: A must be batches of square matrices, but ",
              "they are ", a.shape[r - 2], " by ", n, " matrices");
  Shape values_shape = batch_of(a);
  values_shape.push_back(n);
  // CPU's LAPACK fails to converge on a non-finite matrix (eigvalsh and a hermitian pinv or
  // matrix_rank of a NaN matrix answered NaNs, zeros and 0 here).
  check_no_nan_at_runtime(b, a, /*infinity_too=*/true,
                          "a matrix holding non-finite values (linalg.eigh: The algorithm failed "
                          "to converge because the input matrix is ill-conditioned or has too "
                          "many repeated eigenvalues)");
  Value empty = splat(b, 0, a.type, {0});
  if (n == 0) {
    return Values{splat(b, 0, a.type, values_shape),
                  compute_v ? splat(b, 0, a.type, a.shape) : empty};
  }
  Value x = symmetric_from(b, wide(b, a), uplo == "L" || uplo == "l");
  const int64_t n2 = n + n % 2;
  if (n2 != n) {
    std::vector<int64_t> low(r, 0), high(r, 0), interior(r, 0);
    high[r - 2] = 1;
    high[r - 1] = 1;
    x = b.pad(x, splat(b, 0, x.type, {}), low, high, interior);
  }
  Eigen e = diagonalize(b, x);
  Value key = e.values;
  if (n2 != n) {
    // The padding row and column stay apart (never rotated): V's last row marks them.
    Value marker = rows_of(b, e.vectors, n2 - 1, n2);
    key = b.select(b.eq(marker, c(b, 1, marker)), c(b, INFINITY, key), key);
  }
  auto ascending = [&](const Value& m) {
    auto sorted = b.sort({broadcast_to(b, key, m.shape), m}, r - 1, /*stable=*/true,
                         [](Builder& q, const std::vector<Value>& p) {
                           return std::vector<Value>{q.lt(p[0], p[1])};
                         });
    return sorted[1];
  };
  Value values = b.reshape(cols_of(b, ascending(e.values), 0, n), values_shape);
  Value vectors = empty;
  if (compute_v) vectors = b.convert(block(b, ascending(e.vectors), 0, n, 0, n), a.type);
  return Values{b.convert(values, a.type), vectors};
});

}  // namespace
}  // namespace torch_tpu::aten
