#include "csrc/distributed/xla_engine.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>

#include "csrc/device/runtime.h"
#include "csrc/device/storage.h"
#include "csrc/device/types.h"
#include "csrc/dispatch/dispatcher.h"
#include "csrc/dispatch/flight_recorder.h"
#include "csrc/hlo/builder.h"
#include "csrc/pjrt/compile_options.h"

namespace torch_tpu::distributed {
namespace {

void check_inputs(const std::string& kind, const std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(inputs.size() >= 2, "tpu_dist xla ", kind, ": needs tensors on 2 or more devices");
  std::vector<bool> seen(Runtime::get().device_count(), false);
  for (const auto& t : inputs) {
    TORCH_CHECK(t.device().is_privateuseone(), "tpu_dist xla ", kind, ": got a tensor on ",
                t.device());
    TORCH_CHECK(!seen.at(t.device().index()), "tpu_dist xla ", kind, ": two tensors on ",
                t.device());
    seen[t.device().index()] = true;
    TORCH_CHECK(t.sizes() == inputs[0].sizes() && t.scalar_type() == inputs[0].scalar_type(),
                "tpu_dist xla ", kind, ": every device's tensor must match the first's (",
                inputs[0].scalar_type(), inputs[0].sizes(), "), got ", t.scalar_type(), t.sizes());
  }
}

// The collective's reducer, which arrives from Python by its StableHLO name ("add", "or").
hlo::BinaryOp reducer_op(const XlaCollective& c) {
  std::optional<hlo::BinaryOp> op = hlo::binary_op_named(c.reducer);
  hlo::require(op.has_value(), c.kind + ": unknown reducer '" + c.reducer +
                                   "' (add, multiply, minimum, maximum, and, or, xor)");
  return *op;
}

// The collective's module: the flat storage buffer in, the flat result out.
std::string build_module(const XlaCollective& c, const at::Tensor& like, int64_t replicas,
                         hlo::Shape& result_shape) {
  hlo::Builder b;
  const hlo::ElementType type = to_element_type(like.scalar_type());
  hlo::Shape shape(like.sizes().begin(), like.sizes().end());
  hlo::Value x = b.reshape(b.parameter({like.numel()}, type), shape);
  std::vector<int64_t> group(replicas);
  std::iota(group.begin(), group.end(), 0);
  const std::vector<std::vector<int64_t>> groups{group};
  hlo::Value y;
  if (c.kind == "all_reduce") {
    y = b.all_reduce(x, reducer_op(c), groups);
  } else if (c.kind == "all_gather") {
    y = b.all_gather(x, c.dim, groups);
  } else if (c.kind == "reduce_scatter") {
    y = b.reduce_scatter(x, c.dim, reducer_op(c), groups);
  } else if (c.kind == "all_to_all") {
    y = b.all_to_all(x, c.dim, c.dim, replicas, groups);
  } else if (c.kind == "permute") {
    std::vector<std::pair<int64_t, int64_t>> ring;
    for (int64_t i = 0; i < replicas; ++i) ring.push_back({i, (i + 1) % replicas});
    y = b.collective_permute(x, ring);
  } else {
    TORCH_CHECK(false, "tpu_dist xla: unknown collective '", c.kind, "'");
  }
  result_shape = y.shape;
  const int64_t numel =
      std::accumulate(y.shape.begin(), y.shape.end(), int64_t{1}, std::multiplies<>());
  return b.module({b.reshape(y, {numel})});
}

// Compiled executables by (module text, device ids): a collective compiles once per shape.
std::shared_ptr<pjrt::Executable> compiled(const std::string& text, const std::vector<int>& ids) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::vector<int>>, std::shared_ptr<pjrt::Executable>>
      cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& entry = cache[{text, ids}];
  if (!entry) {
    entry = Runtime::get().client().compile(
        text, pjrt::replicated_compile_options(static_cast<int>(ids.size()), ids));
  }
  return entry;
}

// The collective's module over `replicas`; a build error names the collective.
std::string module_for(const XlaCollective& collective, const at::Tensor& like, int64_t replicas,
                       hlo::Shape& result_shape) {
  try {
    return build_module(collective, like, replicas, result_shape);
  } catch (const hlo::BuildError& error) {
    TORCH_CHECK(false, "tpu_dist xla ", collective.kind, ": ", error.what());
  }
}

}  // namespace

std::optional<std::string> xla_reducer(c10d::ReduceOp::RedOpType op, c10::ScalarType dtype) {
  if (c10::isFloat8Type(dtype)) return std::nullopt;
  const bool is_bool = dtype == c10::kBool;
  const bool is_complex = c10::isComplexType(dtype);
  switch (op) {
    case c10d::ReduceOp::SUM:
      return is_bool ? "or" : "add";
    case c10d::ReduceOp::PRODUCT:
      return is_bool ? "and" : "multiply";
    case c10d::ReduceOp::MIN:
      if (is_complex) return std::nullopt;
      return is_bool ? "and" : "minimum";
    case c10d::ReduceOp::MAX:
      if (is_complex) return std::nullopt;
      return is_bool ? "or" : "maximum";
    case c10d::ReduceOp::AVG:
      if (!c10::isFloatingType(dtype) && !is_complex) return std::nullopt;
      return "add";
    case c10d::ReduceOp::PREMUL_SUM:
      if (is_bool) return std::nullopt;
      return "add";
    default:
      return std::nullopt;
  }
}

std::vector<at::Tensor> run_xla_collective(const XlaCollective& collective,
                                           const std::vector<at::Tensor>& inputs) {
  check_inputs(collective.kind, inputs);
  hlo::Shape result_shape;
  const std::string text =
      module_for(collective, inputs[0], static_cast<int64_t>(inputs.size()), result_shape);
  std::vector<std::vector<at::Tensor>> per_device;
  for (const at::Tensor& input : inputs) per_device.push_back({input});
  std::vector<at::Tensor> outputs;
  for (auto& results : run_replicated(text, per_device, {result_shape}, {inputs[0].scalar_type()}))
    outputs.push_back(std::move(results.at(0)));
  return outputs;
}

at::Tensor run_xla_collective(const XlaCollective& collective, const at::Tensor& input,
                              const std::vector<int>& assignment) {
  TORCH_CHECK(input.device().is_privateuseone(), "tpu_dist xla ", collective.kind,
              ": got a tensor on ", input.device());
  hlo::Shape result_shape;
  const std::string text =
      module_for(collective, input, static_cast<int64_t>(assignment.size()), result_shape);
  return run_replicated(text, {{input}}, {result_shape}, {input.scalar_type()}, assignment)
      .at(0)
      .at(0);
}

std::vector<std::vector<at::Tensor>> run_replicated(
    const std::string& module, const std::vector<std::vector<at::Tensor>>& inputs_per_device,
    const std::vector<std::vector<int64_t>>& result_shapes,
    const std::vector<c10::ScalarType>& result_types, const std::vector<int>& assignment) {
  auto& runtime = Runtime::get();
  std::vector<int> device_ids;
  std::vector<std::shared_ptr<pjrt::Buffer>> buffers;  // alive until the results are ready
  std::vector<std::vector<PJRT_Buffer*>> arguments;
  for (const auto& inputs : inputs_per_device) {
    TORCH_CHECK(!inputs.empty(), "torch_tpu: a replica without inputs has no device");
    arguments.emplace_back();
    for (const at::Tensor& t : inputs) {
      TORCH_CHECK(t.device() == inputs[0].device(), "torch_tpu: a replica's inputs are on ",
                  inputs[0].device(), " and ", t.device());
      // The executable reads a whole flat storage: other layouts go through a compact copy.
      const bool compact =
          t.is_contiguous() && t.storage_offset() == 0 && t.storage().nbytes() == t.nbytes();
      buffers.push_back(storage_buffer(compact ? t : t.clone(at::MemoryFormat::Contiguous)));
      arguments.back().push_back(buffers.back()->raw());
    }
    const int id = runtime.device_info(inputs[0].device().index()).id;
    TORCH_CHECK(std::find(device_ids.begin(), device_ids.end(), id) == device_ids.end(),
                "torch_tpu: two replicas on ", inputs[0].device(), ": one per device");
    TORCH_CHECK(assignment.empty() ||
                    std::find(assignment.begin(), assignment.end(), id) != assignment.end(),
                "torch_tpu: ", inputs[0].device(), " (device id ", id,
                ") is not among the replicated program's devices");
    device_ids.push_back(id);
  }
  if (!assignment.empty()) device_ids = assignment;
  std::shared_ptr<pjrt::Executable> executable;
  try {
    executable = compiled(module, device_ids);
  } catch (const pjrt::Error& error) {
    const std::string message = "torch_tpu: compiling a module replicated over " +
                                std::to_string(device_ids.size()) +
                                " devices failed: " + error.what();
    TORCH_CHECK(false, message, flight::dump_note(message));
  }
  auto results = executable->execute_replicated(arguments);
  std::vector<std::vector<at::Tensor>> outputs;
  for (size_t r = 0; r < results.size(); ++r) {
    results[r].done.await("torch_tpu replicated execution");
    outputs.emplace_back();
    for (size_t i = 0; i < result_shapes.size(); ++i) {
      at::Tensor out = at::empty(c10::IntArrayRef(result_shapes[i]),
                                 inputs_per_device[r][0].options().dtype(result_types[i]));
      device_storage(out).assign(
          std::make_shared<pjrt::Buffer>(std::move(results[r].outputs.at(i))),
          to_element_type(result_types[i]));
      outputs.back().push_back(out);
    }
  }
  return outputs;
}

}  // namespace torch_tpu::distributed
