#include "csrc/distributed/xla_group.h"

#include <ATen/ops/mul.h>
#include <c10/util/Exception.h>

#include <torch/csrc/distributed/c10d/Types.hpp>

#include "csrc/distributed/xla_engine.h"

namespace torch_tpu::distributed {
namespace {

bool on_device(const at::Tensor& t) {
  return t.defined() && t.device().is_privateuseone() && t.layout() == c10::kStrided;
}

}  // namespace

XlaGroup::XlaGroup(int rank, std::vector<int> assignment)
    : rank_(rank), assignment_(std::move(assignment)) {
  TORCH_CHECK(rank_ >= 0 && rank_ < size(), "tpu_dist xla: rank ", rank_, " of a group of ",
              size());
}

std::optional<XlaGroup::Reduction> XlaGroup::reduction(const c10d::ReduceOp& op,
                                                       c10::ScalarType dtype) const {
  std::optional<std::string> reducer = xla_reducer(op.op_, dtype);
  if (!reducer) return std::nullopt;  // the host engine takes it, or refuses it
  Reduction r{*reducer};
  if (op.op_ == c10d::ReduceOp::AVG) r.output_scale = 1.0 / size();
  if (op.op_ == c10d::ReduceOp::PREMUL_SUM) {
    auto* factor = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
    if (factor == nullptr) return std::nullopt;
    r.input_scale = factor->tensor_factor.defined() ? factor->tensor_factor.item<double>()
                                                    : factor->double_factor;
  }
  return r;
}

at::Tensor XlaGroup::run(const std::string& kind, const at::Tensor& input,
                         const std::string& reducer, int64_t dim) const {
  return run_xla_collective({kind, reducer, dim}, input, assignment_);
}

bool XlaGroup::all_reduce(at::Tensor& tensor, const c10d::ReduceOp& op) {
  if (!on_device(tensor)) return false;
  auto r = reduction(op, tensor.scalar_type());
  if (!r) return false;
  at::Tensor input = r->input_scale == 1.0 ? tensor : tensor.mul(r->input_scale);
  at::Tensor result = run("all_reduce", input, r->reducer);
  if (r->output_scale != 1.0) result = result.mul(r->output_scale);
  tensor.copy_(result);
  return true;
}

bool XlaGroup::broadcast(at::Tensor& tensor, int64_t root) {
  if (!on_device(tensor)) return false;
  // Every rank's copy gathered, the root's kept: exact for every value (a masked sum would
  // turn the root's -0.0 into 0.0), at the cost of moving size() copies.
  at::Tensor gathered = run("all_gather", tensor.unsqueeze(0).contiguous(), "", 0);
  tensor.copy_(gathered.select(0, root));
  return true;
}

bool XlaGroup::all_gather_into(at::Tensor& output, const at::Tensor& input) {
  if (!on_device(output) || !on_device(input)) return false;
  if (output.numel() != input.numel() * size()) return false;  // the host engine's error
  // The input is read before the output is written: FSDP2 gathers into a buffer its input is
  // a view of.
  at::Tensor gathered = run("all_gather", input.reshape({input.numel()}), "", 0);
  output.copy_(gathered.view(output.sizes()));
  return true;
}

bool XlaGroup::reduce_scatter_into(at::Tensor& output, const at::Tensor& input,
                                   const c10d::ReduceOp& op) {
  if (!on_device(output) || !on_device(input)) return false;
  if (input.numel() != output.numel() * size()) return false;
  auto r = reduction(op, input.scalar_type());
  if (!r) return false;
  at::Tensor scaled = r->input_scale == 1.0 ? input : input.mul(r->input_scale);
  at::Tensor result = run("reduce_scatter", scaled.reshape({scaled.numel()}), r->reducer, 0);
  if (r->output_scale != 1.0) result = result.mul(r->output_scale);
  output.copy_(result.view(output.sizes()));
  return true;
}

bool XlaGroup::all_to_all_even(at::Tensor& output, const at::Tensor& input) {
  if (!on_device(output) || !on_device(input)) return false;
  if (input.numel() != output.numel() || input.dim() == 0 || input.size(0) % size() != 0)
    return false;
  // Chunk r of dim 0 goes to rank r: on the flat storage, chunk r is a contiguous run.
  at::Tensor result = run("all_to_all", input.reshape({input.numel()}), "", 0);
  output.copy_(result.view(output.sizes()));
  return true;
}

}  // namespace torch_tpu::distributed
