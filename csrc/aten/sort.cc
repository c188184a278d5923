// sort and topk: a stable StableHLO sort of (values, positions) along one dimension. NaN orders
// above every number, as on CPU: last when ascending, first when descending.
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

// (sorted values, their original positions) along `dim`.
std::pair<Value, Value> sort_along(Builder& b, const Value& input, int64_t dim, bool descending) {
  // Booleans sort as integers (compare directions are not defined on i1 everywhere).
  bool boolean = input.type == ElementType::Pred;
  Value x = boolean ? b.convert(input, ElementType::S32) : input;
  Value positions = b.iota(x.shape, ElementType::S64, dim);
  auto sorted = b.sort(
      {x, positions}, dim, /*stable=*/true, [descending](Builder& r, const std::vector<Value>& a) {
        const Value& lhs = a[0];
        const Value& rhs = a[1];
        Value ordered = r.compare(descending ? "GT" : "LT", lhs, rhs);
        if (!hlo::is_float(lhs.type)) return std::vector<Value>{ordered};
        Value lhs_nan = r.compare("NE", lhs, lhs);
        Value rhs_nan = r.compare("NE", rhs, rhs);
        // Ascending: before a NaN comes every number. Descending: a NaN comes
        // before every number.
        Value before = descending ? r.select(lhs_nan, r.unary("not", rhs_nan), ordered)
                                  : r.select(rhs_nan, r.unary("not", lhs_nan), ordered);
        return std::vector<Value>{before};
      });
  Value values = boolean ? b.convert(sorted[0], ElementType::Pred) : sorted[0];
  return {values, sorted[1]};
}

// sort(self, dim, descending) and sort.stable(self, *, stable, dim, descending), with out=.
Values sort_lowering(LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  bool has_stable = !ctx.arg(1).isInt();
  int64_t dim_index = has_stable ? 2 : 1;
  int64_t rank = x.rank();
  if (rank == 0) return {x, ctx.b.constant_int(0, ElementType::S64)};
  int64_t dim = wrap_dim(ctx.arg(dim_index).toInt(), rank);
  bool descending = ctx.arg(dim_index + 1).toBool();
  auto [values, positions] = sort_along(ctx.b, x, dim, descending);
  return {values, positions};
}
LOWER({"sort", "sort.stable", "sort.values", "sort.values_stable"}, sort_lowering);

// topk(self, k, dim, largest, sorted): the first k of a sort.
LOWER({"topk", "topk.values"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  int64_t k = ctx.arg(1).toInt();
  int64_t rank = x.rank();
  int64_t dim = rank == 0 ? 0 : wrap_dim(ctx.arg(2).toInt(), rank);
  int64_t size = rank == 0 ? 1 : x.shape[dim];
  TORCH_CHECK_INDEX(k >= 0 && k <= size, "selected index k out of range");
  if (rank == 0) return Values{x, ctx.b.constant_int(0, ElementType::S64)};
  bool largest = ctx.arg(3).toBool();
  auto [values, positions] = sort_along(ctx.b, x, dim, largest);
  std::vector<int64_t> start(rank, 0), limit(x.shape.begin(), x.shape.end()), strides(rank, 1);
  limit[dim] = k;
  return Values{ctx.b.slice(values, start, limit, strides),
                ctx.b.slice(positions, start, limit, strides)};
});

// roll(self, shifts, dims): each dim's tail moved to its front; no dims rolls the flattened
// tensor.
LOWER({"roll", "roll.out"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  std::vector<int64_t> shifts = ctx.arg(1).toIntVector();
  std::vector<int64_t> dims = ctx.arg(2).toIntVector();
  Builder& b = ctx.b;
  TORCH_CHECK(!shifts.empty(), "`shifts` required");
  if (dims.empty()) {
    TORCH_CHECK(shifts.size() == 1, "shifts and dimensions must align. shifts: ", shifts.size(),
                ", dims:", dims.size());
    Value flat = b.reshape(x, {hlo::num_elements(x.shape)});
    x = flat;
    dims = {0};
  }
  TORCH_CHECK(shifts.size() == dims.size(),
              "shifts and dimensions must align. shifts: ", shifts.size(), ", dims:", dims.size());
  Shape original = ctx.tensor_meta(0).sizes().vec();
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t dim = wrap_dim(dims[i], x.rank());
    int64_t size = x.shape[dim];
    if (size == 0) continue;
    int64_t shift = ((shifts[i] % size) + size) % size;
    if (shift == 0) continue;
    std::vector<int64_t> start(x.rank(), 0), limit(x.shape.begin(), x.shape.end()),
        strides(x.rank(), 1);
    std::vector<int64_t> head_limit = limit, tail_start = start;
    tail_start[dim] = size - shift;
    head_limit[dim] = size - shift;
    x = b.concatenate(
        {b.slice(x, tail_start, limit, strides), b.slice(x, start, head_limit, strides)}, dim);
  }
  return Values{b.reshape(x, original)};
});

// cummax/cummin(self, dim) -> (values, indices): a log-step scan whose combine is CPU's
// sequential rule (a NaN always takes over; otherwise a later value takes over when >= (<=) the
// running one), which is associative, so the scan equals the sequential result.
Values cumulative_extreme(LoweringContext& ctx, bool is_max) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  Shape original = x.shape;
  if (x.rank() == 0) x = b.reshape(x, {1});
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), x.rank());
  int64_t n = x.shape[dim];
  bool boolean = x.type == ElementType::Pred;
  Value values = boolean ? b.convert(x, ElementType::S32) : x;
  Value indices = b.iota(values.shape, ElementType::S64, dim);
  bool is_float = hlo::is_float(values.type);
  Value identity = is_float ? b.constant(is_max ? -INFINITY : INFINITY, values.type)
                            : b.constant_int(is_max ? std::numeric_limits<int32_t>::min()
                                                    : std::numeric_limits<int32_t>::max(),
                                             values.type);
  if (values.type == ElementType::S64) {
    identity = b.constant_int(
        is_max ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max(),
        values.type);
  }
  for (int64_t offset = 1; offset < n; offset *= 2) {
    // The running result `offset` positions earlier (identity before the start).
    std::vector<int64_t> low(values.rank(), 0), high(values.rank(), 0), interior(values.rank(), 0);
    low[dim] = offset;
    std::vector<int64_t> start(values.rank(), 0), limit(values.shape.begin(), values.shape.end()),
        strides(values.rank(), 1);
    limit[dim] = n - offset;
    Value earlier = b.pad(b.slice(values, start, limit, strides), identity, low, high, interior);
    Value earlier_index = b.pad(b.slice(indices, start, limit, strides),
                                b.constant_int(-1, ElementType::S64), low, high, interior);
    Value later_wins = b.compare(is_max ? "GE" : "LE", values, earlier);
    if (is_float) {
      Value later_nan = b.compare("NE", values, values);
      Value earlier_nan = b.compare("NE", earlier, earlier);
      later_wins =
          b.binary("or", later_nan, b.binary("and", b.unary("not", earlier_nan), later_wins));
    }
    values = b.select(later_wins, values, earlier);
    indices = b.select(later_wins, indices, earlier_index);
  }
  if (boolean) values = b.convert(values, ElementType::Pred);
  return {b.reshape(values, original), b.reshape(indices, original)};
}
LOWER({"cummax", "cummax.out"}, [](LoweringContext& ctx) { return cumulative_extreme(ctx, true); });
LOWER({"cummin", "cummin.out"},
      [](LoweringContext& ctx) { return cumulative_extreme(ctx, false); });

}  // namespace
}  // namespace torch_tpu::aten
