#include "csrc/python/flight_recorder.h"

#include <ATen/ops/ones.h>
#include <Python.h>
#include <frameobject.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <charconv>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "csrc/dispatch/disk_cache.h"
#include "csrc/dispatch/fatal_signals.h"
#include "csrc/dispatch/flight_recorder.h"

namespace py = pybind11;

namespace torch_tpu {
namespace {

// The folders of torch's and torch_tpu's own Python code: the line recorded is the innermost
// one outside them (the user's `x @ w`, not torch/_tensor.py's).
std::vector<std::string>& library_folders() {
  static std::vector<std::string> folders;
  return folders;
}

bool in_library(const char* file) {
  for (const std::string& folder : library_folders())
    if (std::strncmp(file, folder.c_str(), folder.size()) == 0) return true;
  return false;
}

// Writes "file:line" of the innermost frame outside the library into `out`; under the GIL.
void find_caller(char* out, size_t size) {
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  for (int depth = 0; frame != nullptr && depth < 32; ++depth) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    const bool found = file != nullptr && !in_library(file);
    if (found) {
      char line[16];
      const auto end = std::to_chars(line, line + sizeof(line), PyFrame_GetLineNumber(frame)).ptr;
      const size_t file_chars = std::strlen(file);
      const size_t line_chars = static_cast<size_t>(end - line);
      // The end of a long path is the part that says most.
      const size_t room = size - 2 - line_chars;
      const size_t skip = file_chars > room ? file_chars - room : 0;
      std::memcpy(out, file + skip, file_chars - skip);
      out[file_chars - skip] = ':';
      std::memcpy(out + file_chars - skip + 1, line, line_chars);
      out[file_chars - skip + 1 + line_chars] = '\0';
    }
    Py_DECREF(code);
    PyFrameObject* back = found ? nullptr : PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  PyErr_Clear();  // PyUnicode_AsUTF8 of an odd file name
}

// The flight recorder's Locator. torch lets go of the GIL while an op runs: it is taken back
// here, which is why lines are recorded only when asked for. A thread running no Python
// (autograd's backward) has no frame and records no line.
void python_caller(char* out, size_t size) {
  if (!Py_IsInitialized()) return;
  const PyGILState_STATE gil = PyGILState_Ensure();
  find_caller(out, size);
  PyGILState_Release(gil);
}

std::string folder_of(const py::handle& module) {
  std::string file = module.attr("__file__").cast<std::string>();
  return file.substr(0, file.rfind('/') + 1);
}

py::dict as_dict(const flight::Entry& entry) {
  py::dict out;
  out["sequence"] = entry.sequence;
  out["time_ns"] = entry.time_ns;
  out["kind"] = std::string(flight::kind_name(entry.kind));
  out["name"] = std::string(entry.name);
  out["mode"] = std::string(eager_mode_name(entry.mode));
  out["device"] = static_cast<int>(entry.device);
  if (entry.key_hash != 0) {
    char hex[17];
    const auto end = std::to_chars(hex, hex + 16, entry.key_hash, 16).ptr;
    out["key"] = std::string(hex, end);
  } else {
    out["key"] = py::none();
  }
  py::list shapes, dtypes;
  size_t used = 0;
  for (uint8_t t = 0; t < entry.tensor_count; ++t) {
    dtypes.append(py::cast(static_cast<c10::ScalarType>(entry.dtypes[t])));
    if (entry.ranks[t] == flight::kRankUnknown) {
      shapes.append(py::none());
      continue;
    }
    shapes.append(std::vector<int64_t>(entry.dims + used, entry.dims + used + entry.ranks[t]));
    used += entry.ranks[t];
  }
  out["shapes"] = shapes;
  out["dtypes"] = dtypes;
  out["more_tensors"] = entry.more_tensors;
  out["location"] = entry.location[0] != '\0' ? py::cast(std::string(entry.location)) : py::none();
  return out;
}

// For bench/: ns per record_op of an op with two 4x4 tensors (what the recorder adds to an op).
double bench_record_ns(int iterations) {
  if (flight::capacity() == 0) return 0.0;
  const std::vector<c10::IValue> args{at::ones({4, 4}), at::ones({4, 4}), c10::Scalar(1)};
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i)
    flight::record_op("aten::add.Tensor", args, EagerMode::Strict, 0, 0x1234);
  const auto took = std::chrono::steady_clock::now() - start;
  flight::clear();
  return std::chrono::duration<double, std::nano>(took).count() / iterations;
}

}  // namespace

void bind_flight_recorder(py::module_& m) {
  flight::start();
  try {
    library_folders().push_back(folder_of(py::module_::import("torch")));
    // torch_tpu is being imported (this is its _C): its module exists, with its __file__.
    library_folders().push_back(folder_of(py::module_::import("sys").attr("modules")["torch_tpu"]));
  } catch (const py::error_already_set&) {
    // _C imported on its own: every frame counts as the caller's.
  }
  flight::set_locator(python_caller);
  flight::install_fatal_signal_dump();

  m.def("_flight_record", [] {
    py::list out;
    for (const flight::Entry& entry : flight::snapshot()) out.append(as_dict(entry));
    return out;
  });
  m.def("_flight_recorder_capacity", &flight::capacity);
  m.def("_set_flight_recorder_enabled", &flight::set_enabled);
  m.def("_clear_flight_record", &flight::clear);
  m.def("_dump_flight_record", [](const std::string& reason) { return flight::dump(reason); });
  m.def("_flight_record_directory", &flight::dump_directory);
  m.def("_bench_flight_record_ns", &bench_record_ns);
  m.def("_inject_compile_failure", &inject_compile_failure,
        "Test hook: the next compile fails as a refused module would.");
}

}  // namespace torch_tpu
