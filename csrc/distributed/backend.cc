#include "csrc/distributed/backend.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <optional>

#include "csrc/distributed/agreement.h"
#include "csrc/distributed/host_staging.h"

namespace torch_tpu::distributed {
namespace {

// Every tensor of one call must be on the tpu device or on the CPU, not a mix, and dense.
void check_devices(const char* collective, const std::vector<at::Tensor>& tensors) {
  std::optional<c10::DeviceType> seen;
  for (const auto& t : tensors) {
    TORCH_CHECK(t.defined(), "tpu_dist: ", collective, " got an undefined tensor");
    const auto type = t.device().type();
    TORCH_CHECK(type == c10::DeviceType::PrivateUse1 || type == c10::DeviceType::CPU,
                "tpu_dist: ", collective, " takes tpu or cpu tensors, got one on ", t.device());
    TORCH_CHECK(t.layout() == c10::kStrided, "tpu_dist: ", collective,
                " takes dense tensors, got layout ", t.layout());
    TORCH_CHECK(!seen || *seen == type, "tpu_dist: ", collective,
                " got tensors on different devices (tpu and cpu) in one call");
    seen = type;
  }
}

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> flat;
  for (const auto& list : lists) flat.insert(flat.end(), list.begin(), list.end());
  return flat;
}

void check_devices(const char* collective, const std::vector<std::vector<at::Tensor>>& lists) {
  check_devices(collective, flatten(lists));
}

c10::ScalarType dtype_of(const std::vector<at::Tensor>& tensors) {
  return tensors.empty() ? c10::kFloat : tensors.front().scalar_type();
}

}  // namespace

TpuBackend::TpuBackend(int rank, int size, c10::intrusive_ptr<c10d::Backend> host,
                       std::chrono::milliseconds timeout, std::vector<int> xla_assignment)
    : c10d::Backend(rank, size), host_(std::move(host)), timeout_(timeout) {
  TORCH_CHECK(host_, "tpu_dist: the host process group is missing");
  if (!xla_assignment.empty()) {
    TORCH_CHECK(static_cast<int>(xla_assignment.size()) == size,
                "tpu_dist: ", xla_assignment.size(), " device ids for a group of ", size);
    xla_.emplace(rank, std::move(xla_assignment));
  }
}

c10::intrusive_ptr<c10d::Backend::Options> TpuBackend::getBackendOptions() {
  return c10::make_intrusive<Options>("tpu_dist", timeout_);
}

void TpuBackend::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  host_->setTimeout(timeout);
}

void TpuBackend::startCoalescing() {
  TORCH_CHECK(!coalescing_, "tpu_dist: startCoalescing inside a coalescing block");
  coalescing_ = true;
  coalesced_results_.clear();
  coalesced_parts_.clear();
}

c10::intrusive_ptr<c10d::Work> TpuBackend::endCoalescing() {
  TORCH_CHECK(coalescing_, "tpu_dist: endCoalescing without startCoalescing");
  coalescing_ = false;
  return c10::make_intrusive<StagedWork>(getRank(), std::move(coalesced_parts_),
                                         std::move(coalesced_results_));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::point_to_point(std::shared_ptr<HostStaging> stage,
                                                          c10::intrusive_ptr<c10d::Work> host_work,
                                                          std::vector<at::Tensor> results) {
  if (coalescing_) {
    coalesced_parts_.push_back({host_work, stage});
    coalesced_results_.insert(coalesced_results_.end(), results.begin(), results.end());
  }
  return c10::make_intrusive<StagedWork>(
      getRank(), std::vector<StagedPart>{{std::move(host_work), stage}}, std::move(results));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::finish(HostStaging& stage,
                                                  const c10::intrusive_ptr<c10d::Work>& host_work,
                                                  std::vector<at::Tensor> results) {
  if (coalescing_)
    coalesced_results_.insert(coalesced_results_.end(), results.begin(), results.end());
  return stage.finish(host_work, std::move(results));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::finish_xla(std::vector<at::Tensor> results) {
  if (coalescing_)
    coalesced_results_.insert(coalesced_results_.end(), results.begin(), results.end());
  return completed_work(std::move(results));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                     const c10d::BroadcastOptions& opts) {
  check_devices("broadcast", tensors);
  Agreement agreement(*host_, "broadcast", c10d::OpType::BROADCAST, tensors, true);
  if (xla_ && tensors.size() == 1) {
    agreement.verify();
    if (xla_->broadcast(tensors[0], opts.rootRank)) return finish_xla(tensors);
  }
  HostStaging stage("broadcast");
  stage.move_bytes_only();
  auto host = stage.in_outs(tensors);
  agreement.verify();
  return finish(stage, host_->broadcast(host, opts), tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceOptions& opts) {
  check_devices("all_reduce", tensors);
  Agreement agreement(*host_, "all_reduce", c10d::OpType::ALLREDUCE, tensors, true);
  if (xla_ && tensors.size() == 1) {
    agreement.verify();
    if (xla_->all_reduce(tensors[0], opts.reduceOp)) return finish_xla(tensors);
  }
  HostStaging stage("all_reduce");
  c10d::AllreduceOptions host_opts = opts;
  host_opts.reduceOp = stage.reduce_op(opts.reduceOp, getSize(), dtype_of(tensors));
  auto host = stage.in_outs(tensors);
  agreement.verify();
  return finish(stage, host_->allreduce(host, host_opts), tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  check_devices("all_reduce_coalesced", tensors);
  Agreement agreement(*host_, "all_reduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, tensors,
                      true);
  HostStaging stage("all_reduce_coalesced");
  c10d::AllreduceCoalescedOptions host_opts = opts;
  host_opts.reduceOp = stage.reduce_op(opts.reduceOp, getSize(), dtype_of(tensors));
  auto host = stage.in_outs(tensors);
  agreement.verify();
  return finish(stage, host_->allreduce_coalesced(host, host_opts), tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::ReduceOptions& opts) {
  check_devices("reduce", tensors);
  Agreement agreement(*host_, "reduce", c10d::OpType::REDUCE, tensors, true);
  HostStaging stage("reduce");
  c10d::ReduceOptions host_opts = opts;
  host_opts.reduceOp = stage.reduce_op(opts.reduceOp, getSize(), dtype_of(tensors));
  auto host = stage.in_outs(tensors);
  agreement.verify();
  return finish(stage, host_->reduce(host, host_opts), tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) {
  check_devices("all_gather", inputs);
  check_devices("all_gather", outputs);
  Agreement agreement(*host_, "all_gather", c10d::OpType::ALLGATHER, inputs, true);
  HostStaging stage("all_gather");
  stage.move_bytes_only();
  auto host_inputs = stage.inputs(inputs);
  auto host_outputs = stage.output_lists(outputs);
  agreement.verify();
  return finish(stage, host_->allgather(host_outputs, host_inputs, opts), flatten(outputs));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                           const c10d::AllgatherOptions& opts) {
  check_devices("all_gather_into_tensor", {output, input});
  Agreement agreement(*host_, "all_gather_into_tensor", c10d::OpType::_ALLGATHER_BASE, {input},
                      true);
  if (xla_) {
    agreement.verify();
    if (xla_->all_gather_into(output, input)) return finish_xla({output});
  }
  HostStaging stage("all_gather_into_tensor");
  stage.move_bytes_only();
  // The input first: FSDP2 gathers into a buffer its input is a view of.
  at::Tensor host_input = stage.input(input);
  at::Tensor host_output = stage.output(output);
  agreement.verify();
  return finish(stage, host_->_allgather_base(host_output, host_input, opts), {output});
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  check_devices("all_gather_coalesced", inputs);
  check_devices("all_gather_coalesced", outputs);
  Agreement agreement(*host_, "all_gather_coalesced", c10d::OpType::ALLGATHER_COALESCED, inputs,
                      true);
  HostStaging stage("all_gather_coalesced");
  stage.move_bytes_only();
  auto host_inputs = stage.inputs(inputs);
  auto host_outputs = stage.output_lists(outputs);
  agreement.verify();
  return finish(stage, host_->allgather_coalesced(host_outputs, host_inputs, opts),
                flatten(outputs));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "tpu_dist: all_gather_into_tensor_coalesced got ",
              outputs.size(), " outputs for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) _allgather_base(outputs[i], inputs[i], opts);
  return completed_work(outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::GatherOptions& opts) {
  check_devices("gather", inputs);
  check_devices("gather", outputs);
  Agreement agreement(*host_, "gather", c10d::OpType::GATHER, inputs, true);
  HostStaging stage("gather");
  stage.move_bytes_only();
  auto host_inputs = stage.inputs(inputs);
  auto host_outputs = stage.output_lists(outputs);
  agreement.verify();
  return finish(stage, host_->gather(host_outputs, host_inputs, opts), flatten(outputs));
}

c10::intrusive_ptr<c10d::Work> TpuBackend::scatter(std::vector<at::Tensor>& outputs,
                                                   std::vector<std::vector<at::Tensor>>& inputs,
                                                   const c10d::ScatterOptions& opts) {
  check_devices("scatter", outputs);
  check_devices("scatter", inputs);
  Agreement agreement(*host_, "scatter", c10d::OpType::SCATTER, outputs, true);
  HostStaging stage("scatter");
  stage.move_bytes_only();
  auto host_inputs = stage.input_lists(inputs);
  auto host_outputs = stage.outputs(outputs);
  agreement.verify();
  return finish(stage, host_->scatter(host_outputs, host_inputs, opts), outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  check_devices("reduce_scatter", outputs);
  check_devices("reduce_scatter", inputs);
  Agreement agreement(*host_, "reduce_scatter", c10d::OpType::REDUCE_SCATTER, outputs, true);
  HostStaging stage("reduce_scatter");
  c10d::ReduceScatterOptions host_opts = opts;
  host_opts.reduceOp = stage.reduce_op(opts.reduceOp, getSize(), dtype_of(outputs));
  auto host_inputs = stage.input_lists(inputs);
  auto host_outputs = stage.outputs(outputs);
  agreement.verify();
  return finish(stage, host_->reduce_scatter(host_outputs, host_inputs, host_opts), outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_devices("reduce_scatter_tensor", {output, input});
  Agreement agreement(*host_, "reduce_scatter_tensor", c10d::OpType::_REDUCE_SCATTER_BASE, {output},
                      true);
  if (xla_) {
    agreement.verify();
    if (xla_->reduce_scatter_into(output, input, opts.reduceOp)) return finish_xla({output});
  }
  HostStaging stage("reduce_scatter_tensor");
  c10d::ReduceScatterOptions host_opts = opts;
  host_opts.reduceOp = stage.reduce_op(opts.reduceOp, getSize(), output.scalar_type());
  at::Tensor host_input = stage.input(input);
  at::Tensor host_output = stage.output(output);
  agreement.verify();
  return finish(stage, host_->_reduce_scatter_base(host_output, host_input, host_opts), {output});
}

c10::intrusive_ptr<c10d::Work> TpuBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "tpu_dist: reduce_scatter_tensor_coalesced got ",
              outputs.size(), " outputs for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) _reduce_scatter_base(outputs[i], inputs[i], opts);
  return completed_work(outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                         std::vector<int64_t>& output_split_sizes,
                                                         std::vector<int64_t>& input_split_sizes,
                                                         const c10d::AllToAllOptions& opts) {
  check_devices("all_to_all_single", {output, input});
  Agreement agreement(*host_, "all_to_all_single", c10d::OpType::ALLTOALL_BASE, {input}, false);
  if (xla_ && output_split_sizes.empty() && input_split_sizes.empty()) {
    agreement.verify();
    if (xla_->all_to_all_even(output, input)) return finish_xla({output});
  }
  HostStaging stage("all_to_all_single");
  stage.move_bytes_only();
  at::Tensor host_input = stage.input(input);
  at::Tensor host_output = stage.output(output);
  agreement.verify();
  return finish(
      stage,
      host_->alltoall_base(host_output, host_input, output_split_sizes, input_split_sizes, opts),
      {output});
}

c10::intrusive_ptr<c10d::Work> TpuBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                    std::vector<at::Tensor>& inputs,
                                                    const c10d::AllToAllOptions& opts) {
  check_devices("all_to_all", outputs);
  check_devices("all_to_all", inputs);
  TORCH_CHECK(
      static_cast<int>(inputs.size()) == getSize() && static_cast<int>(outputs.size()) == getSize(),
      "tpu_dist: all_to_all takes one input and one output tensor per rank (", getSize(), "), got ",
      inputs.size(), " and ", outputs.size());
  // One flat all_to_all_single with a split per rank, so the tensors may differ in shape
  // (the host group's list form needs equal shapes).
  Agreement agreement(*host_, "all_to_all", c10d::OpType::ALLTOALL, inputs, false);
  HostStaging stage("all_to_all");
  stage.move_bytes_only();
  // Complex tensors travel as their real view: two transport elements per element.
  const int64_t per_element = inputs.front().is_complex() ? 2 : 1;
  std::vector<at::Tensor> flat_inputs;
  std::vector<int64_t> input_splits, output_splits;
  for (const auto& t : inputs) {
    flat_inputs.push_back(stage.input(t).reshape({-1}));
    input_splits.push_back(t.numel() * per_element);
  }
  int64_t total = 0;
  for (const auto& t : outputs) {
    output_splits.push_back(t.numel() * per_element);
    total += t.numel();
  }
  at::Tensor host_input = at::cat(flat_inputs);
  at::Tensor staged_output = at::empty({total}, outputs.front().options().device(at::kCPU));
  int64_t offset = 0;
  for (const auto& t : outputs) {
    stage.output_as(t, staged_output.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
  at::Tensor host_output = stage.transport(staged_output).reshape({-1});
  agreement.verify();
  return finish(stage,
                host_->alltoall_base(host_output, host_input, output_splits, input_splits, opts),
                outputs);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::send(std::vector<at::Tensor>& tensors, int dst_rank,
                                                int tag) {
  check_devices("send", tensors);
  auto stage = std::make_shared<HostStaging>("send");
  stage->move_bytes_only();
  auto host = stage->inputs(tensors);
  auto work = host_->send(host, dst_rank, tag);
  return point_to_point(std::move(stage), std::move(work), tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::recv(std::vector<at::Tensor>& tensors, int src_rank,
                                                int tag) {
  check_devices("recv", tensors);
  auto stage = std::make_shared<HostStaging>("recv");
  stage->move_bytes_only();
  auto host = stage->outputs(tensors);
  auto work = host_->recv(host, src_rank, tag);
  return point_to_point(std::move(stage), std::move(work), tensors);
}

c10::intrusive_ptr<c10d::Work> TpuBackend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                         int tag) {
  check_devices("recv", tensors);
  HostStaging stage("recv");
  stage.move_bytes_only();
  auto host = stage.outputs(tensors);
  auto work = host_->recvAnysource(host, tag);
  stage.wait_and_write_back(work);
  return work;  // the host group's Work knows which rank sent (sourceRank)
}

c10::intrusive_ptr<c10d::Work> TpuBackend::barrier(const c10d::BarrierOptions& opts) {
  c10d::BarrierOptions host_opts = opts;
  host_opts.device_ids.clear();  // the host group's barrier runs on CPU tensors
  return host_->barrier(host_opts);
}

void TpuBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  host_->monitoredBarrier(opts, wait_all_ranks);
}

}  // namespace torch_tpu::distributed
