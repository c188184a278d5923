// torch_tpu::jax_call(Tensor[] inputs, str kernel) -> Tensor[]: runs a jax function, lowered
// to StableHLO by torch_tpu.kernels, as one op. Python registers each lowering (its function
// texts, the entry to call, parameter and result types) under a key; the op's lowering calls
// that entry, so the kernel is cached, run, fused and recorded into compiled graphs like any
// built-in op.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>
#include <torch/library.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "csrc/device/types.h"
#include "csrc/dispatch/dispatcher.h"
#include "csrc/distributed/xla_engine.h"
#include "csrc/hlo/builder.h"
#include "csrc/kernels/jax_kernels.h"

namespace torch_tpu::kernels {
namespace {

std::mutex registry_mutex;
std::unordered_map<std::string, std::shared_ptr<const JaxKernel>>& registry() {
  static auto& table = *new std::unordered_map<std::string, std::shared_ptr<const JaxKernel>>();
  return table;
}

std::shared_ptr<const JaxKernel> find_kernel(const std::string& key) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto found = registry().find(key);
  TORCH_CHECK(found != registry().end(), "torch_tpu::jax_call: no jax kernel is registered as '",
              key, "' (kernels are registered by torch_tpu.kernels.jax_op)");
  return found->second;
}

// The schema the dispatcher runs a kernel under: its inputs, and one Tensor per result (the
// op's own schema returns them as one Tensor[]). Named apart from jax_call so that no Meta
// kernel or CPU kernel is looked up for it.
const c10::FunctionSchema& schema_with_results(size_t count) {
  static std::mutex mutex;
  static auto& schemas = *new std::map<size_t, c10::FunctionSchema>();
  std::lock_guard<std::mutex> lock(mutex);
  auto found = schemas.find(count);
  if (found == schemas.end()) {
    std::string returns;
    for (size_t i = 0; i < count; ++i) returns += i ? ", Tensor" : "Tensor";
    found = schemas
                .emplace(count, torch::jit::parseSchema(
                                    "torch_tpu::jax_kernel(Tensor[] inputs, str kernel) -> (" +
                                    returns + ")"))
                .first;
  }
  return found->second;
}

std::vector<hlo::Value> lower_kernel(const JaxKernel& kernel, LoweringContext& ctx) {
  std::vector<hlo::Value> operands = ctx.tensors(0);
  hlo::require(operands.size() == kernel.params.size(),
               "jax kernel takes " + std::to_string(kernel.params.size()) + " tensors, got " +
                   std::to_string(operands.size()));
  for (size_t i = 0; i < operands.size(); ++i) {
    const auto& [shape, type] = kernel.params[i];
    hlo::require(operands[i].shape == shape && operands[i].type == type,
                 "jax kernel input " + std::to_string(i) + " must be " +
                     hlo::tensor_type(shape, type) + ", got " + operands[i].tensor_type());
  }
  std::vector<hlo::Shape> shapes;
  std::vector<hlo::ElementType> types;
  for (const auto& [shape, type] : kernel.results) {
    shapes.push_back(shape);
    types.push_back(type);
  }
  return ctx.b.call(kernel.entry, kernel.functions, operands, shapes, types);
}

std::vector<at::Tensor> jax_call(at::TensorList inputs, c10::string_view key) {
  std::shared_ptr<const JaxKernel> kernel = find_kernel(std::string(key));
  Lowering lowering = [kernel](LoweringContext& ctx) { return lower_kernel(*kernel, ctx); };
  std::vector<c10::IValue> args{c10::IValue(inputs.vec()), c10::IValue(std::string(key))};
  std::vector<c10::IValue> results = run_lowering(
      "torch_tpu::jax_call", lowering, schema_with_results(kernel->results.size()), args);
  std::vector<at::Tensor> tensors;
  tensors.reserve(results.size());
  for (c10::IValue& result : results) tensors.push_back(std::move(result).toTensor());
  return tensors;
}

TORCH_LIBRARY_FRAGMENT(torch_tpu, m) { m.def("jax_call(Tensor[] inputs, str kernel) -> Tensor[]"); }

TORCH_LIBRARY_IMPL(torch_tpu, PrivateUse1, m) { m.impl("jax_call", &jax_call); }

}  // namespace

void register_jax_kernel(const std::string& key, JaxKernel kernel) {
  TORCH_CHECK(!kernel.results.empty(), "torch_tpu: a jax kernel must return at least one array");
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry()[key] = std::make_shared<const JaxKernel>(std::move(kernel));
}

std::vector<std::vector<at::Tensor>> run_jax_kernel_on_devices(
    const std::string& key, const std::vector<std::vector<at::Tensor>>& inputs_per_device) {
  std::shared_ptr<const JaxKernel> kernel = find_kernel(key);
  hlo::Builder b;
  std::vector<hlo::Value> operands;
  for (const auto& [shape, type] : kernel->params) {
    operands.push_back(b.reshape(b.parameter({hlo::num_elements(shape)}, type), shape));
  }
  std::vector<hlo::Shape> shapes;
  std::vector<hlo::ElementType> types;
  std::vector<c10::ScalarType> dtypes;
  for (const auto& [shape, type] : kernel->results) {
    shapes.push_back(shape);
    types.push_back(type);
    dtypes.push_back(to_scalar_type(type));
  }
  std::vector<hlo::Value> flat;
  for (const hlo::Value& result : b.call(kernel->entry, kernel->functions, operands, shapes, types))
    flat.push_back(b.reshape(result, {hlo::num_elements(result.shape)}));
  for (const auto& inputs : inputs_per_device) {
    TORCH_CHECK(inputs.size() == kernel->params.size(), "torch_tpu: jax kernel ", key, " takes ",
                kernel->params.size(), " tensors per device, got ", inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto& [shape, type] = kernel->params[i];
      TORCH_CHECK(inputs[i].sizes() == c10::IntArrayRef(shape) &&
                      to_element_type(inputs[i].scalar_type()) == type,
                  "torch_tpu: jax kernel ", key, " input ", i, " must be ",
                  hlo::tensor_type(shape, type), ", got ", inputs[i].scalar_type(),
                  inputs[i].sizes());
    }
  }
  return distributed::run_replicated(b.module(flat), inputs_per_device, shapes, dtypes);
}

bool has_jax_kernel(const std::string& key) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  return registry().contains(key);
}

}  // namespace torch_tpu::kernels
