#include "csrc/python/kernels.h"

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <string>
#include <utility>
#include <vector>

#include "csrc/device/runtime.h"
#include "csrc/kernels/jax_kernels.h"

namespace torch_tpu {
namespace {

using TypedShape = std::pair<std::vector<int64_t>, std::string>;  // ([2, 4], "f32")

hlo::ElementType element_type_named(const std::string& name) {
  for (int i = 0; i <= static_cast<int>(hlo::ElementType::F8E5M2FNUZ); ++i) {
    auto type = static_cast<hlo::ElementType>(i);
    if (hlo::mlir_name(type) == name) return type;
  }
  throw pybind11::type_error("torch_tpu: the tpu device has no element type " + name);
}

std::vector<std::pair<hlo::Shape, hlo::ElementType>> typed_shapes(
    const std::vector<TypedShape>& values) {
  std::vector<std::pair<hlo::Shape, hlo::ElementType>> typed;
  for (const auto& [shape, type] : values) typed.emplace_back(shape, element_type_named(type));
  return typed;
}

}  // namespace

void bind_kernels(pybind11::module_& m) {
  m.def(
      "_register_jax_kernel",
      [](const std::string& key, std::string functions, std::string entry,
         const std::vector<TypedShape>& params, const std::vector<TypedShape>& results) {
        kernels::register_jax_kernel(key, {std::move(functions), std::move(entry),
                                           typed_shapes(params), typed_shapes(results)});
      },
      pybind11::arg("key"), pybind11::arg("functions"), pybind11::arg("entry"),
      pybind11::arg("params"), pybind11::arg("results"));
  m.def("_has_jax_kernel", &kernels::has_jax_kernel);
  m.def("_run_jax_kernel_on_devices",
        [](const std::string& key, const std::vector<std::vector<at::Tensor>>& inputs) {
          pybind11::gil_scoped_release release;
          return kernels::run_jax_kernel_on_devices(key, inputs);
        });
  // PJRT_Plugin_Attributes as "name=value" lines (lists comma-separated).
  m.def("_plugin_attributes", [] { return Runtime::get().client().plugin().attributes(); });
}

}  // namespace torch_tpu
