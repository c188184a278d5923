// Elementwise lowerings: arithmetic, comparisons, math functions, activations and their
// gradients. Each registers its functional, in-place and out= forms together.
#include <ATen/native/TypeProperties.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <string_view>

#include "csrc/aten/common.h"
#include "csrc/aten/complex_elementary.h"
#include "csrc/aten/complex_inverse.h"
#include "csrc/aten/error_function.h"

namespace torch_tpu::aten {
namespace {

// self (op) other * alpha, with torch's type promotion.
Values add_like(LoweringContext& ctx, BinaryOp op) {
  c10::ScalarType type = promoted_type(ctx, {0, 1});
  if (ctx.num_args() > 2 && ctx.arg(2).isScalar()) {
    c10::Scalar alpha = ctx.arg(2).toScalar();
    TORCH_CHECK(!(c10::isIntegralType(type, true) && alpha.isFloatingPoint()),
                "For integral input tensors, argument alpha must not be a floating point number.");
  }
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(type), m = opmath(t);
  Value a = operand(ctx, 0, m, shape);
  Value other = operand(ctx, 1, m, shape);
  if (type == c10::ScalarType::Bool)
    return {ctx.b.binary(op == BinaryOp::Add ? BinaryOp::Or : BinaryOp::Xor, a, other)};
  if (ctx.num_args() > 2 && ctx.arg(2).isScalar()) {
    // alpha is a runtime input: its value never selects the computation.
    other = ctx.b.multiply(other, as(ctx.b, ctx.scalar(2, m), m, shape));
  }
  return {ctx.b.convert(ctx.b.binary(op, a, other), t)};
}

LOWER({"add.Tensor", "add_.Tensor", "add.out", "add.Scalar", "add_.Scalar", "add.Scalar_out"},
      [](LoweringContext& ctx) { return add_like(ctx, BinaryOp::Add); });
LOWER({"sub.Tensor", "sub_.Tensor", "sub.out", "sub.Scalar", "sub_.Scalar", "sub.Scalar_out"},
      [](LoweringContext& ctx) { return add_like(ctx, BinaryOp::Subtract); });
LOWER({"rsub.Tensor", "rsub.Scalar"}, [](LoweringContext& ctx) {
  c10::ScalarType type = promoted_type(ctx, {0, 1});
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(type);
  Value other = operand(ctx, 1, t, shape);
  Value self = ctx.b.multiply(operand(ctx, 0, t, shape), as(ctx.b, ctx.scalar(2, t), t, shape));
  return Values{ctx.b.subtract(other, self)};
});

// Computed as CPU computes half precision: in float32 (a Python scalar kept in it, not rounded
// to the half type first: float16 x * 1e5 was x * inf), rounded once at the end.
Values binary_promoted(LoweringContext& ctx, BinaryOp op, bool to_float = false) {
  c10::ScalarType type = promoted_type(ctx, {0, 1});
  if (to_float) type = float_type(type);
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(type), m = opmath(t);
  return {ctx.b.convert(ctx.b.binary(op, operand(ctx, 0, m, shape), operand(ctx, 1, m, shape)), t)};
}

LOWER({"mul.Tensor", "mul_.Tensor", "mul.out", "mul.Scalar", "mul_.Scalar", "mul.Scalar_out"},
      [](LoweringContext& ctx) {
        if (promoted_type(ctx, {0, 1}) == c10::ScalarType::Bool)
          return binary_promoted(ctx, BinaryOp::And);
        return binary_promoted(ctx, BinaryOp::Multiply);
      });
LOWER({"div.Tensor", "div_.Tensor", "div.out", "div.Scalar", "div_.Scalar", "div.Scalar_out"},
      [](LoweringContext& ctx) { return binary_promoted(ctx, BinaryOp::Divide, true); });
// Floor division as CPU computes it for floats: from fmod, so that the quotient is exact where
// x / y rounds across an integer; division by zero gives x / y.
Value float_floor_divide(Builder& b, const Value& x, const Value& y) {
  Value zero = splat(b, 0, x.type, x.shape), one = splat(b, 1, x.type, x.shape);
  Value mod = b.remainder(x, y);
  Value div = b.divide(b.subtract(x, mod), y);
  Value adjust = b.and_(b.ne(mod, zero), b.ne(b.lt(y, zero), b.lt(mod, zero)));
  div = b.select(adjust, b.subtract(div, one), div);
  Value floored = b.floor(div);
  floored = b.select(b.gt(b.subtract(div, floored), splat(b, 0.5, x.type, x.shape)),
                     b.add(floored, one), floored);
  // A zero quotient takes the sign of x / y.
  Value quotient = b.divide(x, y);
  Value signed_zero = b.select(b.lt(quotient, zero), b.negate(zero), zero);
  floored = b.select(b.eq(div, zero), signed_zero, floored);
  return b.select(b.eq(y, zero), quotient, floored);
}
// Integer floor division: truncating division corrected where the signs differ.
Value integer_floor_divide(Builder& b, const Value& x, const Value& y) {
  Value q = b.divide(x, y);
  Value r = b.remainder(x, y);
  Value zero = splat(b, 0, x.type, x.shape);
  Value adjust = b.and_(b.ne(r, zero), b.ne(b.lt(r, zero), b.lt(y, zero)));
  return b.select(adjust, b.subtract(q, splat(b, 1, x.type, x.shape)), q);
}
Values floor_divide(LoweringContext& ctx) {
  c10::ScalarType type = promoted_type(ctx, {0, 1});
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(type);
  Builder& b = ctx.b;
  if (!hlo::is_float(t)) {
    Value x = operand(ctx, 0, t, shape), y = operand(ctx, 1, t, shape);
    return {integer_floor_divide(b, x, y)};
  }
  ElementType m = opmath(t);
  return {
      b.convert(float_floor_divide(b, operand(ctx, 0, m, shape), operand(ctx, 1, m, shape)), t)};
}
LOWER({"floor_divide", "floor_divide_.Tensor", "floor_divide.out", "floor_divide.Scalar",
       "floor_divide_.Scalar", "floor_divide.Scalar_out"},
      [](LoweringContext& ctx) { return floor_divide(ctx); });
LOWER({"div.Tensor_mode", "div_.Tensor_mode", "div.out_mode", "div.Scalar_mode", "div_.Scalar_mode",
       "div.Scalar_mode_out"},
      [](LoweringContext& ctx) {
        const c10::IValue& mode = ctx.arg(2);
        if (!mode.isNone() && mode.toStringRef() == "floor") return floor_divide(ctx);
        c10::ScalarType type = promoted_type(ctx, {0, 1});
        Shape shape = operand_shape(ctx, {0, 1});
        Builder& b = ctx.b;
        if (mode.isNone()) type = float_type(type);
        ElementType t = et(type);
        Value x = operand(ctx, 0, t, shape), y = operand(ctx, 1, t, shape);
        Value q = b.divide(x, y);  // integers truncate toward zero
        if (mode.isNone() || !hlo::is_float(t)) return Values{q};
        return Values{b.multiply(b.sign(q), b.floor(b.abs(q)))};
      });
// Integer powers by squaring, one step per bit the exponent's type can hold, in int64 and
// wrapped back to the type (a product modulo 2^64 keeps it modulo 2^8 ... 2^32): the plugin's
// integer power uses only the exponent's low bits (int64 2 ** 64 gave 1, uint8 3 ** 200 gave 0).
// A negative exponent gives what CPU gives: 1 for a base of 1, +-1 for -1, 0 otherwise.
Value integer_power(Builder& b, const Value& base, const Value& exponent, int exponent_bits) {
  auto constant = [&](int64_t v) { return b.constant_int(v, ElementType::S64, base.shape); };
  Value result = constant(1), square = base;
  for (int bit = 0; bit < exponent_bits; ++bit) {
    Value set =
        b.ne(b.and_(b.shift_right_logical(exponent, constant(bit)), constant(1)), constant(0));
    result = b.select(set, b.multiply(result, square), result);
    if (bit + 1 < exponent_bits) square = b.multiply(square, square);
  }
  Value one = constant(1), minus_one = constant(-1);
  Value odd = b.ne(b.and_(exponent, one), constant(0));
  Value negative_power =
      b.select(b.eq(base, one), one,
               b.select(b.eq(base, minus_one), b.select(odd, minus_one, one), constant(0)));
  return b.select(b.lt(exponent, constant(0)), negative_power, result);
}
// Complex z^w as CPU computes it: glibc's cpow, exp(w log z) with C99's special values
// (complex_elementary.h); complex32 in complex64. A Scalar exponent takes CPU's shortcuts at the
// values it checks for: 1 for 0, z for 1, sqrt z for 0.5, 1 / sqrt z for -0.5, 1 / z for -1,
// z z for 2, z z z for 3 and 1 / (z z) for -2 (exp(2 log z) is a rounding away from z z).
Values complex_power(LoweringContext& ctx, c10::ScalarType type) {
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(type), m = t == ElementType::C32 ? ElementType::C64 : t;
  Builder& b = ctx.b;
  Value z = operand(ctx, 0, m, shape), w = operand(ctx, 1, m, shape);
  Value result = complex_pow(b, z, w);
  if (ctx.arg(1).isScalar()) {
    Value re = b.real(w), im = b.imag(w);
    Value one = splat(b, 1, m, shape);
    Value square = b.multiply(z, z);
    Value root = complex_sqrt(b, z);
    const std::pair<double, Value> shortcuts[] = {{0.0, one},
                                                  {1.0, z},
                                                  {0.5, root},
                                                  {-0.5, b.divide(one, root)},
                                                  {-1.0, b.divide(one, z)},
                                                  {2.0, square},
                                                  {3.0, b.multiply(square, z)},
                                                  {-2.0, b.divide(one, square)}};
    Value real_exponent = b.eq(im, splat(b, 0, re.type, shape));
    for (const auto& [value, shortcut] : shortcuts) {
      Value hit = b.and_(real_exponent, b.eq(re, splat(b, value, re.type, shape)));
      result = b.select(hit, shortcut, result);
    }
  }
  return {b.convert(result, t)};
}
Values power(LoweringContext& ctx) {
  c10::ScalarType type = promoted_type(ctx, {0, 1});
  if (c10::isComplexType(type)) return complex_power(ctx, type);
  if (!c10::isIntegralType(type, false)) return binary_promoted(ctx, BinaryOp::Power);
  Shape shape = operand_shape(ctx, {0, 1});
  Value x = operand(ctx, 0, ElementType::S64, shape), y = operand(ctx, 1, ElementType::S64, shape);
  // Exponents of the promoted type: its value bits (8 for uint8, 7 for int8, 63 for int64).
  int bits = static_cast<int>(c10::elementSize(type)) * 8 - (c10::isSignedType(type) ? 1 : 0);
  return {ctx.b.convert(integer_power(ctx.b, x, y, bits), et(type))};
}
LOWER({"pow.Tensor_Tensor", "pow_.Tensor", "pow.Tensor_Tensor_out", "pow.Scalar", "pow.Scalar_out"},
      power);
LOWER({"pow.Tensor_Scalar", "pow_.Scalar", "pow.Tensor_Scalar_out"}, power, {},
      // On every call (the exponent is a runtime input), as CPU checks it.
      [](const std::vector<c10::IValue>& args) {
        const c10::Scalar exponent = args[1].toScalar();
        TORCH_CHECK(!(c10::isIntegralType(args[0].toTensor().scalar_type(), true) &&
                      exponent.isIntegral(true) && exponent.toLong() < 0),
                    "Integers to negative integer powers are not allowed.");
      });
Values extremum_promoted(LoweringContext& ctx, BinaryOp op) {
  c10::ScalarType type = promoted_type(ctx, {0, 1});
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(type);
  return {extremum(ctx.b, op, operand(ctx, 0, t, shape), operand(ctx, 1, t, shape))};
}
LOWER({"maximum", "maximum.out"},
      [](LoweringContext& ctx) { return extremum_promoted(ctx, BinaryOp::Maximum); });
LOWER({"minimum", "minimum.out"},
      [](LoweringContext& ctx) { return extremum_promoted(ctx, BinaryOp::Minimum); });
LOWER({"atan2", "atan2_", "atan2.out"},
      [](LoweringContext& ctx) { return binary_promoted(ctx, BinaryOp::Atan2, true); });
LOWER({"bitwise_and.Tensor", "bitwise_and_.Tensor", "bitwise_and.Tensor_out", "bitwise_and.Scalar",
       "bitwise_and_.Scalar", "bitwise_and.Scalar_out"},
      [](LoweringContext& ctx) { return binary_promoted(ctx, BinaryOp::And); });
LOWER({"bitwise_or.Tensor", "bitwise_or_.Tensor", "bitwise_or.Tensor_out", "bitwise_or.Scalar",
       "bitwise_or_.Scalar", "bitwise_or.Scalar_out"},
      [](LoweringContext& ctx) { return binary_promoted(ctx, BinaryOp::Or); });
LOWER({"bitwise_xor.Tensor", "bitwise_xor_.Tensor", "bitwise_xor.Tensor_out", "bitwise_xor.Scalar",
       "bitwise_xor_.Scalar", "bitwise_xor.Scalar_out"},
      [](LoweringContext& ctx) { return binary_promoted(ctx, BinaryOp::Xor); });

// Python-style remainder: the sign follows the divisor.
LOWER({"remainder.Tensor", "remainder_.Tensor", "remainder.Tensor_out", "remainder.Scalar",
       "remainder_.Scalar", "remainder.Scalar_out", "remainder.Scalar_Tensor",
       "remainder.Scalar_Tensor_out"},
      [](LoweringContext& ctx) {
        c10::ScalarType type = promoted_type(ctx, {0, 1});
        Shape shape = operand_shape(ctx, {0, 1});
        ElementType t = et(type);
        Builder& b = ctx.b;
        Value x = operand(ctx, 0, t, shape), y = operand(ctx, 1, t, shape);
        Value r = b.remainder(x, y);
        Value zero = splat(b, 0, t, shape);
        Value fix = b.and_(b.ne(r, zero), b.ne(b.lt(r, zero), b.lt(y, zero)));
        return Values{b.select(fix, b.add(r, y), r)};
      });
LOWER({"fmod.Tensor", "fmod_.Tensor", "fmod.Tensor_out", "fmod.Scalar", "fmod_.Scalar",
       "fmod.Scalar_out"},
      [](LoweringContext& ctx) {
        // As CPU: a Scalar divisor is rounded to the tensor's type first (float16 fmod(x, 2.3)
        // divides by 2.30078), then half types compute in float32.
        c10::ScalarType type = promoted_type(ctx, {0, 1});
        Shape shape = operand_shape(ctx, {0, 1});
        ElementType t = et(type), m = opmath(t);
        Builder& b = ctx.b;
        Value x = b.convert(operand(ctx, 0, t, shape), m);
        Value y = b.convert(operand(ctx, 1, t, shape), m);
        return Values{b.convert(b.remainder(x, y), t)};
      });

Values compare(LoweringContext& ctx, Comparison direction) {
  c10::ScalarType type = promoted_type(ctx, {0, 1});
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(type);
  Builder& b = ctx.b;
  Value x = operand(ctx, 0, t, shape), y = operand(ctx, 1, t, shape);
  if (hlo::is_complex(t)) {
    // Complex numbers are equal when both parts are (so NaN in either part is unequal);
    // CPU orders them no other way.
    TORCH_CHECK_NOT_IMPLEMENTED(direction == Comparison::EQ || direction == Comparison::NE,
                                "comparison ", hlo::stablehlo_name(direction),
                                " is not defined for complex tensors");
    Value re = b.compare(direction, b.real(x), b.real(y));
    Value im = b.compare(direction, b.imag(x), b.imag(y));
    return {b.binary(direction == Comparison::EQ ? BinaryOp::And : BinaryOp::Or, re, im)};
  }
  return {b.compare(direction, x, y)};
}

#define TORCH_TPU_COMPARE(name, direction)                                        \
  LOWER({#name ".Tensor", #name "_.Tensor", #name ".Tensor_out", #name ".Scalar", \
         #name "_.Scalar", #name ".Scalar_out"},                                  \
        [](LoweringContext& ctx) { return compare(ctx, direction); })
TORCH_TPU_COMPARE(eq, Comparison::EQ);
TORCH_TPU_COMPARE(ne, Comparison::NE);
TORCH_TPU_COMPARE(lt, Comparison::LT);
TORCH_TPU_COMPARE(le, Comparison::LE);
TORCH_TPU_COMPARE(gt, Comparison::GT);
TORCH_TPU_COMPARE(ge, Comparison::GE);

Values logical(LoweringContext& ctx, BinaryOp op) {
  Shape shape = operand_shape(ctx, {0, 1});
  Builder& b = ctx.b;
  auto truth = [&](int index) {
    Value x = ctx.tensor(index);
    Value t = x.type == ElementType::Pred ? x : b.ne(x, splat(b, 0, x.type, x.shape));
    return broadcast_to(b, t, shape);
  };
  return {b.binary(op, truth(0), truth(1))};
}
LOWER({"logical_and", "logical_and_", "logical_and.out"},
      [](LoweringContext& ctx) { return logical(ctx, BinaryOp::And); });
LOWER({"logical_or", "logical_or_", "logical_or.out"},
      [](LoweringContext& ctx) { return logical(ctx, BinaryOp::Or); });
LOWER({"logical_xor", "logical_xor_", "logical_xor.out"},
      [](LoweringContext& ctx) { return logical(ctx, BinaryOp::Xor); });
LOWER({"logical_not", "logical_not_", "logical_not.out"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  Builder& b = ctx.b;
  return Values{x.type == ElementType::Pred ? b.not_(x) : b.eq(x, splat(b, 0, x.type, x.shape))};
});

// where's Scalar overloads stay composite (they decompose to where.self), so autograd keeps
// their derivative.
LOWER({"where.self", "where.self_out"}, [](LoweringContext& ctx) {
  c10::ScalarType type = promoted_type(ctx, {1, 2});
  Shape shape = broadcast_shapes(operand_shape(ctx, {0}), operand_shape(ctx, {1, 2}));
  ElementType t = et(type);
  Value condition = ctx.tensor(0);
  TORCH_CHECK(condition.type == ElementType::Pred || condition.type == ElementType::U8,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              to_scalar_type(condition.type));
  condition = ctx.b.convert(condition, ElementType::Pred);
  return Values{ctx.b.select(broadcast_to(ctx.b, condition, shape), operand(ctx, 1, t, shape),
                             operand(ctx, 2, t, shape))};
});
LOWER({"masked_fill.Scalar", "masked_fill_.Scalar", "masked_fill.Scalar_out", "masked_fill.Tensor",
       "masked_fill_.Tensor", "masked_fill.Tensor_out"},
      [](LoweringContext& ctx) {
        Value self = ctx.tensor(0);
        Value mask = ctx.tensor(1);
        TORCH_CHECK(mask.type == ElementType::Pred,
                    "masked_fill_ only supports boolean masks, but got mask with dtype ",
                    to_scalar_type(mask.type));
        Shape shape = broadcast_shapes(self.shape, mask.shape);
        Value fill = operand(ctx, 2, self.type, shape);
        return Values{
            ctx.b.select(broadcast_to(ctx.b, mask, shape), fill, broadcast_to(ctx.b, self, shape))};
      });

Values clamp_impl(LoweringContext& ctx, int min_index, int max_index) {
  std::vector<int> indices{0};
  if (min_index >= 0 && !ctx.arg(min_index).isNone()) indices.push_back(min_index);
  if (max_index >= 0 && !ctx.arg(max_index).isNone()) indices.push_back(max_index);
  TORCH_CHECK(indices.size() > 1, "torch.clamp: At least one of 'min' or 'max' must not be None");
  // As ATen: tensor bounds promote with self; Scalar bounds promote only an integral or bool
  // self (clamp(int_tensor, min=0.5) is float), never a floating one.
  c10::ScalarType type = ctx.tensor_meta(0).scalar_type();
  if (ctx.arg(indices[1]).isTensor() || !c10::isFloatingType(type)) {
    at::native::ResultTypeState state;
    for (int index : indices) {
      const c10::IValue& value = ctx.arg(index);
      state = value.isTensor() ? at::native::update_result_type_state(value.toTensor(), state)
                               : at::native::update_result_type_state(value.toScalar(), state);
    }
    type = at::native::result_type(state);
  }
  Shape shape = operand_shape(ctx, {0});
  for (size_t i = 1; i < indices.size(); ++i)
    shape = broadcast_shapes(shape, operand_shape(ctx, {indices[i]}));
  ElementType t = et(type);
  Value x = operand(ctx, 0, t, shape);
  if (min_index >= 0 && !ctx.arg(min_index).isNone()) {
    x = extremum(ctx.b, BinaryOp::Maximum, x, operand(ctx, min_index, t, shape));
  }
  if (max_index >= 0 && !ctx.arg(max_index).isNone()) {
    x = extremum(ctx.b, BinaryOp::Minimum, x, operand(ctx, max_index, t, shape));
  }
  return {x};
}
LOWER({"clamp", "clamp_", "clamp.out", "clamp.Tensor", "clamp_.Tensor", "clamp.Tensor_out"},
      [](LoweringContext& ctx) { return clamp_impl(ctx, 1, 2); });
LOWER({"clamp_min", "clamp_min_", "clamp_min.out", "clamp_min.Tensor", "clamp_min_.Tensor",
       "clamp_min.Tensor_out"},
      [](LoweringContext& ctx) { return clamp_impl(ctx, 1, -1); });
LOWER({"clamp_max", "clamp_max_", "clamp_max.out", "clamp_max.Tensor", "clamp_max_.Tensor",
       "clamp_max.Tensor_out"},
      [](LoweringContext& ctx) { return clamp_impl(ctx, -1, 1); });

// Unary ops computed in floating point (integers promote, as torch does).
Values float_unary(LoweringContext& ctx, const std::function<Value(Builder&, Value)>& f) {
  Value x = ctx.tensor(0);
  ElementType t = et(float_type(to_scalar_type(x.type)));
  return {f(ctx.b, ctx.b.convert(x, t))};
}

#define TORCH_TPU_FLOAT_UNARY(name, op)                                          \
  LOWER({#name, #name "_", #name ".out"}, [](LoweringContext& ctx) {             \
    return float_unary(ctx, [](Builder& b, Value x) { return b.unary(op, x); }); \
  })
TORCH_TPU_FLOAT_UNARY(expm1, UnaryOp::ExponentialMinusOne);
TORCH_TPU_FLOAT_UNARY(log1p, UnaryOp::LogPlusOne);
TORCH_TPU_FLOAT_UNARY(sin, UnaryOp::Sine);
TORCH_TPU_FLOAT_UNARY(cos, UnaryOp::Cosine);
TORCH_TPU_FLOAT_UNARY(tan, UnaryOp::Tan);

#define TORCH_TPU_FLOAT_UNARY_FN(name, body) \
  LOWER({#name, #name "_", #name ".out"},    \
        [](LoweringContext& ctx) { return float_unary(ctx, [](Builder & b, Value x) body); })
// The same computed as CPU computes half precision: in float32, rounded once at the end (the
// functions below use constants and intermediate values past float16's range).
Values float_unary_in_opmath(LoweringContext& ctx, Value (*f)(Builder&, Value)) {
  return float_unary(ctx, [f](Builder& b, Value x) {
    return b.convert(f(b, b.convert(x, opmath(x.type))), x.type);
  });
}
#define TORCH_TPU_FLOAT_UNARY_OPMATH_FN(name, body)                   \
  LOWER({#name, #name "_", #name ".out"}, [](LoweringContext& ctx) {  \
    return float_unary_in_opmath(ctx, [](Builder & b, Value x) body); \
  })
// Complex ones with C99's values at signed zeros, infinities and NaN parts (complex_elementary.h).
TORCH_TPU_FLOAT_UNARY_FN(exp, {
  return hlo::is_complex(x.type) ? complex_exp(b, x) : b.exponential(x);
});
TORCH_TPU_FLOAT_UNARY_FN(log, { return hlo::is_complex(x.type) ? complex_log(b, x) : b.log(x); });
TORCH_TPU_FLOAT_UNARY_FN(sqrt,
                         { return hlo::is_complex(x.type) ? complex_sqrt(b, x) : b.sqrt(x); });
TORCH_TPU_FLOAT_UNARY_FN(tanh,
                         { return hlo::is_complex(x.type) ? complex_tanh(b, x) : b.tanh(x); });
// Both parts of a complex times a real: XLA's complex product with (c + 0i) makes an infinite
// part's 0 x inf a NaN in the other part.
Value times_real(Builder& b, const Value& z, double c) {
  Value re = b.real(z), im = b.imag(z);
  Value factor = splat(b, c, re.type, re.shape);
  return b.complex(b.multiply(re, factor), b.multiply(im, factor));
}
// log2 z and log10 z = log z / log 2 or 10; complex ones from C99's log (CPU: std::log10).
Value log_base(Builder& b, const Value& x, double log_of_base) {
  if (hlo::is_complex(x.type)) return times_real(b, complex_log(b, x), 1.0 / log_of_base);
  return b.divide(b.log(x), splat(b, log_of_base, x.type, x.shape));
}
TORCH_TPU_FLOAT_UNARY_FN(log2, { return log_base(b, x, 0.69314718055994531); });
TORCH_TPU_FLOAT_UNARY_FN(log10, { return log_base(b, x, 2.302585092994046); });
// Complex 2^z = e^(z log 2), as CPU (there is no std::exp2 of a complex).
TORCH_TPU_FLOAT_UNARY_FN(exp2, {
  if (hlo::is_complex(x.type)) return complex_exp(b, times_real(b, x, 0.69314718055994531));
  return b.power(splat(b, 2.0, x.type, x.shape), x);
});
// 1 / w as CPU's complex division computes it (Smith's: the ratio of the smaller part to the
// larger, so 1 / (inf + i inf) is NaN, as CPU and NumPy give it, and 1 / 0 is inf + i NaN).
Value smith_reciprocal(Builder& b, const Value& w) {
  Value c = b.real(w), d = b.imag(w);
  auto constant = [&](double v) { return splat(b, v, c.type, c.shape); };
  Value zero = constant(0), one = constant(1), nan = constant(NAN);
  auto or_nan = [&](const Value& ratio, const Value& v) {  // 0 x NaN ratio, written out
    return b.select(b.ne(ratio, ratio), nan, v);
  };
  Value wide_ratio = b.divide(d, c),
        wide_scale = b.divide(one, b.add(c, b.multiply(d, wide_ratio)));
  Value tall_ratio = b.divide(c, d),
        tall_scale = b.divide(one, b.add(d, b.multiply(c, tall_ratio)));
  Value wide_re = or_nan(wide_ratio, wide_scale);
  Value wide_im = b.multiply(b.subtract(zero, wide_ratio), wide_scale);
  // (ratio + 0): -0 becomes +0, as in CPU's sum (XLA folds x + 0 to x).
  Value tall_re = b.multiply(b.select(b.eq(tall_ratio, zero), zero, tall_ratio), tall_scale);
  Value tall_im = or_nan(tall_ratio, b.multiply(constant(-1), tall_scale));
  Value wide = b.ge(b.abs(c), b.abs(d));
  Value re = b.select(wide, wide_re, tall_re), im = b.select(wide, wide_im, tall_im);
  Value at_zero = b.and_(b.eq(c, zero), b.eq(d, zero));
  re = b.select(at_zero, constant(INFINITY), re);
  im = b.select(at_zero, nan, im);
  return b.complex(re, im);
}
// Complex sigmoid as CPU computes it, 1 / (1 + e^-z) by Smith's division: the plugin's logistic
// gave 0 where e^-z overflows to inf - i inf, which CPU divides into NaN.
TORCH_TPU_FLOAT_UNARY_FN(sigmoid, {
  if (!hlo::is_complex(x.type)) return b.logistic(x);
  return smith_reciprocal(b, b.add(splat(b, 1.0, x.type, x.shape), complex_exp(b, b.negate(x))));
});
// Complex 1 / sqrt z from C99's sqrt.
TORCH_TPU_FLOAT_UNARY_FN(rsqrt, {
  if (hlo::is_complex(x.type)) return smith_reciprocal(b, complex_sqrt(b, x));
  return b.rsqrt(x);
});
TORCH_TPU_FLOAT_UNARY_FN(reciprocal, { return b.divide(splat(b, 1.0, x.type, x.shape), x); });
// float64 to its precision; the rest by the float32 rational approximation (gelu's: quick on
// every chip, and within 1e-7 of erf, whose values are at most 1).
TORCH_TPU_FLOAT_UNARY_FN(erf, {
  return x.type == hlo::ElementType::F64 ? erf_float64(b, x) : erf(b, x);
});

// Unary ops that keep their input type.
#define TORCH_TPU_SAME_UNARY(name, op)    \
  LOWER({#name, #name "_", #name ".out"}, \
        [](LoweringContext& ctx) { return Values{ctx.b.unary(op, ctx.tensor(0))}; })
// |z| of a complex z by C99's hypot: the plugin's complex abs drops a NaN part (|1 + NaN i|
// came out sqrt(2)) and gives NaN for |NaN + inf i|, which is inf.
Value magnitude(Builder& b, const Value& x) {
  if (!hlo::is_complex(x.type)) return b.abs(x);
  if (x.type == hlo::ElementType::C32) {  // in complex64, rounded once
    return b.convert(magnitude(b, b.convert(x, hlo::ElementType::C64)), hlo::ElementType::F16);
  }
  return hypot(b, b.real(x), b.imag(x));
}
LOWER({"abs", "abs_", "abs.out"},
      [](LoweringContext& ctx) { return Values{magnitude(ctx.b, ctx.tensor(0))}; });
// sign of a real or bool `x`: 0 for NaN and the identity on bool, as CPU computes it.
Value real_sign(Builder& b, const Value& x) {
  if (x.type == hlo::ElementType::Pred) return x;
  Value sign = b.sign(x);
  if (!hlo::is_float(x.type)) return sign;
  return b.select(b.ne(x, x), splat(b, 0, x.type, x.shape), sign);
}
LOWER({"sign", "sign_", "sign.out"},
      [](LoweringContext& ctx) { return Values{real_sign(ctx.b, ctx.tensor(0))}; });
// sgn: sign for reals (0 for NaN too); z / |z| for complex numbers (0 at 0).
LOWER({"sgn", "sgn_", "sgn.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  if (!hlo::is_complex(x.type)) return Values{real_sign(b, x)};
  Value modulus = magnitude(b, x);
  Value zero = splat(b, 0, modulus.type, x.shape);
  Value safe = b.select(b.eq(modulus, zero), splat(b, 1, modulus.type, x.shape), modulus);
  Value unit = b.divide(x, b.complex(safe, zero));
  return Values{b.select(b.eq(modulus, zero), splat(b, 0, x.type, x.shape), unit)};
});
TORCH_TPU_SAME_UNARY(bitwise_not, UnaryOp::Not);

LOWER({"neg", "neg_", "neg.out"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  TORCH_CHECK(x.type != ElementType::Pred,
              "Negation, the `-` operator, on a bool tensor is not "
              "supported. If you are trying to invert a mask, use the `~` or `logical_not()` "
              "operator instead.");
  return Values{ctx.b.negate(x)};
});

Values rounding(LoweringContext& ctx, UnaryOp op) {
  Value x = ctx.tensor(0);
  if (!hlo::is_float(x.type)) return {x};
  return {ctx.b.unary(op, x)};
}
LOWER({"floor", "floor_", "floor.out"},
      [](LoweringContext& ctx) { return rounding(ctx, UnaryOp::Floor); });
LOWER({"ceil", "ceil_", "ceil.out"},
      [](LoweringContext& ctx) { return rounding(ctx, UnaryOp::Ceil); });
LOWER({"round", "round_", "round.out"},
      [](LoweringContext& ctx) { return rounding(ctx, UnaryOp::RoundNearestEven); });
// round(x, decimals): as CPU, nearbyint(x * 10^d) / 10^d, or nearbyint(x / 10^-d) * 10^-d.
LOWER({"round.decimals", "round_.decimals", "round.decimals_out"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  int64_t decimals = ctx.arg(1).toInt();
  Builder& b = ctx.b;
  if (!hlo::is_float(x.type) || decimals == 0) return rounding(ctx, UnaryOp::RoundNearestEven);
  ElementType m = opmath(x.type);
  Value v = b.convert(x, m);
  Value scale = splat(b, std::pow(10.0, static_cast<double>(std::abs(decimals))), m, v.shape);
  const BinaryOp in = decimals > 0 ? BinaryOp::Multiply : BinaryOp::Divide;
  const BinaryOp out = decimals > 0 ? BinaryOp::Divide : BinaryOp::Multiply;
  Value rounded = b.round_nearest_even(b.binary(in, v, scale));
  // The last step in float64, correctly rounded back: the plugin's float32 division by a
  // constant is off by an ulp from CPU's.
  Value wide_scale =
      splat(b, std::pow(10.0, static_cast<double>(std::abs(decimals))), ElementType::F64, v.shape);
  Value r = b.binary(out, b.convert(rounded, ElementType::F64), wide_scale);
  return Values{b.convert(r, x.type)};
});
LOWER({"trunc", "trunc_", "trunc.out"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  if (!hlo::is_float(x.type)) return Values{x};
  Builder& b = ctx.b;
  return Values{b.multiply(b.sign(x), b.floor(b.abs(x)))};
});

LOWER({"isnan"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  if (hlo::is_complex(x.type)) {
    return Values{ctx.b.or_(is_nan(ctx.b, ctx.b.real(x)), is_nan(ctx.b, ctx.b.imag(x)))};
  }
  if (!hlo::is_float(x.type)) return Values{splat(ctx.b, 0, ElementType::Pred, x.shape)};
  return Values{is_nan(ctx.b, x)};
});

// Activations and their gradients.
LOWER({"relu", "relu_"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  return Values{extremum(ctx.b, BinaryOp::Maximum, x, splat(ctx.b, 0, x.type, x.shape))};
});
LOWER({"threshold_backward", "threshold_backward.grad_input"}, [](LoweringContext& ctx) {
  Value grad = ctx.tensor(0);
  Value self = ctx.tensor(1);
  Shape shape = broadcast_shapes(grad.shape, self.shape);
  Value threshold = as(ctx.b, ctx.scalar(2, self.type), self.type, shape);
  Value keep = ctx.b.gt(broadcast_to(ctx.b, self, shape), threshold);
  return Values{
      ctx.b.select(keep, broadcast_to(ctx.b, grad, shape), splat(ctx.b, 0, grad.type, shape))};
});
LOWER({"threshold", "threshold_", "threshold.out"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  Value threshold = as(ctx.b, ctx.scalar(1, x.type), x.type, x.shape);
  Value value = as(ctx.b, ctx.scalar(2, x.type), x.type, x.shape);
  // CPU's form: x <= threshold ? value : x, which keeps NaN.
  return Values{ctx.b.select(ctx.b.le(x, threshold), value, x)};
});

// gelu(x) = x * cdf(x); cdf is 0.5 (1 + erf(x / sqrt 2)), or its tanh approximation.
Value gelu_cdf(Builder& b, const Value& x, bool tanh_approx, Value* derivative) {
  auto c = [&](double v) { return splat(b, v, x.type, x.shape); };
  if (tanh_approx) {
    Value x2 = b.multiply(x, x);
    Value inner =
        b.multiply(c(0.7978845608028654), b.add(x, b.multiply(c(0.044715), b.multiply(x2, x))));
    Value t = b.tanh(inner);
    Value cdf = b.multiply(c(0.5), b.add(c(1), t));
    if (derivative) {
      // d/dx [x cdf] = cdf + x * 0.5 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
      Value dinner =
          b.multiply(c(0.7978845608028654), b.add(c(1), b.multiply(c(3 * 0.044715), x2)));
      Value dt = b.multiply(b.subtract(c(1), b.multiply(t, t)), dinner);
      *derivative = b.add(cdf, b.multiply(b.multiply(x, c(0.5)), dt));
    }
    return cdf;
  }
  Value cdf = b.multiply(c(0.5), b.add(c(1), erf(b, b.multiply(x, c(0.7071067811865476)))));
  if (derivative) {
    Value pdf =
        b.multiply(c(0.3989422804014327), b.exponential(b.multiply(c(-0.5), b.multiply(x, x))));
    *derivative = b.add(cdf, b.multiply(x, pdf));
  }
  return cdf;
}

LOWER({"gelu", "gelu_", "gelu.out"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  bool tanh_approx = ctx.arg(1).toStringRef() == "tanh";
  return Values{ctx.b.multiply(x, gelu_cdf(ctx.b, x, tanh_approx, nullptr))};
});
LOWER({"gelu_backward", "gelu_backward.grad_input"}, [](LoweringContext& ctx) {
  Value grad = ctx.tensor(0), x = ctx.tensor(1);
  Value derivative;
  gelu_cdf(ctx.b, x, ctx.arg(2).toStringRef() == "tanh", &derivative);
  return Values{ctx.b.multiply(grad, derivative)};
});

LOWER({"silu", "silu_", "silu.out"}, [](LoweringContext& ctx) {
  Value x = ctx.tensor(0);
  return Values{ctx.b.multiply(x, ctx.b.logistic(x))};
});
LOWER({"silu_backward", "silu_backward.grad_input"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0), x = ctx.tensor(1);
  Value s = b.logistic(x);
  Value one = splat(b, 1, x.type, x.shape);
  Value d = b.multiply(s, b.add(one, b.multiply(x, b.subtract(one, s))));
  return Values{b.multiply(grad, d)};
});
// For complex numbers autograd wants grad * conj(derivative); conj is the identity on reals.
LOWER({"sigmoid_backward", "sigmoid_backward.grad_input"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0), y = ctx.tensor(1);
  Value d = b.multiply(y, b.subtract(splat(b, 1, y.type, y.shape), y));
  return Values{b.multiply(grad, b.conj(d))};
});
LOWER({"tanh_backward", "tanh_backward.grad_input"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0), y = ctx.tensor(1);
  Value d = b.subtract(splat(b, 1, y.type, y.shape), b.multiply(y, y));
  return Values{b.multiply(grad, b.conj(d))};
});
LOWER({"leaky_relu", "leaky_relu_", "leaky_relu.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  Value slope = as(b, ctx.scalar(1, x.type), x.type, x.shape);
  return Values{b.select(b.gt(x, splat(b, 0, x.type, x.shape)), x, b.multiply(x, slope))};
});
LOWER(
    {"leaky_relu_backward", "leaky_relu_backward.grad_input"},
    [](LoweringContext& ctx) {
      Builder& b = ctx.b;
      Value grad = ctx.tensor(0), x = ctx.tensor(1);
      Value slope = as(b, ctx.scalar(2, x.type), x.type, x.shape);
      return Values{b.select(b.gt(x, splat(b, 0, x.type, x.shape)), grad, b.multiply(grad, slope))};
    },
    {},
    // On every call (the slope is a runtime input): after an in-place forward, `self` is the
    // result, whose sign tells the input's only for a slope of at least 0.
    [](const std::vector<c10::IValue>& args) {
      TORCH_CHECK(!args[3].toBool() || args[2].toScalar().toDouble() >= 0.0,
                  "In-place leakyReLu backward calculation is triggered with a negative slope "
                  "which is not supported. This is caused by calling in-place forward function "
                  "with a negative slope, please call out-of-place version instead.");
    });
LOWER({"hardtanh", "hardtanh_", "hardtanh.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  return Values{b.minimum(b.maximum(x, as(b, ctx.scalar(1, x.type), x.type, x.shape)),
                          as(b, ctx.scalar(2, x.type), x.type, x.shape))};
});
LOWER({"hardtanh_backward", "hardtanh_backward.grad_input"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0), x = ctx.tensor(1);
  Value lo = as(b, ctx.scalar(2, x.type), x.type, x.shape),
        hi = as(b, ctx.scalar(3, x.type), x.type, x.shape);
  Value inside = b.and_(b.gt(x, lo), b.lt(x, hi));
  return Values{b.select(inside, grad, splat(b, 0, grad.type, grad.shape))};
});

}  // namespace
}  // namespace torch_tpu::aten

namespace torch_tpu::aten {
namespace {

// lerp(self, end, weight) = self + weight * (end - self)
LOWER({"lerp.Scalar", "lerp_.Scalar", "lerp.Scalar_out", "lerp.Tensor", "lerp_.Tensor",
       "lerp.Tensor_out"},
      [](LoweringContext& ctx) {
        Builder& b = ctx.b;
        c10::ScalarType type = promoted_type(ctx, {0, 1});
        Shape shape = operand_shape(ctx, {0, 1, 2});
        ElementType t = et(type), m = opmath(t);
        Value self = operand(ctx, 0, m, shape), end = operand(ctx, 1, m, shape);
        Value weight = operand(ctx, 2, m, shape);
        return Values{b.convert(b.add(self, b.multiply(weight, b.subtract(end, self))), t)};
      });

Values addc(LoweringContext& ctx, BinaryOp op) {
  Builder& b = ctx.b;
  c10::ScalarType type = promoted_type(ctx, {0, 1, 2});
  Shape shape = operand_shape(ctx, {0, 1, 2});
  ElementType t = et(type), m = opmath(t);
  Value term = b.binary(op, operand(ctx, 1, m, shape), operand(ctx, 2, m, shape));
  Value value = as(b, ctx.scalar(3, m), m, shape);
  return {b.convert(b.add(operand(ctx, 0, m, shape), b.multiply(value, term)), t)};
}
LOWER({"addcmul", "addcmul_", "addcmul.out"},
      [](LoweringContext& ctx) { return addc(ctx, BinaryOp::Multiply); });
LOWER({"addcdiv", "addcdiv_", "addcdiv.out"},
      [](LoweringContext& ctx) { return addc(ctx, BinaryOp::Divide); });

}  // namespace
}  // namespace torch_tpu::aten

namespace torch_tpu::aten {
namespace {

// elu(self, alpha, scale, input_scale): x > 0 ? scale x : scale alpha (exp(x input_scale) - 1)
LOWER({"elu", "elu_", "elu.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  auto s = [&](int i) { return as(b, ctx.scalar(i, x.type), x.type, x.shape); };
  Value alpha = s(1), scale = s(2), input_scale = s(3);
  Value negative =
      b.multiply(b.multiply(scale, alpha), b.exponential_minus_one(b.multiply(x, input_scale)));
  Value positive = b.multiply(scale, x);
  return Values{b.select(b.gt(x, splat(b, 0, x.type, x.shape)), positive, negative)};
});
// elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result)
LOWER(
    {"elu_backward", "elu_backward.grad_input"},
    [](LoweringContext& ctx) {
      Builder& b = ctx.b;
      Value grad = ctx.tensor(0), x = ctx.tensor(5);
      auto s = [&](int i) { return as(b, ctx.scalar(i, x.type), x.type, x.shape); };
      Value alpha = s(1), scale = s(2), input_scale = s(3);
      Value negative_coefficient = b.multiply(alpha, scale);
      Value negative = ctx.arg(4).toBool()
                           ? b.multiply(input_scale, b.add(x, negative_coefficient))
                           : b.multiply(b.multiply(input_scale, negative_coefficient),
                                        b.exponential(b.multiply(x, input_scale)));
      Value slope = b.select(b.le(x, splat(b, 0, x.type, x.shape)), negative, scale);
      return Values{b.multiply(grad, slope)};
    },
    {},
    // On every call (alpha is a runtime input): after an in-place forward (elu_, celu_), the
    // result's sign tells the input's only for an alpha of at least 0, as CPU checks.
    [](const std::vector<c10::IValue>& args) {
      TORCH_CHECK(!args[4].toBool() || args[1].toScalar().toDouble() >= 0.0,
                  "In-place elu backward calculation is triggered with a negative slope which is "
                  "not supported. This is caused by calling in-place forward function with a "
                  "negative slope, please call out-of-place version instead.");
    });

// softplus(x) = log1p(exp(beta x)) / beta, or x where beta x > threshold.
Value softplus(Builder& b, const Value& x, const Value& beta, const Value& threshold) {
  Value scaled = b.multiply(x, beta);
  Value soft = b.divide(b.log_plus_one(b.exponential(scaled)), beta);
  return b.select(b.gt(scaled, threshold), x, soft);
}
LOWER({"softplus", "softplus.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  return Values{softplus(b, x, as(b, ctx.scalar(1, x.type), x.type, x.shape),
                         as(b, ctx.scalar(2, x.type), x.type, x.shape))};
});
LOWER({"softplus_backward", "softplus_backward.grad_input"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0), x = ctx.tensor(1);
  Value beta = as(b, ctx.scalar(2, x.type), x.type, x.shape);
  Value threshold = as(b, ctx.scalar(3, x.type), x.type, x.shape);
  Value scaled = b.multiply(x, beta);
  Value d = b.logistic(scaled);
  return Values{b.select(b.gt(scaled, threshold), grad, b.multiply(grad, d))};
});

// mish(x) = x tanh(softplus(x)), softplus with beta 1, threshold 20 as torch's kernel.
LOWER({"mish", "mish_", "mish.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  Value sp = softplus(b, x, splat(b, 1, x.type, x.shape), splat(b, 20, x.type, x.shape));
  return Values{b.multiply(x, b.tanh(sp))};
});
LOWER({"mish_backward"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0), x = ctx.tensor(1);
  Value t = b.tanh(softplus(b, x, splat(b, 1, x.type, x.shape), splat(b, 20, x.type, x.shape)));
  Value one = splat(b, 1, x.type, x.shape);
  Value d = b.add(t, b.multiply(b.multiply(x, b.logistic(x)), b.subtract(one, b.multiply(t, t))));
  return Values{b.multiply(grad, d)};
});

}  // namespace
}  // namespace torch_tpu::aten

namespace torch_tpu::aten {
namespace {

double largest_finite(ElementType type) {
  switch (type) {
    case ElementType::F16:
      return 65504.0;
    case ElementType::BF16:
      return 3.3895313892515355e38;
    case ElementType::F32:
      return 3.4028234663852886e38;
    default:
      return 1.7976931348623157e308;
  }
}

// nan_to_num(self, nan?, posinf?, neginf?): the replacements are floats, part of the key.
LOWER({"nan_to_num", "nan_to_num_", "nan_to_num.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  if (!hlo::is_float(x.type)) return Values{x};
  auto value_or = [&](int index, double fallback) {
    return ctx.arg(index).isNone() ? fallback : ctx.arg(index).toDouble();
  };
  double big = largest_finite(x.type);
  Value nan = splat(b, value_or(1, 0.0), x.type, x.shape);
  Value posinf = splat(b, value_or(2, big), x.type, x.shape);
  Value neginf = splat(b, value_or(3, -big), x.type, x.shape);
  Value out = b.select(is_nan(b, x), nan, x);
  out = b.select(b.eq(x, splat(b, INFINITY, x.type, x.shape)), posinf, out);
  return Values{b.select(b.eq(x, splat(b, -INFINITY, x.type, x.shape)), neginf, out)};
});

}  // namespace
}  // namespace torch_tpu::aten

namespace torch_tpu::aten {
namespace {

// Inverse and hyperbolic trigonometry: StableHLO has only atan2 among them (the rest live in
// CHLO, which plugins do not accept), so they are written from atan2, log and exp.
Value one_like(Builder& b, const Value& x) { return splat(b, 1.0, x.type, x.shape); }

Value sqrt_one_minus_square(Builder& b, const Value& x) {
  return b.sqrt(b.subtract(one_like(b, x), b.multiply(x, x)));
}

// atan(x) = atan2(x / m, 1 / m), m = max(|x|, 1): the plugin's CPU compiler rewrites
// atan2(x, constant 1) into an expansion that is wrong for |x| > 1, so no constant is used.
// Both arguments stay finite for any finite x; x = +-inf goes in as atan2(+-1, 0) = +-pi/2.
TORCH_TPU_FLOAT_UNARY_FN(atan, {
  if (hlo::is_complex(x.type)) return complex_atan(b, x);
  Value magnitude = b.abs(x);
  Value inverse = b.divide(one_like(b, x), b.maximum(magnitude, one_like(b, x)));
  Value infinite = b.eq(magnitude, splat(b, INFINITY, x.type, x.shape));
  Value numerator = b.select(infinite, b.sign(x), b.multiply(x, inverse));
  return b.atan2(numerator, inverse);
});
TORCH_TPU_FLOAT_UNARY_FN(asin, {
  if (hlo::is_complex(x.type)) return complex_asin(b, x);
  return b.atan2(x, sqrt_one_minus_square(b, x));
});
TORCH_TPU_FLOAT_UNARY_FN(acos, {
  if (hlo::is_complex(x.type)) return complex_acos(b, x);
  return b.atan2(sqrt_one_minus_square(b, x), x);
});
// Past |x| = 20, e^-|x| is below the last bit of e^|x| in float64 and float32 alike, so
// sinh x = sign(x) e^|x| / 2 and cosh x = e^|x| / 2, computed times a factor f as
// h (h f / 2), h = e^(|x| / 2): finite wherever the result is (e^|x| itself overflows a little
// earlier: float32 sinh(89) is 2.2e38, e^89 is inf; cosh(89.5) cos(2) is 1.5e38).
Value beyond_exp_minus_abs(Builder& b, const Value& x) {
  return b.gt(b.abs(x), splat(b, 20, x.type, x.shape));
}
Value half_exp_of_abs_times(Builder& b, const Value& x, const Value& factor) {
  Value h = b.exponential(b.multiply(b.abs(x), splat(b, 0.5, x.type, x.shape)));
  return b.multiply(h, b.multiply(b.multiply(h, splat(b, 0.5, x.type, x.shape)), factor));
}
// sinh x (or cosh x) times factor.
Value hyperbolic_times(Builder& b, const Value& x, const Value& factor, bool sine) {
  Value half = splat(b, 0.5, x.type, x.shape);
  Value near = sine ? b.subtract(b.exponential_minus_one(x), b.exponential_minus_one(b.negate(x)))
                    : b.add(b.exponential(x), b.exponential(b.negate(x)));
  near = b.multiply(b.multiply(half, near), factor);
  Value far = half_exp_of_abs_times(b, x, sine ? b.multiply(b.sign(x), factor) : factor);
  return b.select(beyond_exp_minus_abs(b, x), far, near);
}
// sinh(a + ib) = sinh a cos b + i cosh a sin b, cosh(a + ib) = cosh a cos b + i sinh a sin b,
// from real functions (a complex e^z overflows where the result does not, and an infinite part
// times a zero one gives NaN); for b = 0 the imaginary part is a zero, as C99's.
Value complex_hyperbolic(Builder& b, const Value& z, bool sine) {
  Value re = b.real(z), im = b.imag(z);
  Value real_part = hyperbolic_times(b, re, b.cosine(im), sine);
  Value imag_part = hyperbolic_times(b, re, b.sine(im), !sine);
  // cosh(NaN +- 0i) = NaN +- 0i (C99): sign(NaN) would make the zero NaN.
  Value signed_zero = sine ? im : b.select(b.ne(re, re), im, b.multiply(im, b.sign(re)));
  Value zero = splat(b, 0, re.type, re.shape), inf = splat(b, INFINITY, re.type, re.shape);
  imag_part = b.select(b.eq(im, zero), signed_zero, imag_part);
  // On the imaginary axis sinh's real part and cosh's imaginary part are zeros, an infinite or
  // NaN b included (C99: sinh(0 + i inf) = 0 + i NaN).
  Value on_axis = b.and_(b.eq(re, zero), b.not_(b.lt(b.abs(im), inf)));
  // (cosh's zero is +0 for either sign of a: CPU's cosh(-0 + i inf) is NaN + 0i.)
  if (sine)
    real_part = b.select(on_axis, re, real_part);
  else
    imag_part = b.select(on_axis, b.abs(re), imag_part);
  // An infinite real part with an infinite or NaN imaginary one: inf + i NaN (C99).
  Value both = b.and_(b.eq(b.abs(re), inf), b.not_(b.lt(b.abs(im), inf)));
  return b.complex(b.select(both, inf, real_part),
                   b.select(both, splat(b, NAN, re.type, re.shape), imag_part));
}
TORCH_TPU_FLOAT_UNARY_OPMATH_FN(sinh, {
  if (hlo::is_complex(x.type)) return complex_hyperbolic(b, x, true);
  return hyperbolic_times(b, x, one_like(b, x), true);
});
TORCH_TPU_FLOAT_UNARY_OPMATH_FN(cosh, {
  if (hlo::is_complex(x.type)) return complex_hyperbolic(b, x, false);
  return hyperbolic_times(b, x, one_like(b, x), false);
});
// Past 2^28, sqrt(x^2 +- 1) is |x| to the last bit in float64 (and x^2 may overflow): there
// asinh |x| = acosh |x| = log |x| + log 2.
Value beyond_square_root(Builder& b, const Value& magnitude) {
  return b.gt(magnitude, splat(b, 268435456.0, magnitude.type, magnitude.shape));
}
Value log_of_twice(Builder& b, const Value& x) {
  return b.add(b.log(x), splat(b, 0.69314718055994531, x.type, x.shape));
}
// asinh x = sign(x) log1p(a + a^2 / (1 + sqrt(1 + a^2))), a = |x|: log1p keeps small x exact.
TORCH_TPU_FLOAT_UNARY_OPMATH_FN(asinh, {
  if (hlo::is_complex(x.type)) return complex_asinh(b, x);
  Value a = b.abs(x);
  Value one = one_like(b, x);
  Value square = b.multiply(a, a);
  Value near = b.log_plus_one(b.add(a, b.divide(square, b.add(one, b.sqrt(b.add(one, square))))));
  Value magnitude = b.select(beyond_square_root(b, a), log_of_twice(b, a), near);
  return b.multiply(b.sign(x), magnitude);
});
// acosh x = log1p(t + sqrt(2t + t^2)), t = x - 1 (exact near 1); NaN below 1, where the formula
// could round to log(0) in half precision. Complex ones: complex_inverse.h.
TORCH_TPU_FLOAT_UNARY_OPMATH_FN(acosh, {
  if (hlo::is_complex(x.type)) return complex_acosh(b, x);
  Value one = one_like(b, x);
  Value t = b.subtract(x, one);
  Value near = b.log_plus_one(
      b.add(t, b.sqrt(b.add(b.multiply(splat(b, 2, x.type, x.shape), t), b.multiply(t, t)))));
  Value value = b.select(beyond_square_root(b, x), log_of_twice(b, x), near);
  return b.select(b.lt(x, one), splat(b, NAN, x.type, x.shape), value);
});
// atanh x = sign(x) log1p(2a / (1 - a)) / 2, a = |x|: log1p keeps small x exact, and its
// argument stays positive (near -1 it would approach -1 and lose digits).
TORCH_TPU_FLOAT_UNARY_OPMATH_FN(atanh, {
  if (hlo::is_complex(x.type)) return complex_atanh(b, x);
  Value a = b.abs(x);
  Value ratio =
      b.divide(b.multiply(splat(b, 2, x.type, x.shape), a), b.subtract(one_like(b, x), a));
  return b.multiply(b.multiply(splat(b, 0.5, x.type, x.shape), b.sign(x)), b.log_plus_one(ratio));
});
// In float64 whatever the type: 1 - erf(x) of a float32 erf is 0 from 3.9 on (CPU's erfc(5) is
// 1.5e-12) and off by far more than its size before.
TORCH_TPU_FLOAT_UNARY_FN(erfc, {
  return b.convert(erfc_float64(b, b.convert(x, hlo::ElementType::F64)), x.type);
});

// Both operands of a binary op computed in floating point: broadcast, in the float type the
// inputs promote to (f16/bf16 computed in f32), and that result type.
struct FloatOperands {
  Value x, y;
  ElementType result;
};
FloatOperands float_operands(LoweringContext& ctx) {
  ElementType t = et(float_type(promoted_type(ctx, {0, 1})));
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType m = opmath(t);
  return {operand(ctx, 0, m, shape), operand(ctx, 1, m, shape), t};
}

// Complex log(exp(a) + exp(b)) as CPU computes it: high + log1p(exp(low - high)), `low` the
// operand of the smaller real part (b on a tie); a NaN in either operand makes both parts NaN,
// and equal infinite real parts give low for -inf and log(exp(a) + exp(b)) for +inf.
Value complex_log_add_exp(Builder& b, const Value& x, const Value& y) {
  Value x_lower = b.lt(b.real(x), b.real(y));
  Value low = b.select(x_lower, x, y), high = b.select(x_lower, y, x);
  Value low_real = b.real(low), high_real = b.real(high);
  const Shape& shape = low_real.shape;
  Value result = b.add(b.log_plus_one(b.exponential(b.subtract(low, high))), high);
  Value infinite = b.and_(b.eq(low_real, high_real),
                          b.eq(b.abs(low_real), splat(b, INFINITY, low_real.type, shape)));
  Value at_infinity = b.select(b.lt(low_real, splat(b, 0, low_real.type, shape)), low,
                               b.log(b.add(b.exponential(low), b.exponential(high))));
  result = b.select(infinite, at_infinity, result);
  auto has_nan = [&b](const Value& z) {
    return b.or_(b.ne(b.real(z), b.real(z)), b.ne(b.imag(z), b.imag(z)));
  };
  Value nan = splat(b, NAN, low_real.type, shape);
  return b.select(b.or_(has_nan(x), has_nan(y)), b.complex(nan, nan), result);
}

// log(exp(a) + exp(b)) without overflow: max + log1p(exp(-|a - b|)). Equal infinities give
// a NaN difference; they (and every equal pair) are a + log(2) exactly.
Values log_add_exp(LoweringContext& ctx, bool base2) {
  auto [x, y, t] = float_operands(ctx);
  if (hlo::is_complex(x.type)) {
    TORCH_CHECK(!base2, "\"logaddexp2\" not implemented for complex tensors");
    return {ctx.b.convert(complex_log_add_exp(ctx.b, x, y), t)};
  }
  ElementType m = x.type;
  const Shape& shape = x.shape;
  Builder& b = ctx.b;
  Value distance = b.negate(b.abs(b.subtract(x, y)));
  Value tail = base2 ? b.divide(b.log_plus_one(b.power(splat(b, 2.0, m, shape), distance)),
                                splat(b, 0.69314718055994531, m, shape))
                     : b.log_plus_one(b.exponential(distance));
  Value result = b.add(extremum(b, BinaryOp::Maximum, x, y), tail);
  Value equal = b.add(x, splat(b, base2 ? 1.0 : 0.69314718055994531, m, shape));
  return {b.convert(b.select(b.eq(x, y), equal, result), t)};
}
LOWER({"logaddexp", "logaddexp.out"}, [](LoweringContext& ctx) { return log_add_exp(ctx, false); });
LOWER({"logaddexp2", "logaddexp2.out"},
      [](LoweringContext& ctx) { return log_add_exp(ctx, true); });

// copysign(a, b): |a| with b's sign bit (so -0.0 and NaN signs count), in a float type.
LOWER({"copysign.Tensor", "copysign_.Tensor", "copysign.out", "copysign.Scalar", "copysign_.Scalar",
       "copysign.Scalar_out"},
      [](LoweringContext& ctx) {
        auto [x, y, t] = float_operands(ctx);
        Builder& b = ctx.b;
        Value magnitude = b.abs(x);
        return Values{b.convert(b.select(sign_bit(b, y), b.negate(magnitude), magnitude), t)};
      });

// fmax/fmin: like maximum/minimum, but a NaN loses to a number.
Values nan_ignoring_extremum(LoweringContext& ctx, bool is_max) {
  c10::ScalarType type = promoted_type(ctx, {0, 1});
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(type);
  Builder& b = ctx.b;
  Value x = operand(ctx, 0, t, shape), y = operand(ctx, 1, t, shape);
  Value r = b.binary(is_max ? BinaryOp::Maximum : BinaryOp::Minimum, x, y);
  if (!hlo::is_float(t)) return {r};
  r = b.select(b.ne(x, x), y, r);
  return {b.select(b.ne(y, y), x, r)};
}
LOWER({"fmax", "fmax.out"}, [](LoweringContext& ctx) { return nan_ignoring_extremum(ctx, true); });
LOWER({"fmin", "fmin.out"}, [](LoweringContext& ctx) { return nan_ignoring_extremum(ctx, false); });

// frac(x) = x - trunc(x).
TORCH_TPU_FLOAT_UNARY_FN(frac, {
  Value truncated = b.multiply(b.sign(x), b.floor(b.abs(x)));
  return b.subtract(x, truncated);
});

// log_sigmoid_forward(x) -> (output, buffer): min(x, 0) - log1p(exp(-|x|)); the buffer (which
// CPU fills for its backward) is zeros here: the backward recomputes from x.
LOWER({"log_sigmoid_forward", "log_sigmoid_forward.output"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value x = ctx.tensor(0);
  ElementType m = opmath(x.type);
  Value v = b.convert(x, m);
  Value zero = splat(b, 0, m, v.shape);
  Value tail = b.log_plus_one(b.exponential(b.negate(b.abs(v))));
  Value out = b.subtract(extremum(b, BinaryOp::Minimum, v, zero), tail);
  return Values{b.convert(out, x.type), splat(b, 0, x.type, x.shape)};
});
// log_sigmoid_backward(grad, x, buffer) = grad * sigmoid(-x).
LOWER({"log_sigmoid_backward", "log_sigmoid_backward.grad_input"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad = ctx.tensor(0), x = ctx.tensor(1);
  ElementType m = opmath(x.type);
  Value v = b.convert(x, m);
  Value one = splat(b, 1, m, v.shape);
  Value sigmoid_neg = b.divide(one, b.add(one, b.exponential(v)));
  return Values{b.convert(b.multiply(b.convert(grad, m), sigmoid_neg), x.type)};
});
// x * log(y), 0 where x is 0 unless y is NaN.
LOWER({"xlogy.Tensor", "xlogy_.Tensor", "xlogy.OutTensor", "xlogy.Scalar_Self",
       "xlogy.Scalar_Other", "xlogy_.Scalar_Other", "xlogy.OutScalar_Self",
       "xlogy.OutScalar_Other"},
      [](LoweringContext& ctx) {
        auto [x, y, t] = float_operands(ctx);
        ElementType m = x.type;
        const Shape& shape = x.shape;
        Builder& b = ctx.b;
        Value product = b.multiply(x, b.log(y));
        Value zero = splat(b, 0.0, m, shape);
        Value take_zero = b.and_(b.eq(x, zero), b.eq(y, y));
        // A NaN y is selected, not left to x * log(y): XLA rewrites a product with a converted
        // bool x into a select that drops the NaN.
        Value result = b.select(b.ne(y, y), y, b.select(take_zero, zero, product));
        return Values{b.convert(result, t)};
      });

}  // namespace
}  // namespace torch_tpu::aten
