// The matrix exponential by scaling and squaring in float64: A / 2^s with ||A / 2^s||_1 <= 1/2,
// its Taylor polynomial of degree 18 (truncation error below 1e-22 there), then s squarings by
// a device loop (s differs per matrix; a matrix whose s is reached keeps its value).
#include <c10/util/Exception.h>

#include <cmath>

#include "csrc/aten/arith.h"
#include "csrc/aten/common.h"
#include "csrc/aten/matrix.h"

namespace torch_tpu::aten {
namespace {

constexpr int kTaylorDegree = 18;
constexpr double kMaxSquarings = 1100;  // 2^1100 exceeds every finite double norm / (1/2)

Value matrix_exp(Builder& b, const Value& a) {
  const int64_t r = a.rank(), n = a.shape[r - 1];
  Shape one = with_matrix(batch_of(a), 1, 1);
  // ||A||_1: the largest column sum of |a|.
  Value norm = b.reduce(sum(b, b.abs(a), {r - 2}), b.constant(0, a.type), {r - 2},
                        BinaryOp::Maximum);  // [...]
  norm = b.reshape(norm, one);
  Value needed =
      b.ceil(b.divide(b.log(b.multiply(norm, c(b, 2, norm))), c(b, std::log(2.0), norm)));
  Value finite = b.lt(b.abs(needed), c(b, INFINITY, needed));
  Value squarings =
      b.select(b.and_(finite, b.gt(needed, c(b, 0, needed))),
               b.clamp(c(b, 0, needed), needed, c(b, kMaxSquarings, needed)), c(b, 0, needed));
  Value scaled = b.divide(
      a, broadcast_to(b, b.exponential(b.multiply(squarings, c(b, std::log(2.0), norm))), a.shape));
  Value eye = identity(b, batch_of(a), n, n, a.type);
  Value total = eye, term = eye;
  for (int k = 1; k <= kTaylorDegree; ++k) {
    term = b.divide(matmul(b, term, scaled), c(b, k, term));
    total = b.add(total, term);
  }
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < r; ++d) dims.push_back(d);
  Value most = b.reduce(squarings, b.constant(0, a.type), dims, BinaryOp::Maximum);
  auto state = b.while_loop(
      {total, broadcast_to(b, squarings, a.shape), most, b.constant(0, a.type)},
      [](Builder& q, const std::vector<Value>& s) { return std::vector<Value>{q.lt(s[3], s[2])}; },
      [](Builder& q, const std::vector<Value>& s) {
        Value step = broadcast_to(q, s[3], s[0].shape);
        Value squared = matmul(q, s[0], s[0]);
        Value next = q.select(q.lt(step, s[1]), squared, s[0]);
        return std::vector<Value>{next, s[1], s[2], q.add(s[3], c(q, 1, s[3]))};
      });
  return state[0];
}

LOWER({"linalg_matrix_exp"}, [](LoweringContext& ctx) {
  Value a = matrix_input(ctx, 0, "torch.linalg.matrix_exp");
  const int64_t r = a.rank();
  TORCH_CHECK(a.shape[r - 1] == a.shape[r - 2],
              "linalg.matrix_exp: A must be batches of square matrices, but they are ",
              a.shape[r - 2], " by ", a.shape[r - 1], " matrices");
  if (a.shape[r - 1] == 0) return Values{a};
  return Values{ctx.b.convert(matrix_exp(ctx.b, ctx.b.convert(a, ElementType::F64)), a.type)};
});

}  // namespace
}  // namespace torch_tpu::aten
