#include "csrc/python/distributed.h"

#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "csrc/distributed/agreement.h"
#include "csrc/distributed/backend.h"
#include "csrc/distributed/xla_engine.h"

namespace py = pybind11;

namespace torch_tpu {

void bind_distributed(py::module_& m) {
  // The base class is torch's own binding of c10d::Backend, so torch.distributed takes the
  // object as a backend and its C++ callers reach these methods directly.
  py::module_::import("torch._C._distributed_c10d");
  py::class_<distributed::TpuBackend, c10d::Backend, c10::intrusive_ptr<distributed::TpuBackend>>(
      m, "_TpuBackend")
      .def(py::init([](int rank, int size, const c10::intrusive_ptr<c10d::Backend>& host,
                       std::chrono::milliseconds timeout) {
             return c10::make_intrusive<distributed::TpuBackend>(rank, size, host, timeout);
           }),
           py::arg("rank"), py::arg("size"), py::arg("host"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
  m.def("_set_collective_checks", &distributed::set_agreement_check, py::arg("enabled"));
  m.def("_collective_checks_enabled", &distributed::agreement_check_enabled);
  m.def(
      "_xla_collective",
      [](const std::string& kind, const std::vector<at::Tensor>& inputs, const std::string& reducer,
         int64_t dim) { return distributed::run_xla_collective({kind, reducer, dim}, inputs); },
      py::arg("kind"), py::arg("inputs"), py::arg("reducer") = "add", py::arg("dim") = 0,
      py::call_guard<py::gil_scoped_release>());
}

}  // namespace torch_tpu
