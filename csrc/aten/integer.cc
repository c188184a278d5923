// Integer ops: bit shifts with CPU's out-of-range rules, gcd (Euclid's algorithm as a device
// loop that runs until every pair is done) and lcm.
#include <c10/util/Exception.h>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

int64_t bit_width(ElementType t) {
  switch (t) {
    case ElementType::S8:
    case ElementType::U8:
      return 8;
    case ElementType::S16:
      return 16;
    case ElementType::S32:
      return 32;
    default:
      return 64;
  }
}

struct IntOperands {
  Value x, y;
};
IntOperands int_operands(LoweringContext& ctx, const char* op) {
  c10::ScalarType type = promoted_type(ctx, {0, 1});
  TORCH_CHECK(c10::isIntegralType(type, /*includeBool=*/false), op,
              " is only implemented for integer dtypes, got ", type);
  Shape shape = operand_shape(ctx, {0, 1});
  ElementType t = et(type);
  return {operand(ctx, 0, t, shape), operand(ctx, 1, t, shape)};
}

// A shift by a negative amount or by the width or more: 0 to the left; to the right, the sign
// fills every bit.
Values shift(LoweringContext& ctx, bool left) {
  Builder& b = ctx.b;
  auto [x, y] = int_operands(ctx, left ? "bitwise_left_shift" : "bitwise_right_shift");
  int64_t width = bit_width(x.type);
  Value zero = splat(b, 0, x.type, x.shape);
  Value out_of_range =
      b.or_(b.lt(y, zero), b.ge(y, splat(b, static_cast<double>(width), x.type, x.shape)));
  const bool is_unsigned = x.type == ElementType::U8;
  if (left) return {b.select(out_of_range, zero, b.shift_left(x, y))};
  const BinaryOp op = is_unsigned ? BinaryOp::ShiftRightLogical : BinaryOp::ShiftRightArithmetic;
  Value saturated =
      is_unsigned ? zero
                  : b.binary(op, x, splat(b, static_cast<double>(width - 1), x.type, x.shape));
  return {b.select(out_of_range, saturated, b.binary(op, x, y))};
}
LOWER({"bitwise_left_shift.Tensor", "bitwise_left_shift_.Tensor", "bitwise_left_shift.Tensor_out",
       "bitwise_left_shift.Tensor_Scalar", "bitwise_left_shift_.Tensor_Scalar",
       "bitwise_left_shift.Tensor_Scalar_out", "bitwise_left_shift.Scalar_Tensor",
       "bitwise_left_shift.Scalar_Tensor_out", "__lshift__.Tensor", "__lshift__.Scalar",
       "__ilshift__.Tensor", "__ilshift__.Scalar"},
      [](LoweringContext& ctx) { return shift(ctx, true); });
LOWER({"bitwise_right_shift.Tensor", "bitwise_right_shift_.Tensor",
       "bitwise_right_shift.Tensor_out", "bitwise_right_shift.Tensor_Scalar",
       "bitwise_right_shift_.Tensor_Scalar", "bitwise_right_shift.Tensor_Scalar_out",
       "bitwise_right_shift.Scalar_Tensor", "bitwise_right_shift.Scalar_Tensor_out",
       "__rshift__.Tensor", "__rshift__.Scalar", "__irshift__.Tensor", "__irshift__.Scalar"},
      [](LoweringContext& ctx) { return shift(ctx, false); });

// gcd(|x|, |y|) by Euclid: (a, b) <- (b, a mod b) wherever b != 0, until b is 0 everywhere.
Value gcd(Builder& b, const Value& x, const Value& y) {
  std::vector<int64_t> all_dims;
  for (int64_t d = 0; d < x.rank(); ++d) all_dims.push_back(d);
  auto state = b.while_loop(
      {b.abs(x), b.abs(y)},
      [&](Builder& r, const std::vector<Value>& s) {
        Value busy = r.ne(s[1], splat(r, 0, s[1].type, s[1].shape));
        return std::vector<Value>{
            r.reduce(busy, r.constant(0, ElementType::Pred), all_dims, BinaryOp::Or)};
      },
      [](Builder& r, const std::vector<Value>& s) {
        Value zero = splat(r, 0, s[1].type, s[1].shape);
        Value busy = r.ne(s[1], zero);
        Value divisor = r.select(busy, s[1], splat(r, 1, s[1].type, s[1].shape));
        Value remainder = r.remainder(s[0], divisor);
        return std::vector<Value>{r.select(busy, s[1], s[0]), r.select(busy, remainder, zero)};
      });
  return state[0];
}
LOWER({"gcd", "gcd_", "gcd.out"}, [](LoweringContext& ctx) {
  auto [x, y] = int_operands(ctx, "gcd");
  return Values{gcd(ctx.b, x, y)};
});
// lcm = |x / gcd * y|, 0 when both are 0. As C++ computes it for CPU, types narrower than int
// are promoted to int first, so an overflowing product's absolute value is taken before it is
// wrapped to the type (int16 lcm(20000, 3) is -5536, not 5536).
LOWER({"lcm", "lcm_", "lcm.out"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  auto [x, y] = int_operands(ctx, "lcm");
  const ElementType t = x.type;
  const ElementType work = hlo::byte_size(t) < 4 ? ElementType::S32 : t;
  Value g = b.convert(gcd(b, x, y), work);
  Value zero = splat(b, 0, work, x.shape);
  Value is_zero = b.eq(g, zero);
  Value safe = b.select(is_zero, splat(b, 1, work, x.shape), g);
  Value l = b.abs(b.multiply(b.divide(b.convert(x, work), safe), b.convert(y, work)));
  return Values{b.convert(b.select(is_zero, zero, l), t)};
});

}  // namespace
}  // namespace torch_tpu::aten
