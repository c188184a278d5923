// Cholesky factorization (LAPACK potrf's result and info), one column per unrolled step.
#include <c10/util/Exception.h>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

Value column(Builder& b, const Value& x, int64_t j) {
  std::vector<int64_t> lo(x.rank(), 0), hi(x.shape.begin(), x.shape.end()), step(x.rank(), 1);
  lo[x.rank() - 1] = j;
  hi[x.rank() - 1] = j + 1;
  return b.slice(x, lo, hi, step);
}

Value row(Builder& b, const Value& x, int64_t i) {
  std::vector<int64_t> lo(x.rank(), 0), hi(x.shape.begin(), x.shape.end()), step(x.rank(), 1);
  lo[x.rank() - 2] = i;
  hi[x.rank() - 2] = i + 1;
  return b.slice(x, lo, hi, step);
}

// linalg_cholesky_ex(A, upper, check_errors) -> (L, info): info is the order of the first
// leading minor that is not positive definite (1-based), or 0; L is then unspecified beyond it.
LOWER({"linalg_cholesky_ex", "linalg_cholesky_ex.L"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value input = ctx.tensor(0);
  const int64_t r = input.rank();
  TORCH_CHECK(r >= 2, "linalg.cholesky: The input tensor A must have at least 2 dimensions.");
  TORCH_CHECK(input.shape[r - 1] == input.shape[r - 2],
              "linalg.cholesky: A must be batches of square matrices, but they are ",
              input.shape[r - 2], " by ", input.shape[r - 1], " matrices");
  TORCH_CHECK(hlo::is_float(input.type), "linalg.cholesky: Expected a floating point tensor");
  const int64_t n = input.shape[r - 1];
  Value a = b.convert(input, opmath(input.type));
  Shape batch(a.shape.begin(), a.shape.end() - 2);
  if (n == 0) return Values{input, splat(b, 0, ElementType::S32, batch)};
  Value rows = b.iota(column(b, a, 0).shape, ElementType::S64, r - 2);  // [..., n, 1]
  Value l = splat(b, 0, a.type, a.shape);
  Value info = splat(b, 0, ElementType::S32, batch);
  Value col_iota = b.iota(a.shape, ElementType::S64, r - 1);
  std::vector<int64_t> batch_dims;
  for (int64_t d = 0; d < r - 2; ++d) batch_dims.push_back(d);
  for (int64_t j = 0; j < n; ++j) {
    // c = A[:, j] - L[:, :j] L[j, :j]^T (L's columns >= j are still zero).
    Value lj = row(b, l, j);  // [..., 1, n]
    Value projected = b.dot_general(l, lj, batch_dims, batch_dims, {r - 1}, {r - 1}, a.type);
    Value c = b.subtract(column(b, a, j), projected);  // [..., n, 1]
    Value pivot = row(b, c, j);                        // [..., 1, 1]
    Value bad = b.reshape(b.not_(b.gt(pivot, splat(b, 0, a.type, pivot.shape))), batch);
    info = b.select(b.and_(bad, b.eq(info, splat(b, 0, ElementType::S32, batch))),
                    splat(b, static_cast<double>(j + 1), ElementType::S32, batch), info);
    Value d = b.sqrt(pivot);
    Value d_col = broadcast_to(b, d, c.shape);
    Value j_col = splat(b, static_cast<double>(j), ElementType::S64, c.shape);
    Value new_col =
        b.select(b.eq(rows, j_col), d_col,
                 b.select(b.gt(rows, j_col), b.divide(c, d_col), splat(b, 0, a.type, c.shape)));
    l = b.select(b.eq(col_iota, splat(b, static_cast<double>(j), ElementType::S64, a.shape)),
                 broadcast_to(b, new_col, a.shape), l);
  }
  if (ctx.arg(1).toBool()) {
    std::vector<int64_t> order(r);
    for (int64_t d = 0; d < r; ++d) order[d] = d;
    std::swap(order[r - 2], order[r - 1]);
    l = b.transpose(l, order);
  }
  return Values{b.convert(l, input.type), info};
});

}  // namespace
}  // namespace torch_tpu::aten
