// Short arithmetic on builder values, for kernels written as long formulas (series,
// recurrences, piecewise functions): c(b, 2.5, x) is a constant shaped and typed like x.
#pragma once

#include <functional>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {

inline Value c(Builder& b, double value, const Value& like) {
  return splat(b, value, like.type, like.shape);
}

// A unary special function of tensor argument 0, evaluated in float64 (for its series and
// asymptotic expansions) and rounded to the input's float type.
inline Values in_float64(LoweringContext& ctx,
                         const std::function<Value(Builder&, const Value&)>& f) {
  Value x = ctx.tensor(0);
  ElementType type = et(float_type(to_scalar_type(x.type)));
  return {ctx.b.convert(f(ctx.b, ctx.b.convert(x, ElementType::F64)), type)};
}

}  // namespace torch_tpu::aten
