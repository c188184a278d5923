#include "csrc/python/distributed.h"

#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <memory>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "csrc/distributed/agreement.h"
#include "csrc/distributed/backend.h"
#include "csrc/distributed/pjrt_key_value.h"
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
                       std::chrono::milliseconds timeout, std::vector<int> xla_assignment) {
             return c10::make_intrusive<distributed::TpuBackend>(rank, size, host, timeout,
                                                                 std::move(xla_assignment));
           }),
           py::arg("rank"), py::arg("size"), py::arg("host"), py::arg("timeout"),
           py::arg("xla_assignment") = std::vector<int>{},
           py::call_guard<py::gil_scoped_release>());
  // Built from a c10d store before the runtime starts, and handed to _initialize.
  py::class_<distributed::PjrtKeyValueStore, std::shared_ptr<distributed::PjrtKeyValueStore>>(
      m, "_PjrtKeyValueStore")
      .def(py::init<c10::intrusive_ptr<c10d::Store>>(), py::arg("store"))
      .def(
          "get",
          [](distributed::PjrtKeyValueStore& self, const std::string& key, int timeout_ms) {
            std::string value;
            {
              py::gil_scoped_release release;
              value = self.get(key, timeout_ms);
            }
            return py::bytes(value);
          },
          py::arg("key"), py::arg("timeout_ms"))
      .def(
          "try_get",
          [](distributed::PjrtKeyValueStore& self, const std::string& key) -> py::object {
            std::optional<std::string> value;
            {
              py::gil_scoped_release release;
              value = self.try_get(key);
            }
            if (!value) return py::none();
            return py::bytes(*value);
          },
          py::arg("key"))
      .def("put", &distributed::PjrtKeyValueStore::put, py::arg("key"), py::arg("value"),
           py::call_guard<py::gil_scoped_release>());
  m.def("_set_collective_checks", &distributed::set_agreement_check, py::arg("enabled"));
  m.def("_collective_checks_enabled", &distributed::agreement_check_enabled);
  m.def(
      "_xla_reducer",
      [](const c10d::ReduceOp& op, c10::ScalarType dtype) {
        return distributed::xla_reducer(op.op_, dtype);
      },
      py::arg("op"), py::arg("dtype"));
  m.def(
      "_xla_collective",
      [](const std::string& kind, const std::vector<at::Tensor>& inputs, const std::string& reducer,
         int64_t dim) { return distributed::run_xla_collective({kind, reducer, dim}, inputs); },
      py::arg("kind"), py::arg("inputs"), py::arg("reducer") = "add", py::arg("dim") = 0,
      py::call_guard<py::gil_scoped_release>());
}

}  // namespace torch_tpu
