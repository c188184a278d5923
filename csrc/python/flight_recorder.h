// torch_tpu._C's flight-recorder part: the record as Python values, dumps on demand, and the
// locator that finds the Python line calling an op (TORCH_TPU_FLIGHT_RECORDER_LINES=1).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_tpu {
// Starts the recorder (raising for a malformed setting) and installs the fatal-signal dump.
void bind_flight_recorder(pybind11::module_& m);
}  // namespace torch_tpu
