// LU factorization with partial pivoting (LAPACK getrf's rule: the first largest |a| in the
// column; a zero pivot is recorded in info and left unscaled) and what it gives: inverse,
// solve, determinant and log-determinant. Matrices are small and their size static, so the
// n elimination steps are unrolled into vector operations over the batch.
#include <c10/util/Exception.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include "csrc/aten/common.h"
#include "csrc/aten/matrix.h"

namespace torch_tpu::aten {
namespace {

struct Lu {
  Value lu;      // [..., n, n] packed L (unit, below the diagonal) and U
  Value perm;    // [..., n] s64: row i of P A is row perm[i] of A
  Value pivots;  // [..., n] s32, 1-based, LAPACK's
  Value info;    // [...] s32: first zero pivot (1-based), or 0
};

Value s64(Builder& b, int64_t v, const Shape& shape) {
  return splat(b, static_cast<double>(v), ElementType::S64, shape);
}

Shape appended(Shape shape, int64_t size) {
  shape.push_back(size);
  return shape;
}

// Entry k of the last dimension of `v`, broadcast back to v's shape.
Value entry_everywhere(Builder& b, const Value& v, int64_t k) {
  std::vector<int64_t> lo(v.rank(), 0), hi(v.shape.begin(), v.shape.end()), step(v.rank(), 1);
  lo.back() = k;
  hi.back() = k + 1;
  return broadcast_to(b, b.slice(v, lo, hi, step), v.shape);
}

// `v` [..., n] with entries k and p (per batch, broadcast to v's shape) exchanged.
Value swap_entries(Builder& b, const Value& v, const Value& iota, int64_t k, const Value& p) {
  const int64_t last = v.rank() - 1;
  Value at_k = entry_everywhere(b, v, k);
  Value at_p = b.reduce(b.select(b.eq(iota, p), v, splat(b, 0, v.type, v.shape)),
                        splat(b, 0, v.type, {}), {last}, BinaryOp::Add);
  Shape batch(v.shape.begin(), v.shape.end() - 1);
  at_p = broadcast_to(b, b.reshape(at_p, appended(batch, 1)), v.shape);
  Value is_k = b.eq(iota, splat(b, static_cast<double>(k), iota.type, iota.shape));
  return b.select(is_k, at_p, b.select(b.eq(iota, p), at_k, v));
}

Lu factor(Builder& b, Value a) {
  // Rectangular [..., m, n] factors take min(m, n) steps, as getrf.
  const int64_t r = a.rank(), m = a.shape[r - 2], n = a.shape[r - 1];
  const int64_t steps = std::min(m, n);
  Shape batch(a.shape.begin(), a.shape.end() - 2);
  Shape vec = appended(batch, m);
  Shape pivot_shape = appended(batch, steps);
  Shape col_shape = appended(appended(batch, m), 1);
  Shape one = appended(appended(batch, 1), 1);
  Value row_iota = b.iota(a.shape, ElementType::S64, r - 2);
  Value col_iota = b.iota(a.shape, ElementType::S64, r - 1);
  Value col_rows = b.iota(col_shape, ElementType::S64, r - 2);
  Value vec_iota = b.iota(vec, ElementType::S64, r - 2);
  Value pivot_iota = b.iota(pivot_shape, ElementType::S64, r - 2);
  Value perm = vec_iota;
  Value pivots = splat(b, 0, ElementType::S32, pivot_shape);
  Value info = splat(b, 0, ElementType::S32, batch);
  Value zero = splat(b, 0, a.type, a.shape);
  for (int64_t k = 0; k < steps; ++k) {
    // The pivot: the first row at or below k with the largest |a[:, k]|.
    Value magnitude = b.abs(cols_of(b, a, k, k + 1));
    Value candidates =
        b.select(b.ge(col_rows, s64(b, k, col_shape)), magnitude, splat(b, -1, a.type, col_shape));
    Value best =
        b.reshape(b.reduce(candidates, b.constant(-1.0, a.type), {r - 2}, BinaryOp::Maximum), one);
    Value hit = b.eq(candidates, broadcast_to(b, best, col_shape));
    Value first =
        b.reduce(b.select(hit, col_rows, s64(b, m, col_shape)), b.constant_int(m, ElementType::S64),
                 {r - 2}, BinaryOp::Minimum);  // [..., 1]
    first = b.reshape(first, batch);
    first = b.select(b.ge(first, s64(b, m, batch)), s64(b, k, batch), first);  // NaN
    // Swap rows k and p of a, and of the permutation.
    Value p = broadcast_to(b, b.reshape(first, one), a.shape);
    Value row_k = broadcast_to(b, rows_of(b, a, k, k + 1), a.shape);
    Value row_p = b.reduce(b.select(b.eq(row_iota, p), a, zero), b.constant(0.0, a.type), {r - 2},
                           BinaryOp::Add);
    Shape row_shape = batch;
    row_shape.push_back(1);
    row_shape.push_back(n);
    row_p = broadcast_to(b, b.reshape(row_p, row_shape), a.shape);
    Value is_k = b.eq(row_iota, s64(b, k, a.shape));
    a = b.select(is_k, row_p, b.select(b.eq(row_iota, p), row_k, a));
    Value pv = broadcast_to(b, b.reshape(first, appended(batch, 1)), vec);
    perm = swap_entries(b, perm, vec_iota, k, pv);
    Value pivot_is_k = b.eq(pivot_iota, s64(b, k, pivot_shape));
    Value pivot_value = broadcast_to(b, b.reshape(first, appended(batch, 1)), pivot_shape);
    pivots =
        b.select(pivot_is_k,
                 b.convert(b.add(pivot_value, s64(b, 1, pivot_shape)), ElementType::S32), pivots);
    // Eliminate below the pivot; a zero pivot is recorded and the column left unscaled.
    Value d = b.slice(
        a,
        [&] {
          std::vector<int64_t> lo(r, 0);
          lo[r - 2] = k;
          lo[r - 1] = k;
          return lo;
        }(),
        [&] {
          std::vector<int64_t> hi(a.shape.begin(), a.shape.end());
          hi[r - 2] = k + 1;
          hi[r - 1] = k + 1;
          return hi;
        }(),
        std::vector<int64_t>(r, 1));  // [..., 1, 1]
    Value d_is_zero = b.reshape(b.eq(d, splat(b, 0, a.type, one)), batch);
    info = b.select(b.and_(d_is_zero, b.eq(info, splat(b, 0, ElementType::S32, batch))),
                    splat(b, static_cast<double>(k + 1), ElementType::S32, batch), info);
    Value column = cols_of(b, a, k, k + 1);  // [..., n, 1]
    Value d_col = broadcast_to(b, d, col_shape);
    Value scaled =
        b.select(b.eq(d_col, splat(b, 0, a.type, col_shape)), column, b.divide(column, d_col));
    Value below = b.gt(col_rows, s64(b, k, col_shape));
    Value factor = b.select(below, scaled, splat(b, 0, a.type, col_shape));
    Value factor_b = broadcast_to(b, factor, a.shape);
    Value pivot_row = broadcast_to(b, rows_of(b, a, k, k + 1), a.shape);
    Value below_b = b.gt(row_iota, s64(b, k, a.shape));
    Value right = b.gt(col_iota, s64(b, k, a.shape));
    a = b.subtract(a, b.select(b.and_(below_b, right), b.multiply(factor_b, pivot_row), zero));
    a = b.select(b.and_(below_b, b.eq(col_iota, s64(b, k, a.shape))), factor_b, a);
  }
  return {a, perm, pivots, info};
}

// The rows of `rhs` permuted by perm (row i of the result is row perm[i]), or by its inverse.
Value permute_rows(Builder& b, const Value& perm, const Value& rhs, bool inverse) {
  const int64_t r = rhs.rank();
  Shape square = appended(Shape(perm.shape.begin(), perm.shape.end()), perm.shape.back());
  Shape column = appended(Shape(perm.shape.begin(), perm.shape.end()), 1);
  Value perm_b = broadcast_to(b, b.reshape(perm, column), square);
  Value onehot = b.convert(b.eq(perm_b, b.iota(square, ElementType::S64, r - 1)), rhs.type);
  std::vector<int64_t> batch;
  for (int64_t d = 0; d < r - 2; ++d) batch.push_back(d);
  return b.dot_general(onehot, rhs, batch, batch, {inverse ? r - 2 : r - 1}, {r - 2}, rhs.type);
}

// Solves A X = B from P A = L U: X = U^-1 L^-1 P B.
Value solve_with(Builder& b, const Lu& f, const Value& rhs) {
  Value y = triangular_substitute(b, f.lu, permute_rows(b, f.perm, rhs, false), false, true);
  return triangular_substitute(b, f.lu, y, true, false);
}

// Solves A^T X = B from P A = L U: U^T z = B, then L^T w = z, then X = P^T w.
Value solve_adjoint_with(Builder& b, const Lu& f, const Value& rhs) {
  std::vector<int64_t> order(f.lu.rank());
  for (int64_t d = 0; d < f.lu.rank(); ++d) order[d] = d;
  std::swap(order[f.lu.rank() - 2], order[f.lu.rank() - 1]);
  Value lu_t = b.transpose(f.lu, order);
  Value z = triangular_substitute(b, lu_t, rhs, false, false);
  Value w = triangular_substitute(b, lu_t, z, true, true);
  return permute_rows(b, f.perm, w, true);
}

// The permutation of `rows` rows by LAPACK's sequential pivots (1-based swaps).
Value permutation_of(Builder& b, const Value& pivots, int64_t rows) {
  const int64_t steps = pivots.shape.back();
  Shape vec = Shape(pivots.shape.begin(), pivots.shape.end() - 1);
  vec.push_back(rows);
  Value iota = b.iota(vec, ElementType::S64, pivots.rank() - 1);
  Value targets = b.subtract(b.convert(pivots, ElementType::S64), s64(b, 1, pivots.shape));
  Value perm = iota;
  for (int64_t k = 0; k < steps; ++k) {
    Value target =
        broadcast_to(b,
                     b.slice(
                         targets,
                         [&] {
                           std::vector<int64_t> lo(targets.rank(), 0);
                           lo.back() = k;
                           return lo;
                         }(),
                         [&] {
                           std::vector<int64_t> hi(targets.shape.begin(), targets.shape.end());
                           hi.back() = k + 1;
                           return hi;
                         }(),
                         std::vector<int64_t>(targets.rank(), 1)),
                     vec);
    perm = swap_entries(b, perm, iota, k, target);
  }
  return perm;
}

Value square_input(LoweringContext& ctx, int index, const char* name) {
  Value a = matrix_input(ctx, index, name);
  TORCH_CHECK(a.shape[a.rank() - 1] == a.shape[a.rank() - 2], name,
              ": A must be batches of square matrices, but they are ", a.shape[a.rank() - 2],
              " by ", a.shape[a.rank() - 1], " matrices");
  return a;
}

// The factors broadcast to a system's batch (torch.linalg broadcasts A's batch against B's).
Lu broadcast_factors(Builder& b, const Lu& f, const Shape& batch) {
  return {with_batch(b, f.lu, batch), with_batch(b, f.perm, batch, 1), f.pivots, f.info};
}

// P (rows x rows) with A = P L U from the permutation: P[perm[i], i] = 1.
Value permutation_matrix(Builder& b, const Value& perm, ElementType type) {
  const int64_t r = perm.rank() + 1, rows = perm.shape.back();
  Shape square = appended(Shape(perm.shape.begin(), perm.shape.end()), rows);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < r - 2; ++d) dims.push_back(d);
  dims.push_back(r - 1);
  return b.convert(
      b.eq(b.iota(square, ElementType::S64, r - 2), b.broadcast_in_dim(perm, square, dims)), type);
}

// Unit-lower L [..., m, k] and upper U [..., k, n] of a packed factor, k = min(m, n).
std::pair<Value, Value> unpack_factors(Builder& b, const Value& lu) {
  const int64_t r = lu.rank(), m = lu.shape[r - 2], n = lu.shape[r - 1], k = std::min(m, n);
  Value rows = b.iota(lu.shape, ElementType::S64, r - 2);
  Value cols = b.iota(lu.shape, ElementType::S64, r - 1);
  Value zero = splat(b, 0, lu.type, lu.shape);
  Value l = b.select(b.gt(rows, cols), lu,
                     b.select(b.eq(rows, cols), splat(b, 1, lu.type, lu.shape), zero));
  Value u = b.select(b.le(rows, cols), lu, zero);
  return {cols_of(b, l, 0, k), rows_of(b, u, 0, k)};
}

// linalg_lu(A, pivot) -> (P, L, U).
LOWER({"linalg_lu", "linalg_lu.out"}, [](LoweringContext& ctx) {
  Value a = matrix_input(ctx, 0, "torch.linalg.lu");
  TORCH_CHECK_NOT_IMPLEMENTED(ctx.arg(1).toBool(),
                              "torch_tpu: LU without pivoting is not "
                              "implemented for the tpu device");
  Builder& b = ctx.b;
  Lu f = factor(b, wide(b, a));
  auto [l, u] = unpack_factors(b, f.lu);
  return Values{permutation_matrix(b, f.perm, a.type), b.convert(l, a.type), b.convert(u, a.type)};
});

LOWER({"linalg_lu_factor_ex", "linalg_lu_factor_ex.out"}, [](LoweringContext& ctx) {
  Value a = matrix_input(ctx, 0, "torch.linalg.lu_factor");
  TORCH_CHECK_NOT_IMPLEMENTED(ctx.arg(1).toBool(),
                              "torch_tpu: LU without pivoting is not "
                              "implemented for the tpu device");
  Lu f = factor(ctx.b, wide(ctx.b, a));
  return Values{ctx.b.convert(f.lu, a.type), f.pivots, f.info};
});

LOWER({"linalg_inv_ex", "linalg_inv_ex.inverse"}, [](LoweringContext& ctx) {
  Value a = square_input(ctx, 0, "linalg.inv");
  Builder& b = ctx.b;
  Lu f = factor(b, wide(b, a));
  int64_t r = a.rank();
  Value eye = b.convert(
      b.eq(b.iota(a.shape, ElementType::S64, r - 2), b.iota(a.shape, ElementType::S64, r - 1)),
      f.lu.type);
  return Values{b.convert(solve_with(b, f, eye), a.type), f.info};
});

// _linalg_solve_ex(A, B, left, check_errors) -> (result, LU, pivots, info), for left=True; the
// batches broadcast, and LU, pivots and info are A's.
LOWER({"_linalg_solve_ex", "_linalg_solve_ex.result"}, [](LoweringContext& ctx) {
  Value a = square_input(ctx, 0, "torch.linalg.solve");
  Builder& b = ctx.b;
  Value rhs = ctx.tensor(1);
  TORCH_CHECK_NOT_IMPLEMENTED(ctx.arg(2).toBool(),
                              "torch_tpu: linalg.solve with left=False is "
                              "not implemented for the tpu device");
  // B is a vector (per matrix) when it has one dimension, or A's shape without the last.
  bool vector = rhs.rank() == 1 || (rhs.rank() == a.rank() - 1 &&
                                    rhs.shape == Shape(a.shape.begin(), a.shape.end() - 1));
  Value matrix = vector ? b.reshape(rhs, appended(rhs.shape, 1)) : rhs;
  const int64_t n = a.shape.back();
  TORCH_CHECK(matrix.shape[matrix.rank() - 2] == n,
              "linalg.solve: Incompatible shapes of A and B for the equation AX = B");
  Shape batch = broadcast_shapes(batch_of(a), batch_of(matrix));
  Lu f = factor(b, wide(b, a));
  Value x = solve_with(b, broadcast_factors(b, f, batch),
                       with_batch(b, b.convert(matrix, f.lu.type), batch));
  Shape result_shape = vector ? appended(batch, n) : with_matrix(batch, n, matrix.shape.back());
  return Values{b.reshape(b.convert(x, a.type), result_shape), b.convert(f.lu, a.type), f.pivots,
                f.info};
});

// linalg_lu_solve(LU, pivots, B, left, adjoint), the batches broadcast. Solving from the
// right, X A = B, is the transposed system A^T X^T = B^T.
LOWER({"linalg_lu_solve", "linalg_lu_solve.out"}, [](LoweringContext& ctx) {
  Value lu = square_input(ctx, 0, "torch.linalg.lu_solve");
  Builder& b = ctx.b;
  bool left = ctx.arg(3).toBool(), adjoint = ctx.arg(4).toBool();
  Value rhs = ctx.tensor(2);
  Value system_rhs = left ? rhs : matrix_transpose(b, rhs);
  TORCH_CHECK(system_rhs.shape[system_rhs.rank() - 2] == lu.shape.back(),
              "linalg.lu_solve: Incompatible shapes of A and B for the equation");
  Shape batch = broadcast_shapes(batch_of(lu), batch_of(system_rhs));
  Value pivots = ctx.tensor(1);
  const int64_t rows = lu.shape[lu.rank() - 2];
  // Pivots are 1-based rows; CPU checks them, here the device does (raising at the next sync).
  b.check_at_runtime(
      all_of(b,
             b.and_(b.ge(pivots, splat(b, 1, pivots.type, pivots.shape)),
                    b.le(pivots, splat(b, static_cast<double>(rows), pivots.type, pivots.shape)))),
      Builder::CheckKind::RaisesRuntimeError,
      "pivots out of range (Pivots given to lu_solve must all be smaller or equal to LU.size(-2). "
      "Did you properly pass the result of lu_factor?)");
  Lu f =
      broadcast_factors(b, {wide(b, lu), permutation_of(b, pivots, rows), Value(), Value()}, batch);
  Value x = with_batch(b, b.convert(system_rhs, f.lu.type), batch);
  bool transposed_system = adjoint != !left;
  x = transposed_system ? solve_adjoint_with(b, f, x) : solve_with(b, f, x);
  if (!left) x = matrix_transpose(b, x);
  return Values{b.convert(x, rhs.type)};
});

// The product of U's diagonal, and the sign of the row exchanges.
std::pair<Value, Value> diagonal_and_sign(Builder& b, const Lu& f) {
  const int64_t r = f.lu.rank(), n = f.lu.shape[r - 1];
  Value on_diagonal = b.eq(b.iota(f.lu.shape, ElementType::S64, r - 2),
                           b.iota(f.lu.shape, ElementType::S64, r - 1));
  Value diagonal = b.reduce(b.select(on_diagonal, f.lu, splat(b, 0, f.lu.type, f.lu.shape)),
                            b.constant(0.0, f.lu.type), {r - 1}, BinaryOp::Add);  // [..., n]
  Value position = b.iota(f.pivots.shape, ElementType::S32, r - 2);
  Value swapped = b.ne(f.pivots, b.add(position, splat(b, 1, ElementType::S32, position.shape)));
  Value swaps = b.reduce(b.convert(swapped, ElementType::S32), b.constant_int(0, ElementType::S32),
                         {r - 2}, BinaryOp::Add);
  Value odd = b.eq(b.remainder(swaps, splat(b, 2, ElementType::S32, swaps.shape)),
                   splat(b, 1, ElementType::S32, swaps.shape));
  Value sign =
      b.select(odd, splat(b, -1, f.lu.type, swaps.shape), splat(b, 1, f.lu.type, swaps.shape));
  (void)n;
  return {diagonal, sign};
}

// As CPU, det and slogdet factor A^T when A is contiguous (it is then column-major for
// LAPACK); their backward formulas expect that factorization.
Lu factor_for_det(LoweringContext& ctx, const Value& a) {
  Value x = wide(ctx.b, a);
  if (ctx.tensor_meta(0).is_contiguous()) {
    std::vector<int64_t> order(a.rank());
    for (int64_t d = 0; d < a.rank(); ++d) order[d] = d;
    std::swap(order[a.rank() - 2], order[a.rank() - 1]);
    x = ctx.b.transpose(x, order);
  }
  return factor(ctx.b, x);
}

LOWER({"_linalg_det", "_linalg_det.result"}, [](LoweringContext& ctx) {
  Value a = square_input(ctx, 0, "linalg.det");
  Builder& b = ctx.b;
  Lu f = factor_for_det(ctx, a);
  auto [diagonal, sign] = diagonal_and_sign(b, f);
  Value det = b.multiply(
      sign, b.reduce(diagonal, b.constant(1.0, diagonal.type), {a.rank() - 2}, BinaryOp::Multiply));
  return Values{b.convert(det, a.type), b.convert(f.lu, a.type), f.pivots};
});

LOWER({"_linalg_slogdet", "_linalg_slogdet.sign"}, [](LoweringContext& ctx) {
  Value a = square_input(ctx, 0, "linalg.slogdet");
  Builder& b = ctx.b;
  Lu f = factor_for_det(ctx, a);
  auto [diagonal, sign] = diagonal_and_sign(b, f);
  int64_t last = a.rank() - 2;
  Value negatives = b.reduce(
      b.convert(b.lt(diagonal, splat(b, 0, diagonal.type, diagonal.shape)), ElementType::S32),
      b.constant_int(0, ElementType::S32), {last}, BinaryOp::Add);
  Value flip = b.eq(b.remainder(negatives, splat(b, 2, ElementType::S32, negatives.shape)),
                    splat(b, 1, ElementType::S32, negatives.shape));
  sign = b.select(flip, b.negate(sign), sign);
  Value logabs =
      b.reduce(b.log(b.abs(diagonal)), b.constant(0.0, diagonal.type), {last}, BinaryOp::Add);
  Value singular = b.eq(logabs, splat(b, -INFINITY, logabs.type, logabs.shape));
  sign = b.select(singular, splat(b, 0, sign.type, sign.shape), sign);
  return Values{b.convert(sign, a.type), b.convert(logabs, a.type), b.convert(f.lu, a.type),
                f.pivots};
});

// lu_unpack(LU, pivots, unpack_data, unpack_pivots) -> (P, L, U) with A = P L U; what is not
// unpacked comes back empty, as on CPU.
LOWER({"lu_unpack", "lu_unpack.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  // Unpacking only selects and permutes: CPU's kernel takes every dtype, so does this one.
  Value lu = ctx.tensor(0);
  TORCH_CHECK(lu.rank() >= 2,
              "torch.lu_unpack: The input tensor A must have at least 2 dimensions.");
  bool unpack_data = ctx.arg(2).toBool(), unpack_pivots = ctx.arg(3).toBool();
  Value empty = splat(b, 0, lu.type, {0});
  Value p = empty, l = empty, u = empty;
  if (unpack_data) std::tie(l, u) = unpack_factors(b, lu);
  if (unpack_pivots) {
    const int64_t rows = lu.shape[lu.rank() - 2];
    Value pivots = b.convert(ctx.tensor(1), ElementType::S64);
    // CPU takes pivots of another batch shape and reads them out of bounds: refused here.
    Shape batch(lu.shape.begin(), lu.shape.end() - 2);
    Shape pivot_batch(pivots.shape.begin(), pivots.shape.end() - 1);
    TORCH_CHECK(pivot_batch == batch, "torch.lu_unpack: the pivots' batch dimensions ",
                c10::IntArrayRef(pivot_batch), " must be LU's, ", c10::IntArrayRef(batch));
    if (rows == 0) {  // nothing to permute: CPU reads no pivot, and neither does this
      Shape square = batch;
      square.insert(square.end(), {0, 0});
      return Values{splat(b, 0, lu.type, square), l, u};
    }
    b.check_at_runtime(all_of(b, b.and_(b.ge(pivots, splat(b, 1, ElementType::S64, pivots.shape)),
                                        b.le(pivots, splat(b, static_cast<double>(rows),
                                                           ElementType::S64, pivots.shape)))),
                       Builder::CheckKind::RaisesRuntimeError, "pivots outside [1, LU.size(-2)]");
    p = permutation_matrix(b, permutation_of(b, ctx.tensor(1), rows), lu.type);
  }
  return Values{p, l, u};
});

}  // namespace
}  // namespace torch_tpu::aten
