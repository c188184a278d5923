// Device times from a plugin's own trace. A plugin profiler's XSpace holds, on each device's
// plane ("/device:TPU:0"), an "XLA Modules" line with one event per program run, named after the
// program's module ("aten_mm.default(12)"). Where those runs line up with the runs torch_tpu
// launched, the device's timestamps replace the host-side estimate.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "csrc/profiler/device_trace.h"

namespace torch_tpu::profiler {

struct ProgramRun {
  std::string program;  // the module's name, without XLA's "(id)" suffix
  int device = 0;       // the plane's device ordinal
  int64_t start_ns = 0, end_ns = 0;
};

// A plugin's serialized XSpace up to its last whole field: libtpu's buffer holds one byte more
// than the message (a zero, which no field tag can be).
std::string without_padding(std::string_view trace);

// The program runs in a serialized XSpace, in time order per device; empty if it has none (or
// is not an XSpace).
std::vector<ProgramRun> program_runs(std::string_view xspace);

// Gives `spans` the device times of `runs` on every device where the two agree run for run (the
// same count, each program the module of the span's executable); leaves other devices' spans
// as measured. Returns how many spans took device times.
size_t use_device_times(std::vector<Span>& spans, const std::vector<ProgramRun>& runs);

}  // namespace torch_tpu::profiler
