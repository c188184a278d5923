// triu_indices / tril_indices(row, col, offset): the (row, col) pairs of a matrix's upper or
// lower triangle in row-major order, computed on the device from each pair's position k alone
// (no upload, one executable per shape). Rows of a triangle are either full width or lengths
// that change by one from row to row (a trapezoid), so k's row is a division in the first and
// the root of a quadratic in the second, made exact by one integer correction.
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

// `height` rows of lengths first, first + step, ... (step +1 or -1), starting at matrix row `row`;
// a pair's column is its place in its row (the upper triangle adds row + offset).
struct Trapezoid {
  int64_t row = 0, first = 0, step = 1, height = 0;
  int64_t size() const { return height * first + step * height * (height - 1) / 2; }
};

struct Pair {
  Value row, col;
};

// Where in a trapezoid the k-th element lies (k a S64 Value, 0 <= k < size()).
Pair locate_in_trapezoid(Builder& b, const Trapezoid& t, const Value& k) {
  const Shape& shape = k.shape;
  auto s64 = [&](int64_t v) { return b.constant_int(v, ElementType::S64, shape); };
  // Elements before the trapezoid's x-th row: x * first + step * x (x - 1) / 2.
  auto start = [&](const Value& x) {
    Value triangle = b.divide(b.multiply(x, b.subtract(x, s64(1))), s64(2));
    return b.add(b.multiply(x, s64(t.first)), t.step > 0 ? triangle : b.negate(triangle));
  };
  // The root of step x^2 / 2 + (first - step / 2) x = k, in float64, floored; growing rows take
  // the positive root, shrinking rows the smaller one.
  const double linear = 2.0 * static_cast<double>(t.first) - static_cast<double>(t.step);
  Value k_f64 = b.convert(k, ElementType::F64);
  Value discriminant = b.add(
      b.constant(linear * linear, ElementType::F64, shape),
      b.multiply(b.constant(8.0 * static_cast<double>(t.step), ElementType::F64, shape), k_f64));
  Value root = b.sqrt(b.maximum(discriminant, b.constant(0.0, ElementType::F64, shape)));
  Value twice_x = t.step > 0 ? b.subtract(root, b.constant(linear, ElementType::F64, shape))
                             : b.subtract(b.constant(linear, ElementType::F64, shape), root);
  Value x = b.convert(b.floor(b.divide(twice_x, b.constant(2.0, ElementType::F64, shape))),
                      ElementType::S64);
  x = b.clamp(s64(0), x, s64(std::max<int64_t>(t.height - 1, 0)));
  // Rounding in the root can land one row off either way.
  x = b.select(b.gt(start(x), k), b.subtract(x, s64(1)), x);
  Value next = b.add(x, s64(1));
  x = b.select(b.le(start(next), k), next, x);
  return {b.add(x, s64(t.row)), b.subtract(k, start(x))};
}

// Rows of `width` from matrix row `row`.
Pair locate_in_rectangle(Builder& b, int64_t row, int64_t width, const Value& k) {
  auto s64 = [&](int64_t v) { return b.constant_int(v, ElementType::S64, k.shape); };
  return {b.add(b.divide(k, s64(width)), s64(row)), b.remainder(k, s64(width))};
}

Values triangle_indices(LoweringContext& ctx, bool upper) {
  Builder& b = ctx.b;
  const int64_t rows = ctx.arg(0).toInt(), cols = ctx.arg(1).toInt(), offset = ctx.arg(2).toInt();
  TORCH_CHECK(rows >= 0, "row must be non-negative, got", rows);
  TORCH_CHECK(cols >= 0, "col must be non-negative, got", cols);
  const at::ScalarType dtype =
      ctx.arg(3).isNone() ? at::kLong : static_cast<at::ScalarType>(ctx.arg(3).toInt());
  TORCH_CHECK(dtype == at::kLong || dtype == at::kInt, "\"", upper ? "triu" : "tril",
              "_indices\" not implemented for '", c10::toString(dtype), "'");
  // The rectangle of full rows (before the trapezoid in the upper triangle, after it in the
  // lower), and the trapezoid.
  int64_t full_rows = 0, rectangle_row = 0;
  Trapezoid trapezoid;
  if (rows > 0 && cols > 0) {
    if (upper) {
      full_rows = offset <= 0 ? std::min(rows, 1 - offset) : 0;
      trapezoid = {full_rows, cols - (full_rows + offset), -1, 0};
      trapezoid.height = std::min(rows - full_rows, std::max<int64_t>(0, trapezoid.first));
    } else {
      const int64_t first_row = std::max<int64_t>(0, -offset);
      if (first_row < rows) {
        trapezoid = {first_row, std::min(cols, first_row + offset + 1), 1, 0};
        trapezoid.height = std::min(rows - first_row, std::max<int64_t>(0, cols - trapezoid.first));
        rectangle_row = first_row + trapezoid.height;
        full_rows = rows - rectangle_row;
      }
    }
  }
  const int64_t rectangle_size = full_rows * cols, n = rectangle_size + trapezoid.size();
  const Shape shape{n};
  Value k = b.iota(shape, ElementType::S64, 0);
  auto s64 = [&](int64_t v) { return b.constant_int(v, ElementType::S64, shape); };
  Pair pair{s64(0), s64(0)};
  if (n > 0) {
    // Upper: the rectangle, then the trapezoid (its columns start at row + offset); lower: the
    // trapezoid (columns from 0), then the rectangle.
    const int64_t trapezoid_begin = upper ? rectangle_size : 0;
    const int64_t rectangle_begin = upper ? 0 : trapezoid.size();
    Pair in_trapezoid =
        locate_in_trapezoid(b, trapezoid,
                            b.clamp(s64(0), b.subtract(k, s64(trapezoid_begin)),
                                    s64(std::max<int64_t>(trapezoid.size() - 1, 0))));
    if (upper) in_trapezoid.col = b.add(in_trapezoid.col, b.add(in_trapezoid.row, s64(offset)));
    Pair in_rectangle = locate_in_rectangle(b, rectangle_row, cols,
                                            b.clamp(s64(0), b.subtract(k, s64(rectangle_begin)),
                                                    s64(std::max<int64_t>(rectangle_size - 1, 0))));
    Value in_rectangle_part = upper ? b.lt(k, s64(rectangle_size)) : b.ge(k, s64(rectangle_begin));
    pair = {b.select(in_rectangle_part, in_rectangle.row, in_trapezoid.row),
            b.select(in_rectangle_part, in_rectangle.col, in_trapezoid.col)};
  }
  const Shape one_row{1, n};
  Value both = b.concatenate({b.reshape(pair.row, one_row), b.reshape(pair.col, one_row)}, 0);
  return {b.convert(both, et(dtype))};
}

LOWER({"triu_indices"}, [](LoweringContext& ctx) { return triangle_indices(ctx, true); });
LOWER({"tril_indices"}, [](LoweringContext& ctx) { return triangle_indices(ctx, false); });

}  // namespace
}  // namespace torch_tpu::aten
