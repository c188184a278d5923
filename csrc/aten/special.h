// Special functions other kernels build on, computed in the input's float type (use float64
// for accuracy).
#pragma once

#include "csrc/aten/common.h"

namespace torch_tpu::aten {

// log|Gamma(x)| (Lanczos, with reflection below 1/2; +inf at the poles).
Value log_gamma(Builder& b, const Value& x);

}  // namespace torch_tpu::aten
