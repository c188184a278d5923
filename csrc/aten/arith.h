// Short arithmetic on builder values, for kernels written as long formulas (series,
// recurrences, piecewise functions): c(b, 2.5, x) is a constant shaped and typed like x.
#pragma once

#include "csrc/aten/common.h"

namespace torch_tpu::aten {

inline Value c(Builder& b, double value, const Value& like) {
  return splat(b, value, like.type, like.shape);
}
inline Value add(Builder& b, const Value& x, const Value& y) { return b.binary("add", x, y); }
inline Value sub(Builder& b, const Value& x, const Value& y) { return b.binary("subtract", x, y); }
inline Value mul(Builder& b, const Value& x, const Value& y) { return b.binary("multiply", x, y); }
inline Value div(Builder& b, const Value& x, const Value& y) { return b.binary("divide", x, y); }

}  // namespace torch_tpu::aten
