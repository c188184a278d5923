// Helpers shared by the lowerings: numpy-style broadcasting, type promotion, dims.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <vector>

#include "csrc/device/types.h"
#include "csrc/dispatch/lowering.h"

namespace torch_tpu::aten {

using hlo::BinaryOp;
using hlo::Builder;
using hlo::Comparison;
using hlo::ElementType;
using hlo::FftType;
using hlo::Shape;
using hlo::UnaryOp;
using hlo::Value;
using Values = std::vector<Value>;

inline ElementType et(c10::ScalarType type) { return to_element_type(type); }

Shape broadcast_shapes(const Shape& a, const Shape& b);
// Right-aligned numpy broadcast of `x` to `shape`.
Value broadcast_to(Builder& b, const Value& x, const Shape& shape);
Value splat(Builder& b, double value, ElementType type, const Shape& shape);
// `x` converted to `type` and broadcast to `shape`.
Value as(Builder& b, const Value& x, ElementType type, const Shape& shape);

// torch's result_type over the given arguments (tensors and scalars), as at::result_type.
c10::ScalarType promoted_type(const LoweringContext& ctx, std::initializer_list<int> indices);
// The computation type for float ops: integers and bools promote to the default float dtype.
c10::ScalarType float_type(c10::ScalarType type);
// An argument that is a Tensor or a Scalar, converted to `type` and broadcast to `shape`.
Value operand(LoweringContext& ctx, int index, ElementType type, const Shape& shape);
// The broadcast shape of several tensor-or-scalar arguments.
Shape operand_shape(const LoweringContext& ctx, std::initializer_list<int> indices);

// The type arithmetic happens in, as in ATen's CPU kernels: f16/bf16 compute in f32 and round
// once at the end.
ElementType opmath(ElementType type);

int64_t wrap_dim(int64_t dim, int64_t rank);
// The int[] argument at `index`, one value repeated to `n` (kernel_size=3 means 3 per dim).
std::vector<int64_t> int_list(const LoweringContext& ctx, int index, size_t n);
// A reduction's dims: the int[]? argument at `index`, wrapped; all dims when empty or None.
std::vector<int64_t> reduce_dims(const LoweringContext& ctx, int index, int64_t rank);
// Shape with `dims` kept as size 1 (keepdim=True).
Shape keepdim_shape(const Shape& shape, const std::vector<int64_t>& dims);
Value sum(Builder& b, const Value& x, const std::vector<int64_t>& dims);
// The slices of `x` at positions `index` (a vector of valid positions) along `dim`.
// True (a scalar i1) when every element of the i1 tensor `pred` is.
Value all_of(Builder& b, const Value& pred);

// Asserts at run time that every element of the integer tensor `index` lies in [low, high),
// except those equal to `exempt` (an ignore_index): out of range, the op's result is undefined
// and the dispatcher raises IndexError at the next sync point.
// A normalization's parameters (weight, bias, running statistics; undefined ones skipped) in
// the input's dtype, or all float32 for a half or bfloat16 input: CPU's mixed-dtype rule.
void check_parameter_dtypes(const at::Tensor& input,
                            std::initializer_list<std::optional<at::Tensor>> parameters);
void check_index_range(Builder& b, const Value& index, int64_t low, int64_t high,
                       std::optional<int64_t> exempt = std::nullopt,
                       Builder::CheckKind kind = Builder::CheckKind::RaisesIndexError);

Value take_slices(Builder& b, const Value& x, int64_t dim, const Value& index);
// `x` with `updates` (shaped like x but index.numel() long along dim) combined by `op` into
// the slices at `index` (valid positions); no op replaces.
Value combine_slices(Builder& b, const Value& x, int64_t dim, const Value& index,
                     const Value& updates, std::optional<BinaryOp> op);
// Solves T X = B by substitution for triangular T [..., n, n] (only the triangle `upper` names
// is read; `unit` takes its diagonal as ones) and B [..., n, m] with T's batch shape.
Value triangular_substitute(Builder& b, const Value& t, const Value& rhs, bool upper, bool unit);
// stablehlo maximum/minimum (BinaryOp::Maximum or Minimum) that propagate NaN from either
// operand, as torch does (XLA's CPU lowering keeps the second operand's number).
Value extremum(Builder& b, BinaryOp op, const Value& x, const Value& y);
// |(x, y)| of two real floats as m sqrt(1 + (n / m)^2), m = max(|x|, |y|), n = min: no square
// overflows or underflows on the way; infinite where either is, NaN or not (C99's hypot).
Value hypot(Builder& b, const Value& x, const Value& y);
// The signed integer type as wide as a float type (its bit pattern's).
ElementType bits_of(ElementType t);
// Whether a float's sign bit is set: -0.0 and NaNs' signs count.
Value sign_bit(Builder& b, const Value& x);
// max (is_max) or min over `dims`, NaN-propagating for floats.
Value reduce_extremum(Builder& b, const Value& x, const std::vector<int64_t>& dims, bool is_max);
Value max_value(Builder& b, const Value& x, const std::vector<int64_t>& dims);
double lowest(ElementType type);
double highest(ElementType type);

// Float compare-based helpers.
Value is_nan(Builder& b, const Value& x);
// erf by the rational approximation XLA uses for f32 (computed in f32).
Value erf(Builder& b, const Value& x);

}  // namespace torch_tpu::aten
