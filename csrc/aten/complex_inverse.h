// Complex inverse trigonometric and hyperbolic functions, exact near their branch points and
// with C99's values at infinities (CPU and NumPy give them; XLA's expansions overflow or give NaN).
#pragma once

#include "csrc/hlo/builder.h"

namespace torch_tpu::aten {

hlo::Value complex_asinh(hlo::Builder& b, const hlo::Value& z);
hlo::Value complex_acosh(hlo::Builder& b, const hlo::Value& z);
hlo::Value complex_atanh(hlo::Builder& b, const hlo::Value& z);
hlo::Value complex_asin(hlo::Builder& b, const hlo::Value& z);
hlo::Value complex_acos(hlo::Builder& b, const hlo::Value& z);
hlo::Value complex_atan(hlo::Builder& b, const hlo::Value& z);

}  // namespace torch_tpu::aten
