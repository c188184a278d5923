// torch_tpu._C._GraphReplay: a compiled graph's calls replayed as one executable run.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_tpu {

void bind_graph_replay(pybind11::module& m);

}  // namespace torch_tpu
