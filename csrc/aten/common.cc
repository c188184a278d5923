#include "csrc/aten/common.h"

#include <ATen/ExpandUtils.h>
#include <ATen/native/TypeProperties.h>
#include <c10/util/Exception.h>

#include <limits>
#include <numeric>

namespace torch_tpu::aten {

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    TORCH_CHECK(da == db || da == 1 || db == 1, "The size of tensor a (", da,
                ") must match the size of tensor b (", db, ") at non-singleton dimension ", i);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Value broadcast_to(Builder& b, const Value& x, const Shape& shape) {
  if (x.shape == shape) return x;
  TORCH_CHECK(x.shape.size() <= shape.size(), "cannot broadcast ", x.tensor_type(), " to rank ",
              shape.size());
  std::vector<int64_t> dims;
  size_t lead = shape.size() - x.shape.size();
  for (size_t i = 0; i < x.shape.size(); ++i) {
    TORCH_CHECK(x.shape[i] == 1 || x.shape[i] == shape[lead + i],
                "The expanded size of the "
                "tensor (",
                shape[lead + i], ") must match the existing size (", x.shape[i],
                ") at non-singleton dimension ", lead + i);
    dims.push_back(static_cast<int64_t>(lead + i));
  }
  // broadcast_in_dim needs size-1 dims to match or expand: drop size-1 dims that expand.
  Shape kept;
  std::vector<int64_t> kept_dims;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    if (x.shape[i] == shape[dims[i]]) {
      kept.push_back(x.shape[i]);
      kept_dims.push_back(dims[i]);
    }
  }
  Value squeezed = b.reshape(x, kept);
  return b.broadcast_in_dim(squeezed, shape, kept_dims);
}

Value splat(Builder& b, double value, ElementType type, const Shape& shape) {
  return b.constant(value, type, shape);
}

Value as(Builder& b, const Value& x, ElementType type, const Shape& shape) {
  return broadcast_to(b, b.convert(x, type), shape);
}

c10::ScalarType promoted_type(const LoweringContext& ctx, std::initializer_list<int> indices) {
  at::native::ResultTypeState state;
  for (int index : indices) {
    const c10::IValue& value = ctx.arg(index);
    if (value.isTensor()) {
      state = at::native::update_result_type_state(value.toTensor(), state);
    } else if (value.isScalar()) {
      state = at::native::update_result_type_state(value.toScalar(), state);
    }
  }
  return at::native::result_type(state);
}

c10::ScalarType float_type(c10::ScalarType type) {
  return c10::isFloatingType(type) || c10::isComplexType(type)
             ? type
             : c10::typeMetaToScalarType(at::get_default_dtype());
}

Value operand(LoweringContext& ctx, int index, ElementType type, const Shape& shape) {
  const c10::IValue& value = ctx.arg(index);
  Value x = value.isTensor() ? ctx.tensor(index) : ctx.scalar(index, type);
  return as(ctx.b, x, type, shape);
}

Shape operand_shape(const LoweringContext& ctx, std::initializer_list<int> indices) {
  Shape shape;
  for (int index : indices) {
    const c10::IValue& value = ctx.arg(index);
    if (value.isTensor()) {
      const at::Tensor& tensor = value.toTensor();
      shape = broadcast_shapes(shape, Shape(tensor.sizes().begin(), tensor.sizes().end()));
    }
  }
  return shape;
}

ElementType opmath(ElementType type) {
  return type == ElementType::F16 || type == ElementType::BF16 ? ElementType::F32 : type;
}

int64_t wrap_dim(int64_t dim, int64_t rank) {
  int64_t bound = std::max<int64_t>(rank, 1);
  TORCH_CHECK_INDEX(dim >= -bound && dim < bound,
                    "Dimension out of range (expected to be in "
                    "range of [",
                    -bound, ", ", bound - 1, "], but got ", dim, ")");
  return dim < 0 ? dim + bound : dim;
}

std::vector<int64_t> int_list(const LoweringContext& ctx, int index, size_t n) {
  std::vector<int64_t> v = ctx.arg(index).toIntVector();
  if (v.size() == 1 && n > 1) v.assign(n, v[0]);
  return v;
}

std::vector<int64_t> reduce_dims(const LoweringContext& ctx, int index, int64_t rank) {
  std::vector<int64_t> dims;
  static const c10::IValue none;
  const c10::IValue& value = index < 0 ? none : ctx.arg(index);
  if (!value.isNone()) {
    // ATen's dimension masks hold 64 bits: with a dim given, CPU refuses more dims.
    TORCH_CHECK(rank <= 64, "only tensors with up to 64 dims are supported");
    if (value.isInt()) {
      dims.push_back(value.toInt());
    } else {
      for (int64_t d : value.toIntVector()) dims.push_back(d);
    }
  }
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
    return dims;
  }
  for (int64_t& d : dims) d = rank == 0 ? 0 : wrap_dim(d, rank);
  if (rank == 0) return {};
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

Shape keepdim_shape(const Shape& shape, const std::vector<int64_t>& dims) {
  Shape out = shape;
  for (int64_t d : dims) out[d] = 1;
  return out;
}

Value sum(Builder& b, const Value& x, const std::vector<int64_t>& dims) {
  return b.reduce(x, b.constant(0.0, x.type), dims, BinaryOp::Add);
}

double lowest(ElementType type) {
  switch (type) {
    case ElementType::Pred:
      return 0;
    case ElementType::S8:
      return std::numeric_limits<int8_t>::min();
    case ElementType::S16:
      return std::numeric_limits<int16_t>::min();
    case ElementType::S32:
      return std::numeric_limits<int32_t>::min();
    case ElementType::S64:
      return static_cast<double>(std::numeric_limits<int64_t>::min());
    case ElementType::U8:
    case ElementType::U16:
    case ElementType::U32:
    case ElementType::U64:
      return 0;
    default:
      return -std::numeric_limits<double>::infinity();
  }
}

double highest(ElementType type) {
  switch (type) {
    case ElementType::Pred:
      return 1;
    case ElementType::S8:
      return std::numeric_limits<int8_t>::max();
    case ElementType::S16:
      return std::numeric_limits<int16_t>::max();
    case ElementType::S32:
      return std::numeric_limits<int32_t>::max();
    case ElementType::S64:
      return 9.2233720368547748e18;
    case ElementType::U8:
      return 255;
    case ElementType::U16:
      return 65535;
    case ElementType::U32:
      return 4294967295.0;
    case ElementType::U64:
      return 1.8446744073709552e19;
    default:
      return std::numeric_limits<double>::infinity();
  }
}

Value extremum(Builder& b, BinaryOp op, const Value& x, const Value& y) {
  if (x.type == ElementType::Pred)
    return b.binary(op == BinaryOp::Maximum ? BinaryOp::Or : BinaryOp::And, x, y);
  Value r = b.binary(op, x, y);
  if (!hlo::is_float(x.type)) return r;
  return b.select(is_nan(b, x), x, b.select(is_nan(b, y), y, r));
}

Value hypot(Builder& b, const Value& x, const Value& y) {
  Value u = b.abs(x), v = b.abs(y);
  Value big = extremum(b, BinaryOp::Maximum, u, v), small = extremum(b, BinaryOp::Minimum, u, v);
  Value ratio = b.divide(small, big);
  Value one = splat(b, 1, x.type, x.shape), zero = splat(b, 0, x.type, x.shape);
  Value r = b.multiply(big, b.sqrt(b.add(one, b.multiply(ratio, ratio))));
  r = b.select(b.eq(big, zero), zero, r);
  Value inf = splat(b, INFINITY, x.type, x.shape);
  return b.select(b.or_(b.eq(u, inf), b.eq(v, inf)), inf, r);
}

ElementType bits_of(ElementType t) {
  switch (t) {
    case ElementType::F64:
      return ElementType::S64;
    case ElementType::F32:
      return ElementType::S32;
    default:
      return ElementType::S16;
  }
}

Value sign_bit(Builder& b, const Value& x) {
  ElementType bits = bits_of(x.type);
  return b.lt(b.bitcast_convert(x, bits), splat(b, 0, bits, x.shape));
}

Value reduce_extremum(Builder& b, const Value& x, const std::vector<int64_t>& dims, bool is_max) {
  Value init;
  if (x.type == ElementType::S64) {
    init = b.constant_int(
        is_max ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max(), x.type);
  } else {
    init = b.constant(is_max ? lowest(x.type) : highest(x.type), x.type);
  }
  const BinaryOp op = is_max ? BinaryOp::Maximum : BinaryOp::Minimum;
  return b.reduce({x}, {init}, dims, [op](Builder& r, const std::vector<Value>& args) {
    return std::vector<Value>{extremum(r, op, args[0], args[1])};
  })[0];
}

Value max_value(Builder& b, const Value& x, const std::vector<int64_t>& dims) {
  return reduce_extremum(b, x, dims, true);
}

Value erf(Builder& b, const Value& x) {
  // StableHLO has no erf op (it lives in CHLO), so use the rational approximation that XLA
  // uses for f32, max error about 1e-7, clamped to [-4, 4] where it saturates.
  ElementType t = x.type;
  Value f = b.convert(x, ElementType::F32);
  Value clamped =
      b.clamp(splat(b, -4.0, ElementType::F32, {}), f, splat(b, 4.0, ElementType::F32, {}));
  Value x2 = b.multiply(clamped, clamped);
  const double alpha[] = {-2.72614225801306e-10, 2.77068142495902e-08,  -2.10102402082508e-06,
                          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                          -1.60960333262415e-02};
  const double beta[] = {-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                         -7.37332916720468e-03, -1.42647390514189e-02};
  Value p = splat(b, alpha[0], ElementType::F32, x.shape);
  for (int i = 1; i < 7; ++i) {
    p = b.add(b.multiply(p, x2), splat(b, alpha[i], ElementType::F32, x.shape));
  }
  p = b.multiply(p, clamped);
  Value q = splat(b, beta[0], ElementType::F32, x.shape);
  for (int i = 1; i < 5; ++i) {
    q = b.add(b.multiply(q, x2), splat(b, beta[i], ElementType::F32, x.shape));
  }
  return b.convert(b.divide(p, q), t);
}

Value is_nan(Builder& b, const Value& x) { return b.ne(x, x); }

Value all_of(Builder& b, const Value& pred) {
  std::vector<int64_t> dims(pred.shape.size());
  std::iota(dims.begin(), dims.end(), 0);
  return b.reduce(pred, b.constant(1, ElementType::Pred), dims, BinaryOp::And);
}

void check_index_range(Builder& b, const Value& index, int64_t low, int64_t high,
                       std::optional<int64_t> exempt, Builder::CheckKind kind) {
  Value i = b.convert(index, ElementType::S64);
  auto bound = [&](int64_t value) {
    return splat(b, static_cast<double>(value), ElementType::S64, i.shape);
  };
  Value in_range = b.and_(b.ge(i, bound(low)), b.lt(i, bound(high)));
  if (exempt) in_range = b.or_(in_range, b.eq(i, bound(*exempt)));
  b.check_at_runtime(all_of(b, in_range), kind,
                     "an index out of range (a value outside the dimension it indexes, or a "
                     "class target outside [0, classes))");
}

Value take_slices(Builder& b, const Value& x, int64_t dim, const Value& index) {
  Value positions =
      b.reshape(b.convert(index, ElementType::S64), {hlo::num_elements(index.shape), 1});
  hlo::GatherDims dims;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d != dim) dims.offset_dims.push_back(d);
  }
  dims.collapsed_slice_dims = {dim};
  dims.start_index_map = {dim};
  dims.index_vector_dim = 1;
  Shape sizes = x.shape;
  if (sizes[dim] == 0) {
    // Nothing to take from: any index is out of range (its runtime check says so at the next
    // sync point), and a gather of one-wide slices from an empty dimension would not compile.
    Shape result = x.shape;
    result[dim] = hlo::num_elements(index.shape);
    return splat(b, 0, x.type, result);
  }
  sizes[dim] = 1;
  return b.gather(x, positions, dims, sizes);
}

Value combine_slices(Builder& b, const Value& x, int64_t dim, const Value& index,
                     const Value& updates, std::optional<BinaryOp> op) {
  std::vector<int64_t> to_front{dim};
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d != dim) to_front.push_back(d);
  }
  std::vector<int64_t> back(to_front.size());
  for (size_t i = 0; i < to_front.size(); ++i) back[to_front[i]] = static_cast<int64_t>(i);
  int64_t count = hlo::num_elements(index.shape);
  Value positions = b.reshape(b.convert(index, ElementType::S64), {count, 1});
  hlo::ScatterDims dims;
  for (int64_t d = 1; d < x.rank(); ++d) dims.update_window_dims.push_back(d);
  dims.inserted_window_dims = {0};
  dims.scatter_dims_to_operand_dims = {0};
  dims.index_vector_dim = 1;
  Value combined = b.scatter(b.transpose(x, to_front), positions, b.transpose(updates, to_front),
                             dims, [op](Builder& r, const std::vector<Value>& a) {
                               if (!op) return std::vector<Value>{a[1]};
                               return std::vector<Value>{r.binary(*op, a[0], a[1])};
                             });
  return b.transpose(combined, back);
}

// Solves T X = B for triangular T [..., n, n] and B [..., n, m] with T's batch shape.
Value triangular_substitute(Builder& b, const Value& t, const Value& rhs, bool upper, bool unit) {
  const int64_t r = t.rank(), n = t.shape[r - 1];
  std::vector<int64_t> batch;
  for (int64_t d = 0; d < r - 2; ++d) batch.push_back(d);
  Shape row_shape = t.shape;
  row_shape[r - 2] = 1;
  Value cols = b.iota(row_shape, ElementType::S64, r - 1);
  Value rows = b.iota(rhs.shape, ElementType::S64, r - 2);
  Value zero_row = splat(b, 0, t.type, row_shape);
  Value x = rhs;
  for (int64_t step = 0; step < n; ++step) {
    int64_t i = upper ? n - 1 - step : step;
    std::vector<int64_t> lo(r, 0), hi(t.shape.begin(), t.shape.end()), unit_step(r, 1);
    lo[r - 2] = i;
    hi[r - 2] = i + 1;
    Value row = b.slice(t, lo, hi, unit_step);  // [..., 1, n]
    Value i_row = splat(b, static_cast<double>(i), ElementType::S64, row_shape);
    Value off =
        b.select(b.compare(upper ? Comparison::GT : Comparison::LT, cols, i_row), row, zero_row);
    Value done = b.dot_general(off, x, batch, batch, {r - 1}, {r - 2}, t.type);  // [..., 1, m]
    Value value = b.subtract(x, broadcast_to(b, done, x.shape));
    if (!unit) {
      std::vector<int64_t> dlo = lo, dhi = hi;
      dlo[r - 1] = i;
      dhi[r - 1] = i + 1;
      value = b.divide(value, broadcast_to(b, b.slice(t, dlo, dhi, unit_step), x.shape));
    }
    x = b.select(b.eq(rows, splat(b, static_cast<double>(i), ElementType::S64, x.shape)), value, x);
  }
  return x;
}

void check_parameter_dtypes(const at::Tensor& input,
                            std::initializer_list<std::optional<at::Tensor>> parameters) {
  std::optional<c10::ScalarType> first;
  for (const auto& parameter : parameters) {
    if (!parameter || !parameter->defined()) continue;
    const c10::ScalarType type = parameter->scalar_type();
    if (!first) first = type;
    if (*first == input.scalar_type()) {
      TORCH_CHECK(type == *first, "expected scalar type ", *first, " but found ", type);
    } else {
      TORCH_CHECK(type == at::kFloat,
                  "mixed dtype (tpu): expect parameter to have scalar type of Float");
    }
  }
  TORCH_CHECK(
      !first || *first == input.scalar_type() || at::isReducedFloatingType(input.scalar_type()),
      "mixed dtype (tpu): all inputs must share same datatype.");
}

}  // namespace torch_tpu::aten
