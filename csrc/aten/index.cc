// Concatenation and indexing: cat, index_select, gather, scatter(_add), index, index_put,
// embedding backward, triangular masks.
#include <ATen/Context.h>
#include <ATen/ExpandUtils.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <functional>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

LOWER({"cat", "cat.out"}, [](LoweringContext& ctx) {
  auto list = ctx.arg(0).toTensorList().vec();
  TORCH_CHECK(!list.empty(), "torch.cat(): expected a non-empty list of Tensors");
  c10::ScalarType type = list[0].scalar_type();
  for (const auto& t : list) type = c10::promoteTypes(type, t.scalar_type());
  // Legacy: 1-D empty tensors are skipped whatever the other shapes.
  int64_t rank = -1;
  for (const auto& t : list) {
    if (!(t.dim() == 1 && t.numel() == 0)) rank = t.dim();
  }
  std::vector<Value> values;
  std::vector<Value> all = ctx.tensors(0);
  if (rank < 0) return Values{splat(ctx.b, 0, et(type), {0})};
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), rank);
  Shape reference;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].dim() == 1 && list[i].numel() == 0) continue;
    TORCH_CHECK(list[i].dim() == rank, "Tensors must have same number of dimensions: got ", rank,
                " and ", list[i].dim());
    if (reference.empty()) reference = all[i].shape;
    for (int64_t d = 0; d < rank; ++d) {
      TORCH_CHECK(d == dim || all[i].shape[d] == reference[d],
                  "Sizes of tensors must match except "
                  "in dimension ",
                  dim, ". Expected size ", reference[d], " but got size ", all[i].shape[d],
                  " for tensor number ", i, " in the list.");
    }
    values.push_back(ctx.b.convert(all[i], et(type)));
  }
  return Values{ctx.b.concatenate(values, dim)};
});

// Indices as s64 with negatives wrapped. One out of range is reported at the next sync point
// (a runtime check); XLA clamps it meanwhile.
Value wrap_index(Builder& b, const Value& index, int64_t size,
                 Builder::CheckKind kind = Builder::CheckKind::RaisesIndexError) {
  check_index_range(b, index, -size, size, std::nullopt, kind);
  Value i = b.convert(index, ElementType::S64);
  Value zero = splat(b, 0, ElementType::S64, i.shape);
  return b.select(b.lt(i, zero),
                  b.add(i, splat(b, static_cast<double>(size), ElementType::S64, i.shape)), i);
}

LOWER({"index_select", "index_select.out"}, [](LoweringContext& ctx) {
  Value self = ctx.tensor(0);
  Value index = ctx.tensor(2);
  TORCH_CHECK_INDEX(index.rank() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(index.type == ElementType::S64 || index.type == ElementType::S32,
              "index_select(): Expected dtype int32/int64 for index");
  if (self.rank() == 0) {
    TORCH_CHECK(hlo::num_elements(index.shape) <= 1,
                "index_select(): Index to scalar can have only 1 value, got ",
                hlo::num_elements(index.shape), " value(s)");
    return Values{self};
  }
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), self.rank());
  // An empty dimension has no valid index: CPU says so before looking at the values.
  if (self.shape[dim] == 0 && hlo::num_elements(index.shape) > 0) {
    TORCH_CHECK_INDEX(self.rank() > 1, "index out of range in self");
    TORCH_CHECK(false, "index_select(): self indexing axis dim should be positive");
  }
  return Values{take_slices(ctx.b, self, dim, wrap_index(ctx.b, index, self.shape[dim]))};
});

// torch_tpu::bucket_rows_index_select(self, index, length): index_select(self, 0, index) of an
// index that grows with a sequence, read at its size bucket (dispatch/length_buckets.h): its
// positions past `length` read as 0, in range of any table, so that they raise nothing.
LOWER({"@bucket_rows_index_select"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value self = ctx.tensor(0), index = ctx.tensor(1);
  Value length = b.broadcast_in_dim(ctx.scalar(2, ElementType::S64), index.shape, {});
  Value real = b.lt(b.iota(index.shape, ElementType::S64, 0), length);
  index = b.select(real, index, splat(b, 0, index.type, index.shape));
  return Values{take_slices(b, self, 0, wrap_index(b, index, self.shape[0]))};
});

// Full coordinates for gather/scatter along `dim`: every dim from iota except `dim`.
Value coordinates(Builder& b, const Value& index, int64_t dim, int64_t size) {
  Shape shape = index.shape;
  Shape with_vector = shape;
  with_vector.push_back(1);
  std::vector<Value> parts;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    // CPU's gather and scatter raise RuntimeError for an index out of range.
    Value part = d == dim ? wrap_index(b, index, size, Builder::CheckKind::RaisesRuntimeError)
                          : b.iota(shape, ElementType::S64, d);
    parts.push_back(b.reshape(part, with_vector));
  }
  return b.concatenate(parts, static_cast<int64_t>(shape.size()));
}

LOWER({"gather", "gather.out"}, [](LoweringContext& ctx) {
  Value self = ctx.tensor(0);
  Value index = ctx.tensor(2);
  TORCH_CHECK(index.type == ElementType::S64 || index.type == ElementType::S32 ||
                  hlo::num_elements(index.shape) == 0,
              "gather(): Expected dtype int32/int64 for index");
  if (hlo::num_elements(index.shape) == 0) return Values{splat(ctx.b, 0, self.type, index.shape)};
  index = ctx.b.convert(index, ElementType::S64);
  if (self.rank() == 0) return Values{ctx.b.reshape(self, index.shape)};
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), self.rank());
  // As CPU, a 0-d index counts as one of size 1 (gather(one_d, 0, tensor(0)) is 0-d).
  const Shape result_shape = index.shape;
  if (index.rank() == 0) index = ctx.b.reshape(index, {1});
  TORCH_CHECK(index.rank() == self.rank(),
              "Index tensor must have the same number of dimensions "
              "as input tensor");
  // An empty dimension has no valid index, whatever the values (XLA cannot gather from it).
  TORCH_CHECK(self.shape[dim] > 0, "gather(): index out of bounds for dimension ", dim,
              " with size 0");
  hlo::GatherDims dims;
  for (int64_t d = 0; d < self.rank(); ++d) {
    dims.collapsed_slice_dims.push_back(d);
    dims.start_index_map.push_back(d);
  }
  dims.index_vector_dim = index.rank();
  Value result = ctx.b.gather(self, coordinates(ctx.b, index, dim, self.shape[dim]), dims,
                              Shape(self.rank(), 1));
  return Values{ctx.b.reshape(result, result_shape)};
});

Value scatter_along(Builder& b, const Value& self, int64_t dim, const Value& index,
                    const Value& src, std::optional<BinaryOp> reduce) {
  hlo::ScatterDims dims;
  for (int64_t d = 0; d < self.rank(); ++d) {
    dims.inserted_window_dims.push_back(d);
    dims.scatter_dims_to_operand_dims.push_back(d);
  }
  dims.index_vector_dim = index.rank();
  // Only the index's extent of src takes part.
  Shape zeros(src.rank(), 0), ones(src.rank(), 1);
  Value updates = b.slice(src, zeros, index.shape, ones);
  return b.scatter(self, coordinates(b, index, dim, self.shape[dim]), updates, dims,
                   [reduce](Builder& r, const std::vector<Value>& a) {
                     if (reduce == BinaryOp::Add) return std::vector<Value>{r.add(a[0], a[1])};
                     if (reduce == BinaryOp::Multiply)
                       return std::vector<Value>{r.multiply(a[0], a[1])};
                     if (reduce == BinaryOp::Maximum || reduce == BinaryOp::Minimum) {
                       return std::vector<Value>{extremum(r, *reduce, a[0], a[1])};
                     }
                     return std::vector<Value>{a[1]};
                   });
}

// scatter's `reduce` argument as the op combining into self: torch's "add" and "multiply" (and
// the extrema, named as StableHLO does); any other string scatters plainly.
std::optional<BinaryOp> scatter_reduction(const std::string& reduce) {
  if (reduce == "add") return BinaryOp::Add;
  if (reduce == "multiply") return BinaryOp::Multiply;
  if (reduce == "maximum") return BinaryOp::Maximum;
  if (reduce == "minimum") return BinaryOp::Minimum;
  return std::nullopt;
}

// 0-dim operands scatter as one-element vectors, as torch treats them.
Value at_least_1d(Builder& b, const Value& x) { return x.rank() == 0 ? b.reshape(x, {1}) : x; }

Values scatter_impl(LoweringContext& ctx, std::optional<BinaryOp> reduce) {
  Builder& b = ctx.b;
  Value original = ctx.tensor(0);
  Value self = at_least_1d(b, original);
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), self.rank());
  Value index = at_least_1d(b, ctx.tensor(2));
  if (hlo::num_elements(index.shape) == 0) return {original};
  TORCH_CHECK(index.type == ElementType::S64 || index.type == ElementType::S32,
              "scatter(): Expected dtype int32/int64 for index");
  index = b.convert(index, ElementType::S64);
  Value src = ctx.arg(3).isTensor() ? at_least_1d(b, b.convert(ctx.tensor(3), self.type))
                                    : as(b, ctx.scalar(3, self.type), self.type, index.shape);
  return {b.reshape(scatter_along(b, self, dim, index, src, reduce), original.shape)};
}

// Scatters `updates` (shaped like self with `dim` of length index.numel()) into self along
// `dim` at the positions `index` (rank <= 1), combining by `op` (none replaces).
Value scatter_slices(Builder& b, const Value& self, int64_t dim, const Value& index,
                     const Value& updates, std::optional<BinaryOp> op,
                     Builder::CheckKind kind = Builder::CheckKind::RaisesIndexError) {
  return combine_slices(b, self, dim, wrap_index(b, index, self.shape[dim], kind), updates, op);
}

Shape with_dim(const Shape& shape, int64_t dim, int64_t size) {
  Shape out = shape;
  out[dim] = size;
  return out;
}

// index_add / index_copy / index_fill(self, dim, index, x, ...): `updates` makes the slices
// (shaped like self with `dim` of index.numel()) that are combined into self by `op`.
Values index_along(LoweringContext& ctx, std::optional<BinaryOp> op,
                   const std::function<Value(const Value& self, const Shape&)>& updates) {
  Builder& b = ctx.b;
  Value self = ctx.tensor(0);
  Shape original = self.shape;
  if (self.rank() == 0) self = b.reshape(self, {1});
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), self.rank());
  Value index = ctx.tensor(2);
  // CPU's index_add into a self of several dimensions and no elements returns at once,
  // reading no index (an index out of range there is no error).
  if (op && self.rank() > 1 && hlo::num_elements(self.shape) == 0) return {ctx.tensor(0)};
  Shape update_shape = with_dim(self.shape, dim, hlo::num_elements(index.shape));
  // CPU's index_add raises RuntimeError for an index out of range when self has several
  // dimensions, IndexError otherwise.
  const auto kind = op == BinaryOp::Add && self.rank() > 1 ? Builder::CheckKind::RaisesRuntimeError
                                                           : Builder::CheckKind::RaisesIndexError;
  Value out = scatter_slices(b, self, dim, index, updates(self, update_shape), op, kind);
  return {b.reshape(out, original)};
}

enum class IndexAlong { add, copy, fill };

// The index dtypes CPU takes, with its messages: index_add takes int32 too.
void check_index_type(LoweringContext& ctx, IndexAlong op) {
  const c10::ScalarType type = ctx.tensor_meta(2).scalar_type();
  switch (op) {
    case IndexAlong::add:
      TORCH_CHECK(type == c10::kLong || type == c10::kInt,
                  "index_add_(): Expected dtype int32/int64 for index but got: ", type);
      break;
    case IndexAlong::copy:
      TORCH_CHECK(type == c10::kLong, "index_copy_(): Expected a long tensor for index, but got ",
                  type);
      break;
    case IndexAlong::fill:
      TORCH_CHECK_INDEX(type == c10::kLong, "index_fill_(): Expected dtype int64 for index.");
      break;
  }
}

LOWER({"index_add", "index_add_", "index_add.out"}, [](LoweringContext& ctx) {
  check_index_type(ctx, IndexAlong::add);
  return index_along(
      ctx, ctx.tensor_meta(0).scalar_type() == c10::kBool ? BinaryOp::Or : BinaryOp::Add,
      [&ctx](const Value& self, const Shape& shape) {
        Value source = ctx.b.reshape(ctx.b.convert(ctx.tensor(3), self.type), shape);
        return ctx.b.multiply(source, as(ctx.b, ctx.scalar(4, self.type), self.type, shape));
      });
});
LOWER({"index_copy", "index_copy_", "index_copy.out"}, [](LoweringContext& ctx) {
  check_index_type(ctx, IndexAlong::copy);
  return index_along(ctx, std::nullopt, [&ctx](const Value& self, const Shape& shape) {
    return ctx.b.reshape(ctx.b.convert(ctx.tensor(3), self.type), shape);
  });
});
LOWER(
    {"index_fill.int_Scalar", "index_fill_.int_Scalar", "index_fill.int_Scalar_out",
     "index_fill.int_Tensor", "index_fill_.int_Tensor", "index_fill.int_Tensor_out"},
    [](LoweringContext& ctx) {
      check_index_type(ctx, IndexAlong::fill);
      return index_along(ctx, std::nullopt, [&ctx](const Value& self, const Shape& shape) {
        return operand(ctx, 3, self.type, shape);
      });
    },
    {},
    // On every call: a Scalar's value (here, whether it is complex) is not in the cache key.
    [](const std::vector<c10::IValue>& args) {
      const c10::IValue& value = args[3];
      TORCH_CHECK(!value.isComplexDouble() || args[0].toTensor().is_complex(),
                  "index_fill_(): Converting complex Scalar to non-complex type is not "
                  "supported");
    });

LOWER({"scatter.src", "scatter_.src", "scatter.src_out", "scatter.value", "scatter_.value",
       "scatter.value_out"},
      [](LoweringContext& ctx) { return scatter_impl(ctx, std::nullopt); });
LOWER({"scatter.reduce", "scatter_.reduce", "scatter.reduce_out", "scatter.value_reduce",
       "scatter_.value_reduce", "scatter.value_reduce_out"},
      [](LoweringContext& ctx) {
        return scatter_impl(ctx, scatter_reduction(ctx.arg(4).toStringRef()));
      });
LOWER({"scatter_add", "scatter_add_", "scatter_add.out"},
      [](LoweringContext& ctx) { return scatter_impl(ctx, BinaryOp::Add); });

// scatter_reduce(self, dim, index, src, reduce, include_self): sum, prod, mean, amax, amin.
// With `slices`, index is 1-D and picks whole slices along dim (index_reduce), so it is
// broadcast to the source's shape first.
Value scatter_reduce(LoweringContext& ctx, bool slices = false) {
  Builder& b = ctx.b;
  // As CPU: a 0-d self takes slices of one index only (it reads the 0-d source's size along
  // dim, which fails for any other count).
  if (slices && ctx.tensor_meta(0).dim() == 0 && ctx.tensor_meta(2).numel() != 1)
    (void)c10::maybe_wrap_dim(ctx.arg(1).toInt(), 0, false);
  Value self = at_least_1d(b, ctx.tensor(0));
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), self.rank());
  Value index = at_least_1d(b, ctx.tensor(2));
  Value src = at_least_1d(b, b.convert(ctx.tensor(3), self.type));
  if (slices) {
    TORCH_CHECK_INDEX(index.rank() == 1, "index_reduce_(): Index is supposed to be a vector");
    TORCH_CHECK(src.rank() == self.rank() && src.shape[dim] == index.shape[0],
                "index_reduce_(): source must have the shape of self with dim ", dim,
                " of the index's length");
    Shape along(src.rank(), 1);
    along[dim] = index.shape[0];
    index = broadcast_to(b, b.reshape(index, along), src.shape);
  }
  const std::string reduce = ctx.arg(4).toStringRef();
  bool include_self = ctx.arg(5).toBool();
  ElementType t = self.type;
  // Where no index lands, self is kept whatever include_self says.
  Value hit = scatter_along(b, splat(b, 0, ElementType::S64, self.shape), dim, index,
                            splat(b, 1, ElementType::S64, index.shape), BinaryOp::Add);
  Value touched = b.gt(hit, splat(b, 0, ElementType::S64, self.shape));
  auto identity_where_touched = [&](double identity) {
    if (include_self) return self;
    return b.select(touched, splat(b, identity, t, self.shape), self);
  };
  if (reduce == "sum" || reduce == "mean") {
    Value total = scatter_along(b, identity_where_touched(0), dim, index, src, BinaryOp::Add);
    if (reduce == "sum") return total;
    Value count = b.add(hit, splat(b, include_self ? 1 : 0, ElementType::S64, self.shape));
    count = b.select(b.eq(count, splat(b, 0, ElementType::S64, self.shape)),
                     splat(b, 1, ElementType::S64, self.shape), count);
    Value mean = b.divide(total, b.convert(count, t));
    if (!hlo::is_float(t)) {
      // Integer mean rounds toward negative infinity, as torch's floor division.
      Value c = b.convert(count, t);
      Value fix = b.and_(b.ne(b.remainder(total, c), splat(b, 0, t, self.shape)),
                         b.lt(total, splat(b, 0, t, self.shape)));
      mean = b.select(fix, b.subtract(mean, splat(b, 1, t, self.shape)), mean);
    }
    return b.select(touched, mean, self);
  }
  if (reduce == "prod") {
    return scatter_along(b, identity_where_touched(1), dim, index, src, BinaryOp::Multiply);
  }
  TORCH_CHECK(reduce == "amax" || reduce == "amin",
              "reduce argument must be either sum, prod, "
              "mean, amax or amin, got ",
              reduce);
  bool is_max = reduce == "amax";
  Value base = identity_where_touched(is_max ? lowest(t) : highest(t));
  return scatter_along(b, base, dim, index, src, is_max ? BinaryOp::Maximum : BinaryOp::Minimum);
}
LOWER({"scatter_reduce.two", "scatter_reduce_.two", "scatter_reduce.two_out"},
      [](LoweringContext& ctx) {
        Value out = scatter_reduce(ctx);
        return Values{ctx.b.reshape(
            out, Shape(ctx.tensor_meta(0).sizes().begin(), ctx.tensor_meta(0).sizes().end()))};
      });

// index_reduce(self, dim, index, source, reduce, include_self): prod, mean, amax, amin over
// whole slices.
LOWER({"index_reduce", "index_reduce_", "index_reduce.out"}, [](LoweringContext& ctx) {
  Value out = scatter_reduce(ctx, /*slices=*/true);
  return Values{ctx.b.reshape(
      out, Shape(ctx.tensor_meta(0).sizes().begin(), ctx.tensor_meta(0).sizes().end()))};
});

// index_put's values must broadcast to what indexing self would return, and be of self's
// dtype (checked in CPU's order: the shape first).
void check_value_fits(LoweringContext& ctx, const Value& values, const Shape& indexing_result) {
  TORCH_CHECK(at::is_expandable_to(values.shape, indexing_result),
              "shape mismatch: value tensor of shape [", hlo::join(values.shape),
              "] cannot be broadcast to indexing result of shape [", hlo::join(indexing_result),
              "]");
  const c10::ScalarType self_type = ctx.tensor_meta(0).scalar_type();
  const c10::ScalarType values_type = ctx.tensor_meta(2).scalar_type();
  TORCH_CHECK(self_type == values_type,
              "Index put requires the source and destination dtypes match, got ", self_type,
              " for the destination and ", values_type, " for the source.");
}

// Advanced indexing: the indexed dims (given by non-None index tensors) are moved to the
// front, gathered with one coordinate vector per element of the broadcast index shape.
struct IndexPlan {
  Value transposed;              // self with indexed dims first
  Value coordinates;             // broadcast_shape + [k]
  Shape broadcast_shape;         // shape of the broadcast indices
  std::vector<int64_t> indexed;  // self dims that are indexed
  std::vector<int64_t> permutation;
  bool adjacent = true;
};

IndexPlan plan_index(LoweringContext& ctx, const Value& self, int list_arg) {
  Builder& b = ctx.b;
  const auto& list = ctx.arg(list_arg).toListRef();
  IndexPlan plan;
  std::vector<Value> indices;
  int64_t position = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].isNone() || !list[i].toTensor().defined()) {
      ++position;
      continue;
    }
    const at::Tensor& t = list[i].toTensor();
    TORCH_CHECK_NOT_IMPLEMENTED(t.scalar_type() != c10::kBool && t.scalar_type() != c10::kByte,
                                "torch_tpu: boolean mask indexing has a data-dependent shape; "
                                "use masked_fill/where, or TORCH_TPU_CPU_FALLBACK=1");
    TORCH_CHECK_INDEX(position < self.rank(), "too many indices for tensor of dimension ",
                      self.rank());
    // Known on the host: no index at all is in range of an empty dimension.
    TORCH_CHECK_INDEX(self.shape[position] != 0 || t.numel() == 0,
                      "index is out of bounds for dimension with size 0");
    Value index = ctx.tensor_at(t, list_arg, static_cast<int>(i));
    TORCH_CHECK_INDEX(index.type == ElementType::S64 || index.type == ElementType::S32,
                      "tensors used as indices must be long, int, byte or bool tensors");
    plan.indexed.push_back(position);
    indices.push_back(wrap_index(b, index, self.shape[position]));
    ++position;
  }
  for (size_t i = 1; i < plan.indexed.size(); ++i) {
    if (plan.indexed[i] != plan.indexed[i - 1] + 1) plan.adjacent = false;
  }
  try {
    for (const Value& index : indices)
      plan.broadcast_shape = broadcast_shapes(plan.broadcast_shape, index.shape);
  } catch (const c10::Error&) {  // CPU's class and message for indices that do not broadcast
    std::string shapes;
    for (const Value& each : indices)
      shapes += (shapes.empty() ? "[" : ", [") + hlo::join(each.shape) + "]";
    TORCH_CHECK_INDEX(
        false, "shape mismatch: indexing tensors could not be broadcast together with shapes ",
        shapes);
  }
  Shape with_vector = plan.broadcast_shape;
  with_vector.push_back(1);
  std::vector<Value> parts;
  for (const Value& index : indices)
    parts.push_back(b.reshape(broadcast_to(b, index, plan.broadcast_shape), with_vector));
  plan.coordinates = b.concatenate(parts, static_cast<int64_t>(plan.broadcast_shape.size()));
  plan.permutation = plan.indexed;
  for (int64_t d = 0; d < self.rank(); ++d) {
    if (std::find(plan.indexed.begin(), plan.indexed.end(), d) == plan.indexed.end())
      plan.permutation.push_back(d);
  }
  plan.transposed = b.transpose(self, plan.permutation);
  return plan;
}

// "@index" is called by the index.Tensor kernel (data_dependent.cc) once masks are expanded.
LOWER({"@index", "index.Tensor_out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value self = ctx.tensor(0);
  IndexPlan plan = plan_index(ctx, self, 1);
  const int64_t k = static_cast<int64_t>(plan.indexed.size());
  const int64_t batch_rank = static_cast<int64_t>(plan.broadcast_shape.size());
  hlo::GatherDims dims;
  Shape slice_sizes = plan.transposed.shape;
  for (int64_t d = 0; d < k; ++d) {
    dims.collapsed_slice_dims.push_back(d);
    dims.start_index_map.push_back(d);
    slice_sizes[d] = 1;
  }
  for (int64_t d = k; d < self.rank(); ++d) dims.offset_dims.push_back(batch_rank + d - k);
  dims.index_vector_dim = batch_rank;
  // An indexed dimension of size 0 can only be indexed by no index at all (an empty mask,
  // say); gather still needs a one-element slice there, so it gets one padding element.
  Value source = plan.transposed;
  std::vector<int64_t> low(source.rank(), 0), high(source.rank(), 0), interior(source.rank(), 0);
  bool padded = false;
  for (int64_t d = 0; d < k; ++d) {
    if (source.shape[d] != 0) continue;
    high[d] = 1;
    padded = true;
  }
  if (padded) source = b.pad(source, splat(b, 0, source.type, {}), low, high, interior);
  Value out = b.gather(source, plan.coordinates, dims, slice_sizes);
  if (plan.adjacent && !plan.indexed.empty() && plan.indexed[0] > 0) {
    // Result dims go where the indexed dims were: [before..., batch..., after...].
    int64_t before = plan.indexed[0];
    std::vector<int64_t> permutation;
    for (int64_t d = 0; d < before; ++d) permutation.push_back(batch_rank + d);
    for (int64_t d = 0; d < batch_rank; ++d) permutation.push_back(d);
    for (int64_t d = batch_rank + before; d < out.rank(); ++d) permutation.push_back(d);
    out = b.transpose(out, permutation);
  }
  return Values{out};
});

Values index_put(LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value self = ctx.tensor(0);
  IndexPlan plan = plan_index(ctx, self, 1);
  Value values = ctx.tensor(2);
  bool accumulate = ctx.arg(3).toBool();
  const int64_t k = static_cast<int64_t>(plan.indexed.size());
  const int64_t batch_rank = static_cast<int64_t>(plan.broadcast_shape.size());
  // Updates in gather-result layout: batch dims then the remaining dims.
  Shape update_shape = plan.broadcast_shape;
  for (int64_t d = k; d < self.rank(); ++d) update_shape.push_back(plan.transposed.shape[d]);
  Shape natural = update_shape;
  if (plan.adjacent && !plan.indexed.empty() && plan.indexed[0] > 0) {
    int64_t before = plan.indexed[0];
    natural.clear();
    for (int64_t d = 0; d < before; ++d) natural.push_back(update_shape[batch_rank + d]);
    for (int64_t d = 0; d < batch_rank; ++d) natural.push_back(update_shape[d]);
    for (int64_t d = batch_rank + before; d < static_cast<int64_t>(update_shape.size()); ++d)
      natural.push_back(update_shape[d]);
    check_value_fits(ctx, values, natural);
    Value v = broadcast_to(b, values, natural);
    std::vector<int64_t> inverse;
    for (int64_t d = 0; d < batch_rank; ++d) inverse.push_back(before + d);
    for (int64_t d = 0; d < before; ++d) inverse.push_back(d);
    for (int64_t d = batch_rank + before; d < static_cast<int64_t>(natural.size()); ++d)
      inverse.push_back(d);
    values = b.transpose(v, inverse);
  } else {
    check_value_fits(ctx, values, update_shape);
    values = broadcast_to(b, values, update_shape);
  }
  hlo::ScatterDims dims;
  for (int64_t d = 0; d < k; ++d) {
    dims.inserted_window_dims.push_back(d);
    dims.scatter_dims_to_operand_dims.push_back(d);
  }
  for (int64_t d = k; d < self.rank(); ++d) dims.update_window_dims.push_back(batch_rank + d - k);
  dims.index_vector_dim = batch_rank;
  Value scattered = b.scatter(plan.transposed, plan.coordinates, values, dims,
                              [accumulate](Builder& r, const std::vector<Value>& a) {
                                return std::vector<Value>{accumulate ? r.add(a[0], a[1]) : a[1]};
                              });
  std::vector<int64_t> inverse(plan.permutation.size());
  for (size_t i = 0; i < plan.permutation.size(); ++i)
    inverse[plan.permutation[i]] = static_cast<int64_t>(i);
  return {b.transpose(scattered, inverse)};
}
LOWER({"@index_put", "_index_put_impl", "_index_put_impl.out", "index_put.out"},
      [](LoweringContext& ctx) { return index_put(ctx); });

LOWER({"embedding_dense_backward", "embedding_dense_backward.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0);
  Value indices = b.convert(ctx.tensor(1), ElementType::S64);
  int64_t num_weights = ctx.arg(2).toInt();
  int64_t padding_idx = ctx.arg(3).toInt();
  TORCH_CHECK_NOT_IMPLEMENTED(!ctx.arg(4).toBool(), "torch_tpu: embedding scale_grad_by_freq");
  check_index_range(b, indices, 0, num_weights);
  int64_t dim = grad.shape.back();
  int64_t n = hlo::num_elements(indices.shape);
  Value flat_index = b.reshape(indices, {n, 1});
  Value flat_grad = b.reshape(grad, {n, dim});
  if (padding_idx >= 0) {
    Value keep = b.ne(b.reshape(indices, {n}),
                      splat(b, static_cast<double>(padding_idx), ElementType::S64, {n}));
    flat_grad = b.select(b.broadcast_in_dim(keep, {n, dim}, {0}), flat_grad,
                         splat(b, 0, grad.type, {n, dim}));
  }
  hlo::ScatterDims dims;
  dims.update_window_dims = {1};
  dims.inserted_window_dims = {0};
  dims.scatter_dims_to_operand_dims = {0};
  dims.index_vector_dim = 1;
  Value zeros = splat(b, 0, grad.type, {num_weights, dim});
  return Values{
      b.scatter(zeros, flat_index, flat_grad, dims, [](Builder& r, const std::vector<Value>& a) {
        return std::vector<Value>{r.add(a[0], a[1])};
      })};
});

Values triangle(LoweringContext& ctx, bool upper) {
  Builder& b = ctx.b;
  Value self = ctx.tensor(0);
  TORCH_CHECK(self.rank() >= 2, upper ? "triu" : "tril",
              ": input tensor must have at least 2 dimensions");
  int64_t diagonal = ctx.arg(1).toInt();
  int64_t r = self.rank();
  Value row = b.iota(self.shape, ElementType::S64, r - 2);
  Value col = b.iota(self.shape, ElementType::S64, r - 1);
  Value offset = b.subtract(col, row);
  Value keep = b.compare(upper ? Comparison::GE : Comparison::LE, offset,
                         splat(b, static_cast<double>(diagonal), ElementType::S64, self.shape));
  return {b.select(keep, self, splat(b, 0, self.type, self.shape))};
}
LOWER({"triu", "triu_", "triu.out"}, [](LoweringContext& ctx) { return triangle(ctx, true); });
LOWER({"tril", "tril_", "tril.out"}, [](LoweringContext& ctx) { return triangle(ctx, false); });

LOWER({"flip", "flip.out"}, [](LoweringContext& ctx) {
  Value self = ctx.tensor(0);
  std::vector<int64_t> dims;
  for (int64_t d : ctx.arg(1).toIntVector()) dims.push_back(wrap_dim(d, self.rank()));
  if (self.rank() == 0) return Values{self};  // a 0-d tensor flips to itself (dim 0 or -1)
  return Values{ctx.b.reverse(self, dims)};
});

LOWER({"constant_pad_nd", "constant_pad_nd.out"}, [](LoweringContext& ctx) {
  Value self = ctx.tensor(0);
  auto pad = ctx.arg(1).toIntVector();
  TORCH_CHECK(pad.size() % 2 == 0 && static_cast<int64_t>(pad.size() / 2) <= self.rank(),
              "Length of pad must be even but instead it equals ", pad.size());
  std::vector<int64_t> low(self.rank(), 0), high(self.rank(), 0), interior(self.rank(), 0);
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    int64_t d = self.rank() - 1 - static_cast<int64_t>(i);
    low[d] = pad[2 * i];
    high[d] = pad[2 * i + 1];
  }
  return Values{ctx.b.pad(self, ctx.scalar(2, self.type), low, high, interior)};
});

// take(self, index): self flattened, read at index (negative counts from the end).
LOWER({"take", "take.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value self = ctx.tensor(0), index = ctx.tensor(1);
  TORCH_CHECK(index.type == ElementType::S64, "take(): Expected a long tensor for index, but got ",
              to_scalar_type(index.type));
  int64_t n = hlo::num_elements(self.shape), m = hlo::num_elements(index.shape);
  TORCH_CHECK_INDEX(n > 0 || m == 0, "take(): tried to take from an empty tensor");
  if (m == 0) return Values{splat(b, 0, self.type, index.shape)};
  Value flat = b.reshape(self, {n});
  Value positions = wrap_index(b, b.reshape(index, {m}), n);
  return Values{b.reshape(take_slices(b, flat, 0, positions), index.shape)};
});
// Of repeated indices, which value lands is unspecified (XLA's scatter, as CPU's loop):
// deterministic algorithms refuse a put_ that does not accumulate, on every device, as ATen's
// put_ does (on each call, cached or not).
void alert_put_without_accumulate(const std::vector<c10::IValue>& args) {
  if (args.size() > 3 && args[3].isBool() && !args[3].toBool()) {
    at::globalContext().alertNotDeterministic("put_");
  }
}

// put(self, index, source, accumulate): source written (or added) into self flattened.
Values put(LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value self = ctx.tensor(0), index = ctx.tensor(1), source = ctx.tensor(2);
  TORCH_CHECK(index.type == ElementType::S64, "put_(): Expected a long tensor for index, but got ",
              to_scalar_type(index.type));
  TORCH_CHECK(self.type == source.type,
              "put_(): self and source expected to have the same dtype, but got self.dtype = ",
              to_scalar_type(self.type), " and source.dtype = ", to_scalar_type(source.type));
  int64_t n = hlo::num_elements(self.shape), m = hlo::num_elements(index.shape);
  TORCH_CHECK_INDEX(hlo::num_elements(source.shape) == m,
                    "put_(): Expected source and index to have "
                    "the same number of elements, but got source.numel() = ",
                    hlo::num_elements(source.shape), ", index.numel() = ", m);
  if (m == 0) return Values{self};
  TORCH_CHECK_INDEX(n > 0, "put_(): Tried to put elements into an empty tensor");
  Value flat = b.reshape(self, {n});
  Value positions = wrap_index(b, b.reshape(index, {m}), n);
  Value updates = b.reshape(source, {m});
  bool accumulate = ctx.arg(3).toBool();
  return Values{b.reshape(combine_slices(b, flat, 0, positions, updates,
                                         accumulate ? std::optional(BinaryOp::Add) : std::nullopt),
                          self.shape)};
}
LOWER({"put_", "put", "put.out"}, put, {}, alert_put_without_accumulate);

// nonzero_static(self, size, fill_value) -> [size, ndim]: the first `size` nonzero coordinates
// in row-major order, padded with fill_value; each nonzero's slot is the running count.
LOWER({"nonzero_static", "nonzero_static.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  int64_t size = ctx.arg(1).toInt(), fill = ctx.arg(2).toInt();
  TORCH_CHECK(size >= 0, "nonzero_static: 'size' must be an non-negative integer");
  int64_t n = hlo::num_elements(x.shape), rank = x.rank();
  int64_t columns = std::max<int64_t>(rank, 1);
  Value filled = splat(b, static_cast<double>(fill), ElementType::S64, {size + 1, columns});
  if (n == 0 || size == 0) return Values{b.slice(filled, {0, 0}, {size, rank}, {1, 1})};
  Value flat = b.reshape(x, {n});
  Value nonzero = flat.type == ElementType::Pred ? flat : b.ne(flat, splat(b, 0, flat.type, {n}));
  Value count = b.convert(nonzero, ElementType::S64);
  std::vector<int64_t> window{n}, ones{1};
  Value slot = b.subtract(b.reduce_window(count, b.constant_int(0, ElementType::S64), window, ones,
                                          ones, ones, {{n - 1, 0}}, BinaryOp::Add),
                          splat(b, 1, ElementType::S64, {n}));
  // Zeros and nonzeros beyond `size` go to the dropped row `size`.
  slot = b.select(b.and_(nonzero, b.lt(slot, splat(b, size, ElementType::S64, {n}))), slot,
                  splat(b, static_cast<double>(size), ElementType::S64, {n}));
  // Row-major coordinates of each flat position.
  std::vector<Value> coordinates;
  Value rest = b.iota({n}, ElementType::S64, 0);
  for (int64_t d = rank; d-- > 0;) {
    Value extent = splat(b, static_cast<double>(x.shape[d]), ElementType::S64, {n});
    coordinates.insert(coordinates.begin(), b.reshape(b.remainder(rest, extent), {n, 1}));
    rest = b.divide(rest, extent);
  }
  if (rank == 0) coordinates.push_back(splat(b, 0, ElementType::S64, {n, 1}));
  Value rows = b.concatenate(coordinates, 1);
  Value out = combine_slices(b, filled, 0, slot, rows, std::nullopt);
  return Values{b.slice(out, {0, 0}, {size, rank}, {1, 1})};
});

// embedding_renorm_(self, indices, max_norm, norm_type): each referenced row whose norm
// exceeds max_norm is scaled to max_norm / (norm + 1e-7), once however often it is referenced.
LOWER({"embedding_renorm_"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value self = ctx.tensor(0), indices = ctx.tensor(1);
  TORCH_CHECK(self.rank() == 2, "embedding_renorm_: weight must be 2-D");
  double max_norm = ctx.arg(2).toDouble(), p = ctx.arg(3).toDouble();
  int64_t rows = self.shape[0], m = hlo::num_elements(indices.shape);
  if (m == 0) return Values{self};
  Value positions = wrap_index(b, b.reshape(indices, {m}), rows);
  Value referenced = combine_slices(b, splat(b, 0, ElementType::F32, {rows}), 0, positions,
                                    splat(b, 1, ElementType::F32, {m}), std::nullopt);
  ElementType acc = opmath(self.type);
  Value w = b.convert(self, acc);
  Value a = b.abs(w);
  Value norm = p == 2   ? b.sqrt(sum(b, b.multiply(a, a), {1}))
               : p == 1 ? sum(b, a, {1})
                        : b.power(sum(b, b.power(a, splat(b, p, acc, a.shape)), {1}),
                                  splat(b, 1.0 / p, acc, {rows}));
  Value scale = b.divide(splat(b, max_norm, acc, {rows}), b.add(norm, splat(b, 1e-7, acc, {rows})));
  Value apply = b.and_(b.gt(referenced, splat(b, 0, ElementType::F32, {rows})),
                       b.gt(norm, splat(b, max_norm, acc, {rows})));
  scale = b.select(apply, scale, splat(b, 1, acc, {rows}));
  return Values{b.convert(b.multiply(w, b.broadcast_in_dim(scale, self.shape, {0})), self.type)};
});

}  // namespace
}  // namespace torch_tpu::aten
