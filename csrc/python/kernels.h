// torch_tpu._C's kernel part: registering jax kernels, and what the plugin says of itself
// (the StableHLO versions it reads), for torch_tpu.kernels.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_tpu {
void bind_kernels(pybind11::module_& m);
}
