// torch_tpu._C's memory-history part: recording allocations and the snapshot dict.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_tpu {
void bind_memory_history(pybind11::module_& m);
}
