// Triangular solves by substitution, one unrolled row per step: linalg_solve_triangular and
// the older triangular_solve.
#include <c10/util/Exception.h>

#include <tuple>
#include <utility>

#include "csrc/aten/common.h"
#include "csrc/aten/matrix.h"

namespace torch_tpu::aten {
namespace {

// A and B with their batches broadcast against each other, A checked to be square.
std::pair<Value, Value> broadcast_system(Builder& b, const Value& a, const Value& rhs,
                                         const char* name) {
  const int64_t r = a.rank();
  TORCH_CHECK(r >= 2 && a.shape[r - 1] == a.shape[r - 2], name,
              ": A must be batches of square matrices");
  Shape batch = broadcast_shapes(batch_of(a), batch_of(rhs));
  return {with_batch(b, a, batch), with_batch(b, rhs, batch)};
}

// linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False).
LOWER({"linalg_solve_triangular", "linalg_solve_triangular.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value a = ctx.tensor(0), rhs = ctx.tensor(1);
  bool upper = ctx.arg(2).toBool(), left = ctx.arg(3).toBool(), unit = ctx.arg(4).toBool();
  // As on CPU, the solution is A's dtype (B of another dtype is read as A's).
  ElementType t = opmath(a.type);
  Value ta = b.convert(a, t), tb = b.convert(rhs, t);
  if (!left) {  // X A = B  <=>  A^T X^T = B^T
    ta = matrix_transpose(b, ta);
    tb = matrix_transpose(b, tb);
    upper = !upper;
  }
  std::tie(ta, tb) = broadcast_system(b, ta, tb, "linalg.solve_triangular");
  TORCH_CHECK(tb.shape[tb.rank() - 2] == ta.shape[ta.rank() - 1],
              "linalg.solve_triangular: Incompatible shapes of A and B for the equation");
  Value x = triangular_substitute(b, ta, tb, upper, unit);
  if (!left) x = matrix_transpose(b, x);
  return Values{b.convert(x, a.type)};
});

// triangular_solve(self=B, A, upper, transpose, unitriangular) -> (solution, A's copy).
LOWER({"triangular_solve", "triangular_solve.X"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value rhs = ctx.tensor(0), a = ctx.tensor(1);
  bool upper = ctx.arg(2).toBool(), transpose = ctx.arg(3).toBool(), unit = ctx.arg(4).toBool();
  ElementType t = opmath(rhs.type);
  Value ta = b.convert(a, t);
  if (transpose) {
    ta = matrix_transpose(b, ta);
    upper = !upper;
  }
  auto [system, wide_rhs] = broadcast_system(b, ta, b.convert(rhs, t), "triangular_solve");
  Value x = triangular_substitute(b, system, wide_rhs, upper, unit);
  // The second result is A's copy, with the broadcast batch.
  return Values{b.convert(x, rhs.type), with_batch(b, a, batch_of(system))};
});

}  // namespace
}  // namespace torch_tpu::aten
