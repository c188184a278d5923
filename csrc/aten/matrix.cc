#include "csrc/aten/matrix.h"

#include <c10/util/Exception.h>

#include <utility>

namespace torch_tpu::aten {

Value matrix_input(LoweringContext& ctx, int index, const char* name) {
  Value a = ctx.tensor(index);
  TORCH_CHECK(a.rank() >= 2, name, ": The input tensor A must have at least 2 dimensions.");
  // CPU's kernels exist for floating types only: NotImplementedError, as there.
  TORCH_CHECK_NOT_IMPLEMENTED(hlo::is_float(a.type), name, ": not implemented for '",
                              c10::toString(to_scalar_type(a.type)), "'");
  return a;
}

void check_no_nan_at_runtime(Builder& b, const Value& a, bool infinity_too,
                             const std::string& failure) {
  Value magnitude = b.abs(a);
  Value fine = infinity_too ? b.lt(magnitude, splat(b, INFINITY, magnitude.type, magnitude.shape))
                            : b.eq(magnitude, magnitude);
  b.check_at_runtime(all_of(b, fine), Builder::CheckKind::RaisesLinAlgError, failure);
}

Value wide(Builder& b, const Value& x) { return b.convert(x, opmath(x.type)); }

Value matrix_transpose(Builder& b, const Value& x) {
  std::vector<int64_t> order(x.rank());
  for (int64_t d = 0; d < x.rank(); ++d) order[d] = d;
  std::swap(order[x.rank() - 2], order[x.rank() - 1]);
  return b.transpose(x, order);
}

Value block(Builder& b, const Value& x, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t r = x.rank();
  std::vector<int64_t> lo(r, 0), hi(x.shape.begin(), x.shape.end()), step(r, 1);
  lo[r - 2] = r0;
  hi[r - 2] = r1;
  lo[r - 1] = c0;
  hi[r - 1] = c1;
  return b.slice(x, lo, hi, step);
}

Value rows_of(Builder& b, const Value& x, int64_t start, int64_t stop) {
  return block(b, x, start, stop, 0, x.shape[x.rank() - 1]);
}

Value cols_of(Builder& b, const Value& x, int64_t start, int64_t stop) {
  return block(b, x, 0, x.shape[x.rank() - 2], start, stop);
}

Value with_block(Builder& b, const Value& x, const Value& update, int64_t row, int64_t col) {
  std::vector<Value> starts(x.rank(), b.constant_int(0, ElementType::S64));
  starts[x.rank() - 2] = b.constant_int(row, ElementType::S64);
  starts[x.rank() - 1] = b.constant_int(col, ElementType::S64);
  return b.dynamic_update_slice(x, update, starts);
}

Value matmul(Builder& b, const Value& x, const Value& y, bool transpose_x) {
  const int64_t r = x.rank();
  std::vector<int64_t> batch(r - 2);
  for (int64_t d = 0; d < r - 2; ++d) batch[d] = d;
  return b.dot_general(x, y, batch, batch, {transpose_x ? r - 2 : r - 1}, {r - 2}, x.type);
}

Shape batch_of(const Value& x) { return Shape(x.shape.begin(), x.shape.end() - 2); }

Value with_batch(Builder& b, const Value& x, const Shape& batch, int64_t kept) {
  Shape shape = batch;
  shape.insert(shape.end(), x.shape.end() - kept, x.shape.end());
  return broadcast_to(b, x, shape);
}

Shape with_matrix(Shape batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

Value identity(Builder& b, const Shape& batch, int64_t rows, int64_t cols, ElementType type) {
  Shape shape = with_matrix(batch, rows, cols);
  const int64_t r = static_cast<int64_t>(shape.size());
  Value on_diagonal =
      b.eq(b.iota(shape, ElementType::S64, r - 2), b.iota(shape, ElementType::S64, r - 1));
  return b.select(on_diagonal, splat(b, 1, type, shape), splat(b, 0, type, shape));
}

Value triangle(Builder& b, const Value& x, bool upper, int64_t diagonal) {
  const int64_t r = x.rank();
  Value offset = b.subtract(b.iota(x.shape, ElementType::S64, r - 1),
                            b.iota(x.shape, ElementType::S64, r - 2));
  Value limit = splat(b, static_cast<double>(diagonal), ElementType::S64, x.shape);
  Value keep = b.compare(upper ? Comparison::GE : Comparison::LE, offset, limit);
  return b.select(keep, x, splat(b, 0, x.type, x.shape));
}

}  // namespace torch_tpu::aten
