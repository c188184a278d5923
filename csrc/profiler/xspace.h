// Device times from a plugin's own trace (its XSpace), in the shapes the plugins write:
// - libtpu: each device's plane ("/device:TPU:0") has an "XLA Modules" line with one event per
//   program run, named after the program's module ("aten_mm.default(12)"), and an "XLA Ops" line
//   with the ops inside it (not needed here).
// - the XLA CUDA plugin: "/device:GPU:0" has a line per stream ("Stream #14(Compute)",
//   "Stream #16(MemcpyD2H)") holding kernels and copies, no module events; XLA annotates each
//   kernel it launches with its module, so the events carry the stats hlo_module and program_id.
// A run's device span is the union of its events. Where no event names its module, the events
// that fall between a run's launch and its completion on the host are taken instead.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "csrc/profiler/device_trace.h"

namespace torch_tpu::profiler {

// One stretch of a device's work for one program: a module event (libtpu), or consecutive
// kernels and copies annotated with the same module (GPU), which may hold several runs of it.
struct ProgramRun {
  std::string program;  // the module's name, without XLA's "(id)" suffix; empty if unknown
  int device = 0;       // the plane's device ordinal
  int64_t start_ns = 0, end_ns = 0;
  int events = 1;             // the device events it unites
  bool module_event = false;  // one event per run ("XLA Modules")
};

// A plugin's serialized XSpace up to its last whole field: libtpu's buffer holds one byte more
// than the message (a zero, which no field tag can be).
std::string without_padding(std::string_view trace);

// The device events of a serialized XSpace, in time order per device: a libtpu device's module
// events, else every event of a device plane's lines, each with the module its stats name.
std::vector<ProgramRun> device_events(std::string_view xspace);

// device_events grouped: consecutive events of one device and one known module become one
// stretch (libtpu's module events stay one per run); events of no known module are left out.
std::vector<ProgramRun> program_runs(std::string_view xspace);

// Gives `spans` the device times the XSpace holds for them, and each device run its Timing.
// Per device, runs of consecutive spans of one program take the next stretch of that program,
// split evenly among them; where no event names a module, a span takes the events between its
// launch and its completion. Returns how many spans took device times.
size_t use_device_times(std::vector<Span>& spans, std::string_view xspace);

}  // namespace torch_tpu::profiler
