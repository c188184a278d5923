// erf and erfc to float64's precision (error_function.cc): CPU's libm values, tails included.
#pragma once

#include "csrc/hlo/builder.h"

namespace torch_tpu::aten {

hlo::Value erf_float64(hlo::Builder& b, const hlo::Value& x);
hlo::Value erfc_float64(hlo::Builder& b, const hlo::Value& x);

}  // namespace torch_tpu::aten
