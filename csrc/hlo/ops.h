// The StableHLO elementwise ops the builder emits, each listed once: its enum value, the
// Builder method that emits it (b.add(x, y), b.negate(x), b.ge(x, y)) and its StableHLO name.
// Kernels name ops through these, so a misspelt op is a compile error rather than a module that
// fails to parse at run time. An op StableHLO has and no kernel uses yet is one line to add.
#pragma once

#include <optional>
#include <string_view>

namespace torch_tpu::hlo {

// X(enum value, Builder method, StableHLO name). A method is named as its op, with a trailing
// '_' where the name is a C++ keyword (not, and, or, xor), as Python's operator module does.
#define TORCH_TPU_HLO_UNARY_OPS(X)                                       \
  X(Abs, abs, "abs")                                                     \
  X(Ceil, ceil, "ceil")                                                  \
  X(Cosine, cosine, "cosine")                                            \
  X(CountLeadingZeros, count_leading_zeros, "count_leading_zeros")       \
  X(Exponential, exponential, "exponential")                             \
  X(ExponentialMinusOne, exponential_minus_one, "exponential_minus_one") \
  X(Floor, floor, "floor")                                               \
  X(Log, log, "log")                                                     \
  X(LogPlusOne, log_plus_one, "log_plus_one")                            \
  X(Logistic, logistic, "logistic")                                      \
  X(Negate, negate, "negate")                                            \
  X(Not, not_, "not")                                                    \
  X(RoundNearestEven, round_nearest_even, "round_nearest_even")          \
  X(Rsqrt, rsqrt, "rsqrt")                                               \
  X(Sign, sign, "sign")                                                  \
  X(Sine, sine, "sine")                                                  \
  X(Sqrt, sqrt, "sqrt")                                                  \
  X(Tan, tan, "tan")                                                     \
  X(Tanh, tanh, "tanh")

#define TORCH_TPU_HLO_BINARY_OPS(X)                                         \
  X(Add, add, "add")                                                        \
  X(And, and_, "and")                                                       \
  X(Atan2, atan2, "atan2")                                                  \
  X(Divide, divide, "divide")                                               \
  X(Maximum, maximum, "maximum")                                            \
  X(Minimum, minimum, "minimum")                                            \
  X(Multiply, multiply, "multiply")                                         \
  X(Or, or_, "or")                                                          \
  X(Power, power, "power")                                                  \
  X(Remainder, remainder, "remainder")                                      \
  X(ShiftLeft, shift_left, "shift_left")                                    \
  X(ShiftRightArithmetic, shift_right_arithmetic, "shift_right_arithmetic") \
  X(ShiftRightLogical, shift_right_logical, "shift_right_logical")          \
  X(Subtract, subtract, "subtract")                                         \
  X(Xor, xor_, "xor")

// stablehlo.compare's comparison_direction.
#define TORCH_TPU_HLO_COMPARISONS(X) \
  X(EQ, eq, "EQ")                    \
  X(NE, ne, "NE")                    \
  X(LT, lt, "LT")                    \
  X(LE, le, "LE")                    \
  X(GT, gt, "GT")                    \
  X(GE, ge, "GE")

#define TORCH_TPU_HLO_ENUM_VALUE(value, method, name) value,
enum class UnaryOp { TORCH_TPU_HLO_UNARY_OPS(TORCH_TPU_HLO_ENUM_VALUE) };
enum class BinaryOp { TORCH_TPU_HLO_BINARY_OPS(TORCH_TPU_HLO_ENUM_VALUE) };
enum class Comparison { TORCH_TPU_HLO_COMPARISONS(TORCH_TPU_HLO_ENUM_VALUE) };
#undef TORCH_TPU_HLO_ENUM_VALUE

// stablehlo.fft's fft_type: FFT, IFFT (scaled by 1/n), RFFT (real in), IRFFT (real out).
enum class FftType { FFT, IFFT, RFFT, IRFFT };

#define TORCH_TPU_HLO_NAME_CASE(Enum, value, method, name) \
  case Enum::value:                                        \
    return name;
#define TORCH_TPU_HLO_UNARY_CASE(value, method, name) \
  TORCH_TPU_HLO_NAME_CASE(UnaryOp, value, method, name)
#define TORCH_TPU_HLO_BINARY_CASE(value, method, name) \
  TORCH_TPU_HLO_NAME_CASE(BinaryOp, value, method, name)
#define TORCH_TPU_HLO_COMPARISON_CASE(value, method, name) \
  TORCH_TPU_HLO_NAME_CASE(Comparison, value, method, name)

// The StableHLO spelling of each (what the module text says).
constexpr std::string_view stablehlo_name(UnaryOp op) {
  switch (op) { TORCH_TPU_HLO_UNARY_OPS(TORCH_TPU_HLO_UNARY_CASE) }
  return "";
}
constexpr std::string_view stablehlo_name(BinaryOp op) {
  switch (op) { TORCH_TPU_HLO_BINARY_OPS(TORCH_TPU_HLO_BINARY_CASE) }
  return "";
}
constexpr std::string_view stablehlo_name(Comparison direction) {
  switch (direction) { TORCH_TPU_HLO_COMPARISONS(TORCH_TPU_HLO_COMPARISON_CASE) }
  return "";
}
constexpr std::string_view stablehlo_name(FftType type) {
  switch (type) {
    case FftType::FFT:
      return "FFT";
    case FftType::IFFT:
      return "IFFT";
    case FftType::RFFT:
      return "RFFT";
    case FftType::IRFFT:
      return "IRFFT";
  }
  return "";
}

// The binary op spelt `name` in StableHLO, for names that arrive as data (a collective's
// reducer, chosen in Python); nullopt when none is.
constexpr std::optional<BinaryOp> binary_op_named(std::string_view name) {
#define TORCH_TPU_HLO_BINARY_MATCH(value, method, spelling) \
  if (name == spelling) return BinaryOp::value;
  TORCH_TPU_HLO_BINARY_OPS(TORCH_TPU_HLO_BINARY_MATCH)
#undef TORCH_TPU_HLO_BINARY_MATCH
  return std::nullopt;
}

#undef TORCH_TPU_HLO_NAME_CASE
#undef TORCH_TPU_HLO_UNARY_CASE
#undef TORCH_TPU_HLO_BINARY_CASE
#undef TORCH_TPU_HLO_COMPARISON_CASE

}  // namespace torch_tpu::hlo
