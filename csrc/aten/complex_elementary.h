// Complex exp, log, sqrt, tanh, multiplication and pow with C99's (Annex G) values at signed
// zeros, infinities and NaN parts, as CPU (glibc) gives them: XLA's expansions drop zeros' signs
// and give NaN + i NaN where C99 keeps a part (exp(x - 0i) = e^x - 0i, sqrt(NaN + i inf) =
// inf + i inf, log(NaN + i inf) = inf + i NaN).
#pragma once

#include "csrc/hlo/builder.h"

namespace torch_tpu::aten {

hlo::Value complex_exp(hlo::Builder& b, const hlo::Value& z);
hlo::Value complex_log(hlo::Builder& b, const hlo::Value& z);
hlo::Value complex_sqrt(hlo::Builder& b, const hlo::Value& z);
hlo::Value complex_tanh(hlo::Builder& b, const hlo::Value& z);
// z w as C99's multiplication (GCC's __mulsc3): (ac - bd) + i(ad + bc), and where both parts are
// NaN but a factor is infinite (or a product overflowed), the infinity recovered.
hlo::Value complex_multiply(hlo::Builder& b, const hlo::Value& z, const hlo::Value& w);
// z^w = exp(w log z), each step as above (glibc's cpow, which CPU's pow calls); complex64 with
// glibc's float roundings.
hlo::Value complex_pow(hlo::Builder& b, const hlo::Value& z, const hlo::Value& w);

}  // namespace torch_tpu::aten
