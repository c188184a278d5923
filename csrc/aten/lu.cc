// LU factorization with partial pivoting (LAPACK getrf's rule: the first largest |a| in the
// column; a zero pivot is recorded in info and left unscaled) and what it gives: inverse,
// solve, determinant and log-determinant. Matrices are small and their size static, so the
// n elimination steps are unrolled into vector operations over the batch.
#include <c10/util/Exception.h>

#include <utility>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

struct Lu {
  Value lu;      // [..., n, n] packed L (unit, below the diagonal) and U
  Value perm;    // [..., n] s64: row i of P A is row perm[i] of A
  Value pivots;  // [..., n] s32, 1-based, LAPACK's
  Value info;    // [...] s32: first zero pivot (1-based), or 0
};

Value rows_of(Builder& b, const Value& x, int64_t start, int64_t stop) {
  std::vector<int64_t> lo(x.rank(), 0), hi(x.shape.begin(), x.shape.end()), step(x.rank(), 1);
  lo[x.rank() - 2] = start;
  hi[x.rank() - 2] = stop;
  return b.slice(x, lo, hi, step);
}

Value cols_of(Builder& b, const Value& x, int64_t start, int64_t stop) {
  std::vector<int64_t> lo(x.rank(), 0), hi(x.shape.begin(), x.shape.end()), step(x.rank(), 1);
  lo[x.rank() - 1] = start;
  hi[x.rank() - 1] = stop;
  return b.slice(x, lo, hi, step);
}

Value s64(Builder& b, int64_t v, const Shape& shape) {
  return splat(b, static_cast<double>(v), ElementType::S64, shape);
}

// Batched [..., 1, n] x [..., n, m].
Value row_times(Builder& b, const Value& row, const Value& m) {
  std::vector<int64_t> batch;
  for (int64_t d = 0; d < m.rank() - 2; ++d) batch.push_back(d);
  return b.dot_general(row, m, batch, batch, {row.rank() - 1}, {m.rank() - 2}, m.type);
}

Lu factor(Builder& b, Value a) {
  const int64_t r = a.rank(), n = a.shape[r - 1];
  Shape batch(a.shape.begin(), a.shape.end() - 2);
  Shape vec = batch;
  vec.push_back(n);
  Shape col_shape = batch;
  col_shape.push_back(n);
  col_shape.push_back(1);
  Shape one = batch;
  one.push_back(1);
  one.push_back(1);
  Value row_iota = b.iota(a.shape, ElementType::S64, r - 2);
  Value col_iota = b.iota(a.shape, ElementType::S64, r - 1);
  Value col_rows = b.iota(col_shape, ElementType::S64, r - 2);
  Value vec_iota = b.iota(vec, ElementType::S64, r - 2);
  Value perm = vec_iota;
  Value pivots = splat(b, 0, ElementType::S32, vec);
  Value info = splat(b, 0, ElementType::S32, batch);
  Value zero = splat(b, 0, a.type, a.shape);
  for (int64_t k = 0; k < n; ++k) {
    // The pivot: the first row at or below k with the largest |a[:, k]|.
    Value magnitude = b.unary("abs", cols_of(b, a, k, k + 1));
    Value candidates = b.select(b.compare("GE", col_rows, s64(b, k, col_shape)), magnitude,
                                splat(b, -1, a.type, col_shape));
    Value best = b.reshape(b.reduce(candidates, b.constant(-1.0, a.type), {r - 2}, "maximum"), one);
    Value hit = b.compare("EQ", candidates, broadcast_to(b, best, col_shape));
    Value first = b.reduce(b.select(hit, col_rows, s64(b, n, col_shape)),
                           b.constant_int(n, ElementType::S64), {r - 2}, "minimum");  // [..., 1]
    first = b.reshape(first, batch);
    first = b.select(b.compare("GE", first, s64(b, n, batch)), s64(b, k, batch), first);  // NaN
    // Swap rows k and p of a, and of the permutation.
    Value p = broadcast_to(b, b.reshape(first, one), a.shape);
    Value row_k = broadcast_to(b, rows_of(b, a, k, k + 1), a.shape);
    Value row_p = b.reduce(b.select(b.compare("EQ", row_iota, p), a, zero), b.constant(0.0, a.type),
                           {r - 2}, "add");
    Shape row_shape = batch;
    row_shape.push_back(1);
    row_shape.push_back(n);
    row_p = broadcast_to(b, b.reshape(row_p, row_shape), a.shape);
    Value is_k = b.compare("EQ", row_iota, s64(b, k, a.shape));
    a = b.select(is_k, row_p, b.select(b.compare("EQ", row_iota, p), row_k, a));
    Value pv = broadcast_to(b,
                            b.reshape(first,
                                      [&] {
                                        Shape s = batch;
                                        s.push_back(1);
                                        return s;
                                      }()),
                            vec);
    Value perm_k = broadcast_to(b,
                                b.slice(
                                    perm,
                                    [&] {
                                      std::vector<int64_t> lo(vec.size(), 0);
                                      lo.back() = k;
                                      return lo;
                                    }(),
                                    [&] {
                                      std::vector<int64_t> hi(vec.begin(), vec.end());
                                      hi.back() = k + 1;
                                      return hi;
                                    }(),
                                    std::vector<int64_t>(vec.size(), 1)),
                                vec);
    Value perm_p = b.reduce(b.select(b.compare("EQ", vec_iota, pv), perm, s64(b, 0, vec)),
                            b.constant_int(0, ElementType::S64), {r - 2}, "add");
    perm_p = broadcast_to(b,
                          b.reshape(perm_p,
                                    [&] {
                                      Shape s = batch;
                                      s.push_back(1);
                                      return s;
                                    }()),
                          vec);
    Value vec_is_k = b.compare("EQ", vec_iota, s64(b, k, vec));
    perm = b.select(vec_is_k, perm_p, b.select(b.compare("EQ", vec_iota, pv), perm_k, perm));
    pivots = b.select(vec_is_k, b.convert(b.binary("add", pv, s64(b, 1, vec)), ElementType::S32),
                      pivots);
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
    Value d_is_zero = b.reshape(b.compare("EQ", d, splat(b, 0, a.type, one)), batch);
    info = b.select(
        b.binary("and", d_is_zero, b.compare("EQ", info, splat(b, 0, ElementType::S32, batch))),
        splat(b, static_cast<double>(k + 1), ElementType::S32, batch), info);
    Value column = cols_of(b, a, k, k + 1);  // [..., n, 1]
    Value d_col = broadcast_to(b, d, col_shape);
    Value scaled = b.select(b.compare("EQ", d_col, splat(b, 0, a.type, col_shape)), column,
                            b.binary("divide", column, d_col));
    Value below = b.compare("GT", col_rows, s64(b, k, col_shape));
    Value factor = b.select(below, scaled, splat(b, 0, a.type, col_shape));
    Value factor_b = broadcast_to(b, factor, a.shape);
    Value pivot_row = broadcast_to(b, rows_of(b, a, k, k + 1), a.shape);
    Value below_b = b.compare("GT", row_iota, s64(b, k, a.shape));
    Value right = b.compare("GT", col_iota, s64(b, k, a.shape));
    a = b.binary(
        "subtract", a,
        b.select(b.binary("and", below_b, right), b.binary("multiply", factor_b, pivot_row), zero));
    a = b.select(b.binary("and", below_b, b.compare("EQ", col_iota, s64(b, k, a.shape))), factor_b,
                 a);
  }
  return {a, perm, pivots, info};
}

// Solves A X = B from A's factorization: X = U^-1 L^-1 P B.
Value solve_with(Builder& b, const Lu& f, const Value& rhs) {
  const Value& lu = f.lu;
  const int64_t r = lu.rank(), n = lu.shape[r - 1];
  // P B: row i is row perm[i] of B, by a one-hot product.
  Shape square = lu.shape;
  Shape perm_col = square;
  perm_col[r - 1] = 1;
  Value perm_b = broadcast_to(b, b.reshape(f.perm, perm_col), square);
  Value onehot =
      b.convert(b.compare("EQ", perm_b, b.iota(square, ElementType::S64, r - 1)), rhs.type);
  std::vector<int64_t> batch;
  for (int64_t d = 0; d < r - 2; ++d) batch.push_back(d);
  Value y = b.dot_general(onehot, rhs, batch, batch, {r - 1}, {r - 2}, rhs.type);
  Value rhs_rows = b.iota(y.shape, ElementType::S64, r - 2);
  Value lu_cols = b.iota(
      [&] {
        Shape s = square;
        s[r - 2] = 1;
        return s;
      }(),
      ElementType::S64, r - 1);
  Value zero_row = splat(b, 0, lu.type, lu_cols.shape);
  for (int64_t i = 1; i < n; ++i) {  // L y = P B, L unit lower
    Value l = b.select(b.compare("LT", lu_cols, s64(b, i, lu_cols.shape)), rows_of(b, lu, i, i + 1),
                       zero_row);
    Value update = broadcast_to(b, row_times(b, l, y), y.shape);
    y = b.select(b.compare("EQ", rhs_rows, s64(b, i, y.shape)), b.binary("subtract", y, update), y);
  }
  for (int64_t i = n - 1; i >= 0; --i) {  // U x = y
    Value row = rows_of(b, lu, i, i + 1);
    Value u = b.select(b.compare("GT", lu_cols, s64(b, i, lu_cols.shape)), row, zero_row);
    Value diagonal = broadcast_to(b, cols_of(b, row, i, i + 1), y.shape);
    Value update = broadcast_to(b, row_times(b, u, y), y.shape);
    y = b.select(b.compare("EQ", rhs_rows, s64(b, i, y.shape)),
                 b.binary("divide", b.binary("subtract", y, update), diagonal), y);
  }
  return y;
}

// Solves A^T X = B from P A = L U: U^T z = B, then L^T w = z, then X = P^T w.
Value solve_adjoint_with(Builder& b, const Lu& f, const Value& rhs) {
  const int64_t r = f.lu.rank(), n = f.lu.shape[r - 1];
  std::vector<int64_t> swap_last(r);
  for (int64_t d = 0; d < r; ++d) swap_last[d] = d;
  std::swap(swap_last[r - 2], swap_last[r - 1]);
  Value lu_t = b.transpose(f.lu, swap_last);  // row i: column i of L U
  Value rows = b.iota(rhs.shape, ElementType::S64, r - 2);
  Shape row_shape = f.lu.shape;
  row_shape[r - 2] = 1;
  Value cols = b.iota(row_shape, ElementType::S64, r - 1);
  Value zero_row = splat(b, 0, f.lu.type, row_shape);
  Value y = rhs;
  for (int64_t i = 0; i < n; ++i) {  // U^T z = B: lower, diagonal U_ii
    Value row = rows_of(b, lu_t, i, i + 1);
    Value lower = b.select(b.compare("LT", cols, s64(b, i, row_shape)), row, zero_row);
    Value diagonal = broadcast_to(b, cols_of(b, row, i, i + 1), y.shape);
    Value update = broadcast_to(b, row_times(b, lower, y), y.shape);
    y = b.select(b.compare("EQ", rows, s64(b, i, y.shape)),
                 b.binary("divide", b.binary("subtract", y, update), diagonal), y);
  }
  for (int64_t i = n - 1; i >= 0; --i) {  // L^T w = z: upper, unit diagonal
    Value row = rows_of(b, lu_t, i, i + 1);
    Value upper = b.select(b.compare("GT", cols, s64(b, i, row_shape)), row, zero_row);
    Value update = broadcast_to(b, row_times(b, upper, y), y.shape);
    y = b.select(b.compare("EQ", rows, s64(b, i, y.shape)), b.binary("subtract", y, update), y);
  }
  // X = P^T w: X[perm[i]] = w[i].
  Shape square = f.lu.shape;
  Shape perm_col = square;
  perm_col[r - 1] = 1;
  Value perm_b = broadcast_to(b, b.reshape(f.perm, perm_col), square);
  Value onehot =
      b.convert(b.compare("EQ", perm_b, b.iota(square, ElementType::S64, r - 1)), y.type);
  std::vector<int64_t> batch;
  for (int64_t d = 0; d < r - 2; ++d) batch.push_back(d);
  return b.dot_general(onehot, y, batch, batch, {r - 2}, {r - 2}, y.type);
}

// The row permutation of LAPACK's sequential pivots (1-based swaps).
Value permutation_of(Builder& b, const Value& pivots) {
  const int64_t r = pivots.rank(), n = pivots.shape[r - 1];
  Shape vec = pivots.shape;
  Shape batch(vec.begin(), vec.end() - 1);
  Shape batch1 = batch;
  batch1.push_back(1);
  Value iota = b.iota(vec, ElementType::S64, r - 1);
  Value perm = iota;
  Value targets = b.binary("subtract", b.convert(pivots, ElementType::S64), s64(b, 1, vec));
  for (int64_t k = 0; k < n; ++k) {
    std::vector<int64_t> lo(r, 0), hi(vec.begin(), vec.end()), step(r, 1);
    lo[r - 1] = k;
    hi[r - 1] = k + 1;
    Value p = broadcast_to(b, b.slice(targets, lo, hi, step), vec);
    Value at_k = broadcast_to(b, b.slice(perm, lo, hi, step), vec);
    Value at_p = b.reduce(b.select(b.compare("EQ", iota, p), perm, s64(b, 0, vec)),
                          b.constant_int(0, ElementType::S64), {r - 1}, "add");
    at_p = broadcast_to(b, b.reshape(at_p, batch1), vec);
    Value is_k = b.compare("EQ", iota, s64(b, k, vec));
    perm = b.select(is_k, at_p, b.select(b.compare("EQ", iota, p), at_k, perm));
  }
  return perm;
}

Value square_input(LoweringContext& ctx, int index, const char* name) {
  Value a = ctx.tensor(index);
  TORCH_CHECK(a.rank() >= 2, name, ": The input tensor A must have at least 2 dimensions.");
  TORCH_CHECK(a.shape[a.rank() - 1] == a.shape[a.rank() - 2], name,
              ": A must be batches of square matrices, but they are ", a.shape[a.rank() - 2],
              " by ", a.shape[a.rank() - 1], " matrices");
  TORCH_CHECK(hlo::is_float(a.type), name, ": Expected a floating point tensor, got ",
              to_scalar_type(a.type));
  return a;
}

Value wide(Builder& b, const Value& a) { return b.convert(a, opmath(a.type)); }

LOWER({"linalg_lu_factor_ex", "linalg_lu_factor_ex.out"}, [](LoweringContext& ctx) {
  Value a = square_input(ctx, 0, "torch.linalg.lu_factor");
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
  Value eye = b.convert(b.compare("EQ", b.iota(a.shape, ElementType::S64, r - 2),
                                  b.iota(a.shape, ElementType::S64, r - 1)),
                        f.lu.type);
  return Values{b.convert(solve_with(b, f, eye), a.type), f.info};
});

// _linalg_solve_ex(A, B, left, check_errors) -> (result, LU, pivots, info), for left=True and
// B with A's batch shape (a vector per matrix when it has one dimension less).
LOWER({"_linalg_solve_ex", "_linalg_solve_ex.result"}, [](LoweringContext& ctx) {
  Value a = square_input(ctx, 0, "torch.linalg.solve");
  Builder& b = ctx.b;
  Value rhs = ctx.tensor(1);
  TORCH_CHECK_NOT_IMPLEMENTED(ctx.arg(2).toBool(),
                              "torch_tpu: linalg.solve with left=False is "
                              "not implemented for the tpu device");
  bool vector = rhs.rank() == a.rank() - 1 && Shape(rhs.shape.begin(), rhs.shape.end()) ==
                                                  Shape(a.shape.begin(), a.shape.end() - 1);
  Value matrix = vector ? b.reshape(rhs,
                                    [&] {
                                      Shape s = rhs.shape;
                                      s.push_back(1);
                                      return s;
                                    }())
                        : rhs;
  TORCH_CHECK_NOT_IMPLEMENTED(
      matrix.rank() == a.rank() &&
          Shape(matrix.shape.begin(), matrix.shape.end() - 2) ==
              Shape(a.shape.begin(), a.shape.end() - 2) &&
          matrix.shape[matrix.rank() - 2] == a.shape[a.rank() - 1],
      "torch_tpu: linalg.solve with broadcast batch shapes is not implemented for the tpu device");
  Lu f = factor(b, wide(b, a));
  Value x = solve_with(b, f, b.convert(matrix, f.lu.type));
  Shape result_shape(ctx.tensor_meta(1).sizes().begin(), ctx.tensor_meta(1).sizes().end());
  return Values{b.reshape(b.convert(x, a.type), result_shape), b.convert(f.lu, a.type), f.pivots,
                f.info};
});

// linalg_lu_solve(LU, pivots, B, left, adjoint): left=True, B with LU's batch shape.
LOWER({"linalg_lu_solve", "linalg_lu_solve.out"}, [](LoweringContext& ctx) {
  Value lu = square_input(ctx, 0, "torch.linalg.lu_solve");
  Builder& b = ctx.b;
  Value rhs = ctx.tensor(2);
  TORCH_CHECK_NOT_IMPLEMENTED(ctx.arg(3).toBool(),
                              "torch_tpu: linalg.lu_solve with left=False "
                              "is not implemented for the tpu device");
  TORCH_CHECK_NOT_IMPLEMENTED(
      rhs.rank() == lu.rank() &&
          Shape(rhs.shape.begin(), rhs.shape.end() - 2) ==
              Shape(lu.shape.begin(), lu.shape.end() - 2) &&
          rhs.shape[rhs.rank() - 2] == lu.shape[lu.rank() - 1],
      "torch_tpu: linalg.lu_solve with broadcast batch shapes is not implemented for the tpu "
      "device");
  Lu f{wide(b, lu), permutation_of(b, ctx.tensor(1)), Value(), Value()};
  Value x = b.convert(rhs, f.lu.type);
  x = ctx.arg(4).toBool() ? solve_adjoint_with(b, f, x) : solve_with(b, f, x);
  return Values{b.convert(x, rhs.type)};
});

// The product of U's diagonal, and the sign of the row exchanges.
std::pair<Value, Value> diagonal_and_sign(Builder& b, const Lu& f) {
  const int64_t r = f.lu.rank(), n = f.lu.shape[r - 1];
  Value on_diagonal = b.compare("EQ", b.iota(f.lu.shape, ElementType::S64, r - 2),
                                b.iota(f.lu.shape, ElementType::S64, r - 1));
  Value diagonal = b.reduce(b.select(on_diagonal, f.lu, splat(b, 0, f.lu.type, f.lu.shape)),
                            b.constant(0.0, f.lu.type), {r - 1}, "add");  // [..., n]
  Value position = b.iota(f.pivots.shape, ElementType::S32, r - 2);
  Value swapped = b.compare(
      "NE", f.pivots, b.binary("add", position, splat(b, 1, ElementType::S32, position.shape)));
  Value swaps = b.reduce(b.convert(swapped, ElementType::S32), b.constant_int(0, ElementType::S32),
                         {r - 2}, "add");
  Value odd =
      b.compare("EQ", b.binary("remainder", swaps, splat(b, 2, ElementType::S32, swaps.shape)),
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
  Value det =
      b.binary("multiply", sign,
               b.reduce(diagonal, b.constant(1.0, diagonal.type), {a.rank() - 2}, "multiply"));
  return Values{b.convert(det, a.type), b.convert(f.lu, a.type), f.pivots};
});

LOWER({"_linalg_slogdet", "_linalg_slogdet.sign"}, [](LoweringContext& ctx) {
  Value a = square_input(ctx, 0, "linalg.slogdet");
  Builder& b = ctx.b;
  Lu f = factor_for_det(ctx, a);
  auto [diagonal, sign] = diagonal_and_sign(b, f);
  int64_t last = a.rank() - 2;
  Value negatives =
      b.reduce(b.convert(b.compare("LT", diagonal, splat(b, 0, diagonal.type, diagonal.shape)),
                         ElementType::S32),
               b.constant_int(0, ElementType::S32), {last}, "add");
  Value flip = b.compare(
      "EQ", b.binary("remainder", negatives, splat(b, 2, ElementType::S32, negatives.shape)),
      splat(b, 1, ElementType::S32, negatives.shape));
  sign = b.select(flip, b.unary("negate", sign), sign);
  Value logabs = b.reduce(b.unary("log", b.unary("abs", diagonal)), b.constant(0.0, diagonal.type),
                          {last}, "add");
  Value singular = b.compare("EQ", logabs, splat(b, -INFINITY, logabs.type, logabs.shape));
  sign = b.select(singular, splat(b, 0, sign.type, sign.shape), sign);
  return Values{b.convert(sign, a.type), b.convert(logabs, a.type), b.convert(f.lu, a.type),
                f.pivots};
});

}  // namespace
}  // namespace torch_tpu::aten
