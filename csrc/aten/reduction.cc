// Reductions: sum, mean, min/max (with indices), arg-min/max, var/std, any/all, norms, softmax.
#include <c10/util/Exception.h>

#include <limits>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

Shape out_shape(const Shape& in, const std::vector<int64_t>& dims, bool keepdim) {
  if (keepdim) return keepdim_shape(in, dims);
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) == dims.end())
      out.push_back(in[d]);
  }
  return out;
}

ElementType sum_type(const LoweringContext& ctx, int dtype_index, const Value& x) {
  const c10::IValue& dtype = ctx.arg(dtype_index);
  if (!dtype.isNone()) return et(dtype.toScalarType());
  // Integer and bool sums accumulate in int64, as on CPU.
  return hlo::is_float(x.type) || hlo::is_complex(x.type) ? x.type : ElementType::S64;
}

Value sum_impl(LoweringContext& ctx, int dims_index, bool keepdim, int dtype_index) {
  Value x = ctx.tensor(0);
  ElementType t = sum_type(ctx, dtype_index, x);
  std::vector<int64_t> dims =
      dims_index < 0 ? reduce_dims(ctx, -1, x.rank()) : reduce_dims(ctx, dims_index, x.rank());
  Value s = ctx.b.convert(sum(ctx.b, ctx.b.convert(x, opmath(t)), dims), t);
  return ctx.b.reshape(s, out_shape(x.shape, dims, keepdim));
}

LOWER({"sum.dim_IntList", "sum.IntList_out"},
      [](LoweringContext& ctx) { return Values{sum_impl(ctx, 1, ctx.arg(2).toBool(), 3)}; });
LOWER({"sum", "sum.out"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  ElementType t = sum_type(ctx, 1, x);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.rank(); ++d) dims.push_back(d);
  return Values{ctx.b.convert(sum(ctx.b, ctx.b.convert(x, opmath(t)), dims), t)};
});

Value mean_impl(LoweringContext& ctx, std::vector<int64_t> dims, bool keepdim, int dtype_index) {
  Value x = ctx.tensor(0);
  ElementType t = ctx.arg(dtype_index).isNone() ? x.type : et(ctx.arg(dtype_index).toScalarType());
  TORCH_CHECK(hlo::is_float(t) || hlo::is_complex(t),
              "mean(): could not infer output dtype. Input dtype must be either "
              "a floating point or complex dtype. Got: ",
              to_scalar_type(t));
  int64_t count = 1;
  for (int64_t d : dims) count *= x.shape[d];
  // Accumulate low-precision floats in f32, as torch's CPU kernels do.
  ElementType acc = (t == ElementType::F16 || t == ElementType::BF16) ? ElementType::F32 : t;
  Value s = sum(ctx.b, ctx.b.convert(x, acc), dims);
  Value m = ctx.b.divide(s, splat(ctx.b, static_cast<double>(count), acc, s.shape));
  return ctx.b.reshape(ctx.b.convert(m, t), out_shape(x.shape, dims, keepdim));
}
LOWER({"mean.dim", "mean.out"}, [](LoweringContext& ctx) {
  int64_t rank = ctx.tensor_meta(0).dim();
  return Values{mean_impl(ctx, reduce_dims(ctx, 1, rank), ctx.arg(2).toBool(), 3)};
});
LOWER({"mean", "mean.dtype_out"}, [](LoweringContext& ctx) {
  int64_t rank = ctx.tensor_meta(0).dim();
  return Values{mean_impl(ctx, reduce_dims(ctx, -1, rank), false, 1)};
});

Value extreme(Builder& b, const Value& x, const std::vector<int64_t>& dims, bool is_max) {
  return reduce_extremum(b, x, dims, is_max);
}

Values amax_amin(LoweringContext& ctx, bool is_max) {
  Value x = ctx.tensor(0);
  std::vector<int64_t> dims = reduce_dims(ctx, 1, x.rank());
  for (int64_t d : dims) {
    TORCH_CHECK_INDEX(x.shape[d] != 0, is_max ? "amax" : "amin", "(): Expected reduction dim ", d,
                      " to have non-zero size.");
  }
  return {ctx.b.reshape(extreme(ctx.b, x, dims, is_max),
                        out_shape(x.shape, dims, ctx.arg(2).toBool()))};
}
LOWER({"amax", "amax.out"}, [](LoweringContext& ctx) { return amax_amin(ctx, true); });
LOWER({"amin", "amin.out"}, [](LoweringContext& ctx) { return amax_amin(ctx, false); });
// hash_tensor(self, dim, keepdim, mode=0): the XOR of every element's bits after widening it to
// 64 bits (floats to double, signed integers sign-extended), as CPU's xor_sum.
LOWER({"hash_tensor", "hash_tensor.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  const int64_t mode = ctx.arg(3).toInt();
  TORCH_CHECK(mode == 0, "Unknown hash_tensor mode: ", mode);
  std::vector<int64_t> dims = reduce_dims(ctx, 1, x.rank());
  for (int64_t d : dims) {
    TORCH_CHECK_INDEX(x.shape[d] != 0, "hash_tensor: Expected reduction dim ", d,
                      " to have non-zero size.");
  }
  Value bits;
  if (hlo::is_float(x.type)) {
    bits = b.bitcast_convert(b.convert(x, ElementType::F64), ElementType::U64);
  } else if (hlo::is_signed_int(x.type)) {
    bits = b.bitcast_convert(b.convert(x, ElementType::S64), ElementType::U64);
  } else {
    bits = b.convert(x, ElementType::U64);
  }
  Value hash = b.reduce(bits, b.constant_int(0, ElementType::U64), dims, BinaryOp::Xor);
  return Values{b.reshape(hash, out_shape(x.shape, dims, ctx.arg(2).toBool()))};
});
LOWER({"max", "max.unary_out"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  TORCH_CHECK(hlo::num_elements(x.shape) > 0,
              "max(): Expected reduction dim to be specified for "
              "input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
  return Values{extreme(ctx.b, x, reduce_dims(ctx, -1, x.rank()), true)};
});
LOWER({"min", "min.unary_out"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  TORCH_CHECK(hlo::num_elements(x.shape) > 0,
              "min(): Expected reduction dim to be specified for "
              "input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
  return Values{extreme(ctx.b, x, reduce_dims(ctx, -1, x.rank()), false)};
});

// (value, index) of the first max/min along `dim`; NaN wins, as on CPU.
std::pair<Value, Value> arg_extreme(Builder& b, const Value& x, int64_t dim, bool is_max) {
  Value index = b.iota(x.shape, ElementType::S64, dim);
  Value init_value =
      is_max ? b.constant(lowest(x.type), x.type) : b.constant(highest(x.type), x.type);
  if (x.type == ElementType::S64) {
    init_value = b.constant_int(
        is_max ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max(), x.type);
  }
  auto results = b.reduce(
      {x, index}, {init_value, b.constant_int(0, ElementType::S64)}, {dim},
      [is_max](Builder& r, const std::vector<Value>& a) {
        // a = (value_l, index_l, value_r, index_r)
        Value better = r.compare(is_max ? Comparison::GT : Comparison::LT, a[0], a[2]);
        Value equal = r.eq(a[0], a[2]);
        Value earlier = r.lt(a[1], a[3]);
        Value take_left = r.or_(better, r.and_(equal, earlier));
        if (hlo::is_float(a[0].type)) {
          Value left_nan = r.ne(a[0], a[0]);
          Value right_nan = r.ne(a[2], a[2]);
          take_left = r.select(left_nan, r.or_(r.not_(right_nan), earlier),
                               r.and_(r.not_(right_nan), take_left));
        }
        return std::vector<Value>{r.select(take_left, a[0], a[2]), r.select(take_left, a[1], a[3])};
      });
  return {results[0], results[1]};
}

Values max_min_dim(LoweringContext& ctx, bool is_max) {
  Value x = ctx.tensor(0);
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), x.rank());
  bool keepdim = ctx.arg(2).toBool();
  if (x.rank() == 0) return {x, ctx.b.constant_int(0, ElementType::S64)};
  TORCH_CHECK_INDEX(x.shape[dim] != 0, is_max ? "max" : "min", "(): Expected reduction dim ", dim,
                    " to have non-zero size.");
  auto [value, index] = arg_extreme(ctx.b, x, dim, is_max);
  Shape shape = out_shape(x.shape, {dim}, keepdim);
  return {ctx.b.reshape(value, shape), ctx.b.reshape(index, shape)};
}
LOWER({"max.dim", "max.dim_max"}, [](LoweringContext& ctx) { return max_min_dim(ctx, true); });
LOWER({"min.dim", "min.dim_min"}, [](LoweringContext& ctx) { return max_min_dim(ctx, false); });

Values argmax_argmin(LoweringContext& ctx, bool is_max) {
  Value x = ctx.tensor(0);
  bool keepdim = ctx.arg(2).toBool();
  if (ctx.arg(1).isNone()) {
    TORCH_CHECK(hlo::num_elements(x.shape) > 0, is_max ? "argmax" : "argmin",
                "(): Expected reduction dim to be specified for input.numel() == 0.");
    Value flat = ctx.b.reshape(x, {hlo::num_elements(x.shape)});
    Value index = arg_extreme(ctx.b, flat, 0, is_max).second;
    return {keepdim ? ctx.b.reshape(index, Shape(x.shape.size(), 1)) : index};
  }
  TORCH_CHECK(x.rank() <= 64, "only tensors with up to 64 dims are supported");
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), x.rank());
  if (x.rank() == 0) return {ctx.b.constant_int(0, ElementType::S64)};
  TORCH_CHECK_INDEX(x.shape[dim] != 0, is_max ? "argmax" : "argmin", "(): Expected reduction dim ",
                    dim, " to have non-zero size.");
  return {
      ctx.b.reshape(arg_extreme(ctx.b, x, dim, is_max).second, out_shape(x.shape, {dim}, keepdim))};
}
LOWER({"argmax", "argmax.out"}, [](LoweringContext& ctx) { return argmax_argmin(ctx, true); });
LOWER({"argmin", "argmin.out"}, [](LoweringContext& ctx) { return argmax_argmin(ctx, false); });

// var/std with a runtime correction: sum((x - mean)^2) / max(N - correction, 0). Returns
// {var or std, mean}.
Values variance_and_mean(LoweringContext& ctx, bool take_sqrt, const char* name) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  const bool complex = hlo::is_complex(x.type);
  TORCH_CHECK(hlo::is_float(x.type) || complex,
              "std and var only support floating point and complex dtypes");
  std::vector<int64_t> dims = reduce_dims(ctx, 1, x.rank());
  bool keepdim = ctx.arg(3).toBool();
  ElementType acc =
      (x.type == ElementType::F16 || x.type == ElementType::BF16) ? ElementType::F32 : x.type;
  // A complex variance is real: the mean squared distance |x - mean|^2.
  ElementType real_acc = complex ? hlo::component_type(acc) : acc;
  Value xf = b.convert(x, acc);
  int64_t count = 1;
  for (int64_t d : dims) count *= x.shape[d];
  Value mean = b.divide(sum(b, xf, dims),
                        splat(b, static_cast<double>(count), acc, out_shape(x.shape, dims, false)));
  Value centered =
      b.subtract(xf, broadcast_to(b, b.reshape(mean, keepdim_shape(x.shape, dims)), x.shape));
  Value squared = complex ? b.add(b.multiply(b.real(centered), b.real(centered)),
                                  b.multiply(b.imag(centered), b.imag(centered)))
                          : b.multiply(centered, centered);
  Value squares = sum(b, squared, dims);
  // The correction is static (part of the key), so its warning comes with the op's first
  // call, as Python shows a warning once per place by default.
  const double given = ctx.arg(2).isNone() ? 1.0 : ctx.arg(2).toScalar().toDouble();
  if (static_cast<double>(count) - given <= 0) {
    TORCH_WARN(name,
               "(): degrees of freedom is <= 0. Correction should be strictly less than the "
               "reduction factor (input numel divided by output numel).");
  }
  Value correction = ctx.arg(2).isNone() ? b.constant(1.0, real_acc) : ctx.scalar(2, real_acc);
  Value denominator =
      b.maximum(b.subtract(b.constant(static_cast<double>(count), real_acc), correction),
                b.constant(0.0, real_acc));
  Value var = b.divide(squares, broadcast_to(b, denominator, squares.shape));
  if (take_sqrt) var = b.sqrt(var);
  Shape shape = out_shape(x.shape, dims, keepdim);
  ElementType var_type = complex ? hlo::component_type(x.type) : x.type;
  return {b.reshape(b.convert(var, var_type), shape), b.reshape(b.convert(mean, x.type), shape)};
}
LOWER({"var.correction", "var.correction_out"},
      [](LoweringContext& ctx) { return Values{variance_and_mean(ctx, false, "var")[0]}; }, {2});
LOWER({"std.correction", "std.correction_out"},
      [](LoweringContext& ctx) { return Values{variance_and_mean(ctx, true, "std")[0]}; }, {2});
LOWER({"var_mean.correction", "var_mean.correction_out"},
      [](LoweringContext& ctx) { return variance_and_mean(ctx, false, "var_mean"); }, {2});
LOWER({"std_mean.correction", "std_mean.correction_out"},
      [](LoweringContext& ctx) { return variance_and_mean(ctx, true, "std_mean"); }, {2});

Value product(Builder& b, const Value& x, const std::vector<int64_t>& dims) {
  if (x.type == ElementType::Pred)
    return b.reduce(x, b.constant_int(1, x.type), dims, BinaryOp::And);
  return b.reduce(x, b.constant(1.0, x.type), dims, BinaryOp::Multiply);
}
LOWER({"prod", "prod.out"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  ElementType t = sum_type(ctx, 1, x);
  return Values{ctx.b.convert(
      product(ctx.b, ctx.b.convert(x, opmath(t)), reduce_dims(ctx, -1, x.rank())), t)};
});
LOWER({"prod.dim_int", "prod.int_out"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  ElementType t = sum_type(ctx, 3, x);
  std::vector<int64_t> dims = x.rank() == 0
                                  ? std::vector<int64_t>{}
                                  : std::vector<int64_t>{wrap_dim(ctx.arg(1).toInt(), x.rank())};
  Value p = ctx.b.convert(product(ctx.b, ctx.b.convert(x, opmath(t)), dims), t);
  return Values{ctx.b.reshape(p, out_shape(x.shape, dims, ctx.arg(2).toBool()))};
});

// Inclusive scan along `dim`: a window covering everything before each position.
Value scan(Builder& b, const Value& x, int64_t dim, BinaryOp op, double identity) {
  if (x.rank() == 0 || x.shape[dim] == 0) return x;
  std::vector<int64_t> window(x.rank(), 1), ones(x.rank(), 1);
  std::vector<std::pair<int64_t, int64_t>> padding(x.rank(), {0, 0});
  window[dim] = x.shape[dim];
  padding[dim] = {x.shape[dim] - 1, 0};
  return b.reduce_window(x, b.constant(identity, x.type), window, ones, ones, ones, padding, op);
}
Values scan_op(LoweringContext& ctx, BinaryOp op, double identity) {
  Value x = ctx.tensor(0);
  ElementType t = sum_type(ctx, 2, x);
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), x.rank());
  return {ctx.b.convert(scan(ctx.b, ctx.b.convert(x, opmath(t)), dim, op, identity), t)};
}
LOWER({"cumsum", "cumsum_", "cumsum.out"},
      [](LoweringContext& ctx) { return scan_op(ctx, BinaryOp::Add, 0); });
LOWER({"cumprod", "cumprod_", "cumprod.out"},
      [](LoweringContext& ctx) { return scan_op(ctx, BinaryOp::Multiply, 1); });

Values any_all(LoweringContext& ctx, int dims_index, bool keepdim, bool is_any) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  Value truth = x.type == ElementType::Pred ? x : b.ne(x, splat(b, 0, x.type, x.shape));
  // any/all over dim=[] reduce nothing (sum's dim=[] reduces everything, for history's sake).
  const bool no_dims = dims_index >= 0 && ctx.arg(dims_index).isIntList() &&
                       ctx.arg(dims_index).toIntVector().empty();
  std::vector<int64_t> dims =
      no_dims ? std::vector<int64_t>{} : reduce_dims(ctx, dims_index, x.rank());
  Value r = b.reduce(truth, b.constant_int(is_any ? 0 : 1, ElementType::Pred), dims,
                     is_any ? BinaryOp::Or : BinaryOp::And);
  Value out = b.reshape(r, out_shape(x.shape, dims, keepdim));
  // uint8 inputs keep their dtype, as on CPU.
  return {x.type == ElementType::U8 ? b.convert(out, ElementType::U8) : out};
}
LOWER({"any", "any.all_out"}, [](LoweringContext& ctx) { return any_all(ctx, -1, false, true); });
LOWER({"all", "all.all_out"}, [](LoweringContext& ctx) { return any_all(ctx, -1, false, false); });
LOWER({"any.dim", "any.out", "any.dims", "any.dims_out"},
      [](LoweringContext& ctx) { return any_all(ctx, 1, ctx.arg(2).toBool(), true); });
LOWER({"all.dim", "all.out", "all.dims", "all.dims_out"},
      [](LoweringContext& ctx) { return any_all(ctx, 1, ctx.arg(2).toBool(), false); });

// The ord-norm of |x| over `dims`, accumulated in at least float32.
Value vector_norm(Builder& b, const Value& x, double ord, const std::vector<int64_t>& dims,
                  bool keepdim, ElementType t) {
  ElementType acc = (t == ElementType::F16 || t == ElementType::BF16) ? ElementType::F32 : t;
  // |x| of a complex x is real: its modulus, taken at x's own precision.
  Value a = hlo::is_complex(x.type) ? b.convert(b.abs(x), acc) : b.abs(b.convert(x, acc));
  Value r;
  if (std::isinf(ord)) {
    r = extreme(b, a, dims, ord > 0);
  } else if (ord == 0) {
    r = sum(b, b.convert(b.ne(a, splat(b, 0, acc, a.shape)), acc), dims);
  } else if (ord == 1) {
    r = sum(b, a, dims);
  } else if (ord == 2) {
    r = b.sqrt(sum(b, b.multiply(a, a), dims));
  } else {
    Value p = sum(b, b.power(a, splat(b, ord, acc, a.shape)), dims);
    r = b.power(p, splat(b, 1.0 / ord, acc, p.shape));
  }
  return b.reshape(b.convert(r, t), out_shape(x.shape, dims, keepdim));
}

// A norm is real: a complex input's norm has its parts' type.
ElementType norm_type(const Value& x, const c10::IValue& dtype) {
  if (!dtype.isNone()) return et(c10::toRealValueType(dtype.toScalarType()));
  if (hlo::is_complex(x.type)) return hlo::component_type(x.type);
  return et(float_type(to_scalar_type(x.type)));
}

// linalg_vector_norm(self, ord, dim, keepdim, dtype): ord shapes the computation (static).
LOWER({"linalg_vector_norm", "linalg_vector_norm.out"},
      [](LoweringContext& ctx) {
        Value x = ctx.tensor(0);
        return Values{vector_norm(ctx.b, x, ctx.arg(1).toScalar().toDouble(),
                                  reduce_dims(ctx, 2, x.rank()), ctx.arg(3).toBool(),
                                  norm_type(x, ctx.arg(4)))};
      },
      {1});

// torch.norm's overloads: norm(self, p=2), norm(self, p?, dtype), norm(self, p?, dim, keepdim
// [, dtype]) and their out= forms. p is static (it shapes the computation); None means 2.
LOWER({"norm.Scalar", "norm.ScalarOpt_dtype", "norm.ScalarOpt_dim", "norm.ScalarOpt_dim_dtype",
       "norm.out", "norm.dtype_out", "norm.Scalar_out", "norm.ScalarOpt_dtype_out"},
      [](LoweringContext& ctx) {
        Value x = ctx.tensor(0);
        double ord =
            ctx.num_args() > 1 && !ctx.arg(1).isNone() ? ctx.arg(1).toScalar().toDouble() : 2.0;
        bool has_dims = ctx.num_args() > 2 && ctx.arg(2).isIntList();
        std::vector<int64_t> dims =
            has_dims ? reduce_dims(ctx, 2, x.rank()) : reduce_dims(ctx, -1, x.rank());
        bool keepdim = has_dims && ctx.arg(3).toBool();
        int dtype_index = has_dims ? 4 : 2;
        c10::IValue dtype = ctx.num_args() > dtype_index && ctx.arg(dtype_index).isInt()
                                ? ctx.arg(dtype_index)
                                : c10::IValue();
        return Values{vector_norm(ctx.b, x, ord, dims, keepdim, norm_type(x, dtype))};
      },
      {1});

// nansum(self, dim, keepdim, dtype): NaNs count as zero.
LOWER({"nansum", "nansum.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  ElementType t = sum_type(ctx, 3, x);
  std::vector<int64_t> dims = reduce_dims(ctx, 1, x.rank());
  Value v = b.convert(x, opmath(t));
  if (hlo::is_float(v.type)) v = b.select(b.ne(v, v), splat(b, 0, v.type, v.shape), v);
  return Values{
      b.reshape(b.convert(sum(b, v, dims), t), out_shape(x.shape, dims, ctx.arg(2).toBool()))};
});

Value softmax(Builder& b, const Value& x, int64_t dim, bool log) {
  Value m = b.reshape(max_value(b, x, {dim}), keepdim_shape(x.shape, {dim}));
  Value shifted = b.subtract(x, broadcast_to(b, m, x.shape));
  Value e = b.exponential(shifted);
  Value s = b.reshape(sum(b, e, {dim}), keepdim_shape(x.shape, {dim}));
  if (log) return b.subtract(shifted, broadcast_to(b, b.log(s), x.shape));
  return b.divide(e, broadcast_to(b, s, x.shape));
}

Values softmax_forward(LoweringContext& ctx, bool log) {
  Value x = ctx.tensor(0);
  if (x.rank() == 0) x = ctx.b.reshape(x, {1});
  int64_t dim = wrap_dim(ctx.arg(1).toInt(), x.rank());
  bool half_to_float = ctx.arg(2).toBool();
  ElementType out_type = half_to_float ? ElementType::F32 : x.type;
  ElementType acc =
      (x.type == ElementType::F16 || x.type == ElementType::BF16) ? ElementType::F32 : x.type;
  Value y = ctx.b.convert(softmax(ctx.b, ctx.b.convert(x, acc), dim, log), out_type);
  return {ctx.b.reshape(
      y, Shape(ctx.tensor_meta(0).sizes().begin(), ctx.tensor_meta(0).sizes().end()))};
}
LOWER({"_softmax", "_softmax.out"},
      [](LoweringContext& ctx) { return softmax_forward(ctx, false); });
LOWER({"_log_softmax", "_log_softmax.out"},
      [](LoweringContext& ctx) { return softmax_forward(ctx, true); });

Values softmax_backward(LoweringContext& ctx, bool log) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0), y = ctx.tensor(1);
  Shape original = grad.shape;
  if (grad.rank() == 0) {
    grad = b.reshape(grad, {1});
    y = b.reshape(y, {1});
  }
  int64_t dim = wrap_dim(ctx.arg(2).toInt(), grad.rank());
  ElementType out_type = et(ctx.arg(3).toScalarType());
  ElementType acc = (grad.type == ElementType::F16 || grad.type == ElementType::BF16)
                        ? ElementType::F32
                        : grad.type;
  grad = b.convert(grad, acc);
  y = b.convert(y, acc);
  Value r;
  if (log) {
    Value s = b.reshape(sum(b, grad, {dim}), keepdim_shape(grad.shape, {dim}));
    r = b.subtract(grad, b.multiply(b.exponential(y), broadcast_to(b, s, grad.shape)));
  } else {
    Value gy = b.multiply(grad, y);
    Value s = b.reshape(sum(b, gy, {dim}), keepdim_shape(grad.shape, {dim}));
    r = b.subtract(gy, b.multiply(y, broadcast_to(b, s, grad.shape)));
  }
  return {b.reshape(b.convert(r, out_type), original)};
}
LOWER({"_softmax_backward_data", "_softmax_backward_data.out"},
      [](LoweringContext& ctx) { return softmax_backward(ctx, false); });
LOWER({"_log_softmax_backward_data", "_log_softmax_backward_data.out"},
      [](LoweringContext& ctx) { return softmax_backward(ctx, true); });

// log(exp(a) + exp(c)) without overflow or underflow: max + log1p(exp(-|a - c|)). Equal
// operands (two infinities of one sign too) give max + log 2.
Value log_add_exp(Builder& b, const Value& a, const Value& c) {
  Value zero = splat(b, 0, a.type, a.shape);
  Value gap = b.select(b.eq(a, c), zero, b.negate(b.abs(b.subtract(a, c))));
  return b.add(b.maximum(a, c), b.log_plus_one(b.exponential(gap)));
}

// CPU's log(exp(x) + exp(acc)) for complex numbers, special values included. Its operands are
// ordered by real part (a NaN in either part wins); a NaN anywhere gives NaN; two equal
// infinite real parts give the smaller operand (-inf) or log(exp(min) + exp(max)) (+inf, with
// C's special values, which XLA's complex exp and log do not follow); otherwise
// max + log1p(exp(min - max)).
Value complex_log_add_exp(Builder& b, const Value& x, const Value& acc) {
  ElementType real_type = x.type == ElementType::C128 ? ElementType::F64 : ElementType::F32;
  auto is_nan = [&](const Value& z) {
    return b.or_(b.ne(b.real(z), b.real(z)), b.ne(b.imag(z), b.imag(z)));
  };
  Value acc_nan = is_nan(acc), x_nan = is_nan(x);
  Value x_first = b.lt(b.real(x), b.real(acc));
  Value low = b.select(acc_nan, acc, b.select(x_nan, x, b.select(x_first, x, acc)));
  Value high = b.select(acc_nan, acc, b.select(x_nan, x, b.select(x_first, acc, x)));
  Value low_re = b.real(low), high_re = b.real(high);
  const Shape& shape = low_re.shape;
  Value inf = splat(b, INFINITY, real_type, shape);
  Value zero = splat(b, 0, real_type, shape);
  Value nan = splat(b, NAN, real_type, shape);

  Value general = b.add(high, b.log_plus_one(b.exponential(b.subtract(low, high))));
  // Both real parts +inf: exp(inf + i t) is inf (cos t + i sin t), inf + i t for t = 0, and
  // inf + i nan for an infinite t; log's real part is inf when either part is infinite.
  auto exp_at_infinity = [&](const Value& t) {
    Value finite = b.lt(b.abs(t), inf);
    Value is_zero = b.eq(t, zero);
    Value re = b.select(is_zero, inf, b.multiply(inf, b.cosine(t)));
    Value im = b.select(is_zero, t, b.multiply(inf, b.sine(t)));
    return std::pair{b.select(finite, re, inf), b.select(finite, im, nan)};
  };
  auto [low_exp_re, low_exp_im] = exp_at_infinity(b.imag(low));
  auto [high_exp_re, high_exp_im] = exp_at_infinity(b.imag(high));
  Value sum_re = b.add(low_exp_re, high_exp_re);
  Value sum_im = b.add(low_exp_im, high_exp_im);
  Value any_infinite = b.or_(b.eq(b.abs(sum_re), inf), b.eq(b.abs(sum_im), inf));
  Value log_re =
      b.select(any_infinite, inf,
               b.log(b.sqrt(b.add(b.multiply(sum_re, sum_re), b.multiply(sum_im, sum_im)))));
  Value at_plus_infinity = b.complex(log_re, b.atan2(sum_im, sum_re));

  Value both_infinite = b.and_(b.eq(b.abs(low_re), inf), b.eq(low_re, high_re));
  Value minus = b.lt(low_re, zero);
  Value result = b.select(both_infinite, b.select(minus, low, at_plus_infinity), general);
  return b.select(is_nan(low), b.complex(nan, nan), result);
}

// Complex logcumsumexp, one position at a time as CPU accumulates it (from -inf + 0i): its
// special values depend on the order of accumulation, so no parallel scan gives them.
Value complex_logcumsumexp(Builder& b, const Value& x0, int64_t dim) {
  std::vector<int64_t> to_front = {dim};
  for (int64_t d = 0; d < x0.rank(); ++d)
    if (d != dim) to_front.push_back(d);
  Value x = b.transpose(x0, to_front);
  Shape row(x.shape.begin() + 1, x.shape.end());
  Shape one_row = x.shape;
  one_row[0] = 1;
  ElementType real_type = x.type == ElementType::C128 ? ElementType::F64 : ElementType::F32;
  Value start = b.complex(splat(b, -INFINITY, real_type, row), splat(b, 0, real_type, row));
  const int64_t n = x.shape[0];
  auto state = b.while_loop(
      {b.constant_int(0, ElementType::S64), start, x, x},
      [n](Builder& r, const std::vector<Value>& s) {
        return std::vector<Value>{r.lt(s[0], r.constant_int(n, ElementType::S64))};
      },
      [&](Builder& r, const std::vector<Value>& s) {
        std::vector<Value> starts(s[2].rank(), r.constant_int(0, ElementType::S64));
        starts[0] = s[0];
        Value xi = r.reshape(r.dynamic_slice(s[2], starts, one_row), row);
        Value acc = complex_log_add_exp(r, xi, s[1]);
        Value out = r.dynamic_update_slice(s[3], r.reshape(acc, one_row), starts);
        return std::vector<Value>{r.add(s[0], r.constant_int(1, ElementType::S64)), acc, s[2], out};
      });
  std::vector<int64_t> back(x0.rank());
  for (int64_t i = 0; i < x0.rank(); ++i) back[to_front[i]] = i;
  return b.transpose(state[3], back);
}

// logcumsumexp(self, dim) = m + log(cumsum(exp(x - m))), m the slice's finite maximum. Where
// a prefix lies so far below m that its sum underflows ([-1000, 0] gave [-inf, 0]), a scan
// with log_add_exp in log2(n) doubling steps (each element combining with the partial result
// `step` places before it) gives the result instead.
LOWER({"_logcumsumexp", "_logcumsumexp.out", "logcumsumexp", "logcumsumexp.out"},
      [](LoweringContext& ctx) {
        Builder& b = ctx.b;
        Value x0 = ctx.tensor(0);
        if (x0.rank() == 0) return Values{x0};
        int64_t dim = wrap_dim(ctx.arg(1).toInt(), x0.rank());
        const int64_t n = x0.shape[dim];
        if (n == 0) return Values{x0};
        if (hlo::is_complex(x0.type)) return Values{complex_logcumsumexp(b, x0, dim)};
        ElementType m = opmath(x0.type);
        Value x = b.convert(x0, m);
        Value top = reduce_extremum(b, x, {dim}, true);
        Value finite = b.lt(b.abs(top), splat(b, INFINITY, m, top.shape));
        top = b.select(finite, top, splat(b, 0, m, top.shape));
        Value shift = broadcast_to(b, b.reshape(top, keepdim_shape(x.shape, {dim})), x.shape);
        Value sums = scan(b, b.exponential(b.subtract(x, shift)), dim, BinaryOp::Add, 0);
        Value shifted = b.add(shift, b.log(sums));

        Value scanned = x;
        const Value minus_inf = b.constant(-INFINITY, m);
        for (int64_t step = 1; step < n; step *= 2) {
          std::vector<int64_t> start(x.rank(), 0), limit(x.shape), strides(x.rank(), 1);
          limit[dim] = n - step;
          std::vector<int64_t> low(x.rank(), 0), high(x.rank(), 0), interior(x.rank(), 0);
          low[dim] = step;
          scanned = log_add_exp(
              b, scanned,
              b.pad(b.slice(scanned, start, limit, strides), minus_inf, low, high, interior));
        }
        // Sums this small have lost precision (or are zero): 2^24 (2^53) times the least
        // normal number.
        const double tiny = m == ElementType::F64 ? 0x1p-969 : 0x1p-102;
        Value accurate = b.ge(sums, splat(b, tiny, m, sums.shape));
        return Values{b.convert(b.select(accurate, shifted, scanned), x0.type)};
      });

// aminmax(self, dim?, keepdim) -> (min, max).
LOWER({"aminmax", "aminmax.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  std::vector<int64_t> dims;
  if (ctx.arg(1).isNone()) {
    for (int64_t d = 0; d < x.rank(); ++d) dims.push_back(d);
    TORCH_CHECK(hlo::num_elements(x.shape) > 0,
                "aminmax(): cannot compute aminmax over an empty dimension as the operation has "
                "no identity.");
  } else if (x.rank() > 0) {
    dims = {wrap_dim(ctx.arg(1).toInt(), x.rank())};
    TORCH_CHECK(x.shape[dims[0]] > 0, "aminmax(): Expected reduction dim ", dims[0],
                " to have non-zero size.");
  }
  bool keepdim = ctx.arg(2).toBool();
  Shape shape = out_shape(x.shape, dims, keepdim);
  if (ctx.arg(1).isNone() && !keepdim) shape = {};
  if (ctx.arg(1).isNone() && keepdim) shape = Shape(x.rank(), 1);
  return Values{b.reshape(extreme(b, x, dims, false), shape),
                b.reshape(extreme(b, x, dims, true), shape)};
});

// trace(self): the sum of a matrix's diagonal, accumulated like sum.
LOWER({"trace", "trace.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  TORCH_CHECK(x.rank() == 2, "trace: expected a matrix, but got tensor with dim ", x.rank());
  ElementType t = hlo::is_float(x.type) || hlo::is_complex(x.type) ? x.type : ElementType::S64;
  Value diagonal = b.eq(b.iota(x.shape, ElementType::S64, 0), b.iota(x.shape, ElementType::S64, 1));
  Value v = b.convert(x, opmath(t));
  return Values{b.convert(sum(b, b.select(diagonal, v, splat(b, 0, v.type, v.shape)), {0, 1}), t)};
});

// count_nonzero(self, dims) as int64; no dims counts everything.
Values count_nonzero(LoweringContext& ctx, std::vector<int64_t> dims) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  if (dims.empty() || x.rank() == 0) {
    dims.clear();
    for (int64_t d = 0; d < x.rank(); ++d) dims.push_back(d);
  }
  Value nonzero = x.type == ElementType::Pred ? x : b.ne(x, splat(b, 0, x.type, x.shape));
  return {sum(b, b.convert(nonzero, ElementType::S64), dims)};
}
LOWER({"count_nonzero.dim_IntList", "count_nonzero.dim_IntList_out"}, [](LoweringContext& ctx) {
  std::vector<int64_t> dims;
  int64_t rank = ctx.tensor_meta(0).dim();
  for (int64_t d : ctx.arg(1).toIntVector()) dims.push_back(wrap_dim(d, rank));
  return count_nonzero(ctx, dims);
});
LOWER({"count_nonzero", "count_nonzero.out"}, [](LoweringContext& ctx) {
  if (ctx.arg(1).isNone()) return count_nonzero(ctx, {});
  return count_nonzero(ctx, {wrap_dim(ctx.arg(1).toInt(), ctx.tensor_meta(0).dim())});
});

// renorm(self, p, dim, maxnorm): each slice along dim whose p-norm exceeds maxnorm is scaled
// to maxnorm / (norm + 1e-7), as on CPU.
LOWER({"renorm", "renorm_", "renorm.out"},
      [](LoweringContext& ctx) {
        Builder& b = ctx.b;
        Value x0 = ctx.tensor(0);
        double p = ctx.arg(1).toScalar().toDouble();
        TORCH_CHECK(p > 0, "renorm: non-positive-norm not supported");
        int64_t dim = wrap_dim(ctx.arg(2).toInt(), x0.rank());
        std::vector<int64_t> others;
        for (int64_t d = 0; d < x0.rank(); ++d)
          if (d != dim) others.push_back(d);
        ElementType m = opmath(x0.type);
        Value x = b.convert(x0, m);
        Value norm = vector_norm(b, x, p, others, true, m);
        Value maxnorm = as(b, ctx.scalar(3, m), m, norm.shape);
        Value factor = b.select(b.gt(norm, maxnorm),
                                b.divide(maxnorm, b.add(norm, splat(b, 1e-7, m, norm.shape))),
                                splat(b, 1, m, norm.shape));
        return Values{b.convert(b.multiply(x, broadcast_to(b, factor, x.shape)), x0.type)};
      },
      {1});

}  // namespace
}  // namespace torch_tpu::aten

namespace torch_tpu::aten {
namespace {

// isin(elements, test_elements, assume_unique, invert): every element against every test
// element, [N, M] compares reduced with `or`.
Values isin(LoweringContext& ctx) {
  Builder& b = ctx.b;
  c10::ScalarType type = promoted_type(ctx, {0, 1});
  ElementType t = et(type);
  auto flat = [&](int index) {
    Value v = ctx.arg(index).isTensor() ? b.convert(ctx.tensor(index), t) : ctx.scalar(index, t);
    return b.reshape(v, {hlo::num_elements(v.shape)});
  };
  Value elements = flat(0), tests = flat(1);
  int64_t n = elements.shape[0], m = tests.shape[0];
  Value equal =
      b.eq(b.broadcast_in_dim(elements, {n, m}, {0}), b.broadcast_in_dim(tests, {n, m}, {1}));
  Value found = b.reduce(equal, b.constant_int(0, ElementType::Pred), {1}, BinaryOp::Or);
  if (ctx.arg(3).toBool()) found = b.not_(found);
  Shape shape = ctx.arg(0).isTensor()
                    ? Shape(ctx.tensor_meta(0).sizes().begin(), ctx.tensor_meta(0).sizes().end())
                    : Shape{};
  return {b.reshape(found, shape)};
}
LOWER({"isin.Tensor_Tensor", "isin.Tensor_Tensor_out", "isin.Tensor_Scalar",
       "isin.Tensor_Scalar_out", "isin.Scalar_Tensor", "isin.Scalar_Tensor_out"},
      [](LoweringContext& ctx) { return isin(ctx); });

}  // namespace
}  // namespace torch_tpu::aten
