// torch_tpu._C's distributed part: the tpu_dist backend class.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_tpu {
void bind_distributed(pybind11::module_& m);
}
