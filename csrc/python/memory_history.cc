#include "csrc/device/memory_history.h"

#include <pybind11/pybind11.h>

#include <vector>

#include "csrc/python/memory_history.h"

namespace py = pybind11;

// From libtorch_python (torch/csrc/profiler/python/combined_traceback.h, whose header needs
// nlohmann/json, which torch does not ship): symbolizing tracebacks into the frame dicts the
// memory visualizer reads, and the hook that lets tracebacks hold Python frames.
namespace torch {
std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
void installCapturedTracebackPython();
}  // namespace torch

namespace torch_tpu {
namespace {

// A storage is one block in a segment of its own: the plugin, not a caching allocator, owns
// device memory, so there is no cache to show.
py::dict segment(const memory_history::Event& e, const py::object& frames) {
  py::dict block;
  block["address"] = e.address;
  block["size"] = e.size;
  block["requested_size"] = e.size;
  block["state"] = "active_allocated";
  block["frames"] = frames;
  py::dict seg;
  seg["device"] = e.device;
  seg["address"] = e.address;
  seg["total_size"] = e.size;
  seg["allocated_size"] = e.size;
  seg["active_size"] = e.size;
  seg["requested_size"] = e.size;
  seg["stream"] = 0;
  seg["segment_type"] = "large";
  seg["segment_pool_id"] = py::make_tuple(0, 0);
  seg["is_expandable"] = false;
  seg["frames"] = py::list();
  seg["blocks"] = py::make_tuple(block);
  return seg;
}

py::dict trace_entry(const char* action, const memory_history::Event& e, const py::object& frames) {
  py::dict entry;
  entry["action"] = action;
  entry["addr"] = e.address;
  entry["size"] = e.size;
  entry["stream"] = 0;
  entry["time_us"] = e.time_us;
  entry["frames"] = frames;
  return entry;
}

// The snapshot as torch.cuda.memory._snapshot() lays it out, which PyTorch's memory
// visualizer (and torch.cuda._memory_viz) read.
py::dict snapshot(int device_count) {
  auto [events, live] = memory_history::snapshot();
  std::vector<torch::CapturedTraceback*> stacks;
  for (const auto* list : {&events, &live}) {
    for (const auto& e : *list) {
      if (e.stack) stacks.push_back(e.stack.get());
    }
  }
  std::vector<py::object> symbolized = torch::py_symbolize(stacks);
  size_t next = 0;
  auto frames_of = [&](const memory_history::Event& e) -> py::object {
    return e.stack ? symbolized.at(next++) : py::list();
  };
  py::list traces;
  for (int d = 0; d < device_count; ++d) traces.append(py::list());
  for (const auto& e : events) {
    py::list trace = traces[e.device];
    py::object frames = frames_of(e);
    if (e.alloc) {
      trace.append(trace_entry("alloc", e, frames));
    } else {
      trace.append(trace_entry("free_requested", e, frames));
      trace.append(trace_entry("free_completed", e, frames));
    }
  }
  py::list segments;
  for (const auto& e : live) segments.append(segment(e, frames_of(e)));
  py::dict result;
  result["segments"] = segments;
  result["device_traces"] = traces;
  result["allocator_settings"] = py::dict();
  return result;
}

}  // namespace

void bind_memory_history(py::module_& m) {
  m.def("_record_memory_history",
        [](bool enabled, size_t max_entries, bool python_stacks, bool cpp_stacks) {
          if (enabled) torch::installCapturedTracebackPython();
          memory_history::record(enabled, max_entries, python_stacks, cpp_stacks);
        });
  m.def("_memory_snapshot", &snapshot);
}

}  // namespace torch_tpu
