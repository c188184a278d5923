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
        Value ordered = r.compare(descending ? Comparison::GT : Comparison::LT, lhs, rhs);
        if (!hlo::is_float(lhs.type)) return std::vector<Value>{ordered};
        Value lhs_nan = r.ne(lhs, lhs);
        Value rhs_nan = r.ne(rhs, rhs);
        // Ascending: before a NaN comes every number. Descending: a NaN comes
        // before every number.
        Value before = descending ? r.select(lhs_nan, r.not_(rhs_nan), ordered)
                                  : r.select(rhs_nan, r.not_(lhs_nan), ordered);
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
  int64_t dim = wrap_dim(ctx.arg(dim_index).toInt(), rank);  // a 0-d tensor takes -1 and 0
  if (rank == 0) return {x, ctx.b.constant_int(0, ElementType::S64)};
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
  // The identity is the type's own bound (int32's failed to compile for uint8, int8, int16).
  Value identity;
  if (is_float) {
    identity = b.constant(is_max ? -INFINITY : INFINITY, values.type);
  } else if (values.type == ElementType::S64) {
    identity = b.constant_int(
        is_max ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max(),
        values.type);
  } else {
    double bound = is_max ? lowest(values.type) : highest(values.type);
    TORCH_CHECK(bound < 9.2e18, "torch_tpu: ", is_max ? "cummax" : "cummin",
                " takes no uint64 tensor");
    identity = b.constant_int(static_cast<int64_t>(bound), values.type);
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
    Value later_wins = b.compare(is_max ? Comparison::GE : Comparison::LE, values, earlier);
    if (is_float) {
      Value later_nan = b.ne(values, values);
      Value earlier_nan = b.ne(earlier, earlier);
      later_wins = b.or_(later_nan, b.and_(b.not_(earlier_nan), later_wins));
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

// The entry at per-slice position `rank` (shaped like x without `dim`) of sorted values and
// positions along `dim`.
std::pair<Value, Value> pick_rank(Builder& b, const Value& values, const Value& positions,
                                  int64_t dim, const Value& rank) {
  Shape kept = values.shape;
  kept[dim] = 1;
  std::vector<int64_t> keep_dims;
  for (int64_t d = 0; d < values.rank(); ++d)
    if (d != dim) keep_dims.push_back(d);
  Value target = b.broadcast_in_dim(rank, values.shape, keep_dims);
  Value hit = b.eq(b.iota(values.shape, ElementType::S64, dim), target);
  Value zero_v = splat(b, 0, values.type, values.shape);
  Value picked =
      b.reduce(b.select(hit, values, zero_v), b.constant(0, values.type), {dim}, BinaryOp::Add);
  Value picked_position =
      b.reduce(b.select(hit, positions, splat(b, 0, ElementType::S64, values.shape)),
               b.constant_int(0, ElementType::S64), {dim}, BinaryOp::Add);
  return {picked, picked_position};
}

Shape reduced_shape(const Shape& shape, int64_t dim, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d != dim)
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

// Number of NaNs along `dim` (0 for non-floats).
Value count_nan(Builder& b, const Value& x, int64_t dim) {
  if (!hlo::is_float(x.type)) {
    Shape out = reduced_shape(x.shape, dim, false);
    return splat(b, 0, ElementType::S64, out);
  }
  Value nan = b.convert(b.ne(x, x), ElementType::S64);
  return b.reduce(nan, b.constant_int(0, ElementType::S64), {dim}, BinaryOp::Add);
}

// median/nanmedian along dim: the lower middle of the sorted slice. median: any NaN makes the
// result the first NaN; nanmedian: the middle of the non-NaN entries (NaN when all are).
std::pair<Value, Value> median_along(Builder& b, const Value& x, int64_t dim, bool ignore_nan) {
  auto [values, positions] = sort_along(b, x, dim, false);
  int64_t n = x.shape[dim];
  Value nans = count_nan(b, x, dim);
  Shape out = nans.shape;
  Value total = splat(b, static_cast<double>(n), ElementType::S64, out);
  Value one = splat(b, 1, ElementType::S64, out), two = splat(b, 2, ElementType::S64, out);
  Value rank;
  if (ignore_nan) {
    Value valid = b.subtract(total, nans);
    rank = b.divide(b.subtract(valid, one), two);
    rank = b.select(b.eq(valid, splat(b, 0, ElementType::S64, out)),
                    splat(b, 0, ElementType::S64, out), rank);
  } else {
    rank = splat(b, static_cast<double>((n - 1) / 2), ElementType::S64, out);
    // The first NaN in sorted order sits right after the numbers.
    rank = b.select(b.gt(nans, splat(b, 0, ElementType::S64, out)), b.subtract(total, nans), rank);
  }
  return pick_rank(b, values, positions, dim, rank);
}

Values median_dim(LoweringContext& ctx, bool ignore_nan) {
  Value x = ctx.tensor(0);
  if (x.rank() == 0) return {x, ctx.b.constant_int(0, ElementType::S64)};
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), x.rank());
  bool keepdim = ctx.arg(2).toBool();
  TORCH_CHECK_INDEX(x.shape[dim] > 0, ignore_nan ? "nanmedian" : "median",
                    "(): Expected reduction dim ", dim, " to have non-zero size.");
  auto [value, position] = median_along(ctx.b, x, dim, ignore_nan);
  Shape shape = reduced_shape(x.shape, dim, keepdim);
  return {ctx.b.reshape(value, shape), ctx.b.reshape(position, shape)};
}
Values median_all(LoweringContext& ctx, bool ignore_nan) {
  Value x = ctx.tensor(0);
  int64_t n = hlo::num_elements(x.shape);
  if (n == 0) return {splat(ctx.b, NAN, x.type, {})};
  Value flat = ctx.b.reshape(x, {n});
  return {median_along(ctx.b, flat, 0, ignore_nan).first};
}
LOWER({"median.dim", "median.dim_values"},
      [](LoweringContext& ctx) { return median_dim(ctx, false); });
LOWER({"nanmedian.dim", "nanmedian.dim_values"},
      [](LoweringContext& ctx) { return median_dim(ctx, true); });
LOWER({"median", "median.out"}, [](LoweringContext& ctx) { return median_all(ctx, false); });
LOWER({"nanmedian", "nanmedian.out"}, [](LoweringContext& ctx) { return median_all(ctx, true); });

// kthvalue(self, k, dim, keepdim): the k-th smallest (NaN above every number).
LOWER({"kthvalue", "kthvalue.values"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  int64_t k = ctx.arg(1).toInt();
  bool keepdim = ctx.arg(3).toBool();
  if (x.rank() == 0) {
    TORCH_CHECK_INDEX(k == 1, "kthvalue(): selected number k out of range for dimension 0");
    return Values{x, b.constant_int(0, ElementType::S64)};
  }
  int64_t dim = wrap_dim(ctx.arg(2).toInt(), x.rank());
  TORCH_CHECK_INDEX(k >= 1 && k <= x.shape[dim],
                    "kthvalue(): selected number k out of range for dimension ", dim);
  auto [values, positions] = sort_along(b, x, dim, false);
  std::vector<int64_t> start(x.rank(), 0), limit(x.shape.begin(), x.shape.end()),
      strides(x.rank(), 1);
  start[dim] = k - 1;
  limit[dim] = k;
  Shape shape = reduced_shape(x.shape, dim, keepdim);
  return Values{b.reshape(b.slice(values, start, limit, strides), shape),
                b.reshape(b.slice(positions, start, limit, strides), shape)};
});

// mode(self, dim, keepdim): the most frequent value (the smallest among equally frequent ones)
// and the last position where it occurs.
LOWER({"mode", "mode.values"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  bool keepdim = ctx.arg(2).toBool();
  if (x.rank() == 0) return Values{x, b.constant_int(0, ElementType::S64)};
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), x.rank());
  int64_t n = x.shape[dim];
  TORCH_CHECK_INDEX(n > 0, "mode(): Expected reduction dim ", dim, " to have non-zero size.");
  // count[i] = how many entries along dim equal x[i], over an [.., n, n, ..] comparison.
  int64_t rank = x.rank();
  Shape pair_shape = x.shape;
  pair_shape.insert(pair_shape.begin() + dim + 1, n);
  std::vector<int64_t> as_i, as_j;
  for (int64_t d = 0; d < rank; ++d) {
    as_i.push_back(d <= dim ? d : d + 1);
    as_j.push_back(d < dim ? d : d + 1);
  }
  Value xi = b.broadcast_in_dim(x, pair_shape, as_i);
  Value xj = b.broadcast_in_dim(x, pair_shape, as_j);
  Value equal = b.eq(xi, xj);
  if (hlo::is_float(x.type)) {
    equal = b.or_(equal, b.and_(b.ne(xi, xi), b.ne(xj, xj)));
  }
  Value count = b.reduce(b.convert(equal, ElementType::S64), b.constant_int(0, ElementType::S64),
                         {dim + 1}, BinaryOp::Add);
  // Best = highest count, then smallest value, then last position.
  Value position = b.iota(x.shape, ElementType::S64, dim);
  Value values = x.type == ElementType::Pred ? b.convert(x, ElementType::S32) : x;
  auto best =
      b.reduce({count, values, position},
               {b.constant_int(-1, ElementType::S64), b.constant(0, values.type),
                b.constant_int(-1, ElementType::S64)},
               {dim}, [](Builder& r, const std::vector<Value>& a) {
                 // a = (count_l, value_l, pos_l, count_r, value_r, pos_r)
                 Value more = r.gt(a[0], a[3]);
                 Value same = r.eq(a[0], a[3]);
                 Value smaller = r.lt(a[1], a[4]);
                 Value equal_value = r.eq(a[1], a[4]);
                 Value later = r.gt(a[2], a[5]);
                 Value left = r.or_(more, r.and_(same, r.or_(smaller, r.and_(equal_value, later))));
                 return std::vector<Value>{r.select(left, a[0], a[3]), r.select(left, a[1], a[4]),
                                           r.select(left, a[2], a[5])};
               });
  Value value = x.type == ElementType::Pred ? b.convert(best[1], ElementType::Pred) : best[1];
  Shape shape = reduced_shape(x.shape, dim, keepdim);
  return Values{b.reshape(value, shape), b.reshape(best[2], shape)};
});

}  // namespace
}  // namespace torch_tpu::aten
