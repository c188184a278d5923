#include "csrc/distributed/host_staging.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/view_as_real.h>
#include <c10/util/Exception.h>

#include <exception>

#include "csrc/aten/host_transfer.h"
#include "csrc/device/pinned_memory.h"
#include "csrc/device/runtime.h"
#include "csrc/dispatch/flight_recorder.h"
#include "csrc/dispatch/mode.h"

namespace torch_tpu::distributed {

HostStaging::HostStaging(std::string collective) : collective_(std::move(collective)) {
  if (flight::enabled()) {
    flight::record(flight::Kind::Collective, "tpu_dist " + collective_, eager_mode(),
                   current_device(), 0);
  }
}

c10d::ReduceOp HostStaging::reduce_op(const c10d::ReduceOp& op, int group_size,
                                      c10::ScalarType dtype) {
  // As with NCCL: eight-bit floats are moved, never reduced.
  TORCH_CHECK(!c10::isFloat8Type(dtype), "tpu_dist: ", collective_,
              " cannot reduce float8 tensors (", dtype,
              "); gather them, or reduce in a wider dtype");
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PRODUCT:
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      return op;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(c10::isFloatingType(dtype) || c10::isComplexType(dtype),
                  "tpu_dist: ", collective_,
                  " with ReduceOp.AVG needs floating-point tensors, got ", dtype);
      output_scale_ = 1.0 / group_size;
      return c10d::ReduceOp::SUM;
    case c10d::ReduceOp::PREMUL_SUM: {
      auto* factor = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(factor != nullptr, "tpu_dist: ", collective_, ": PREMUL_SUM without a factor");
      input_scale_ = factor->tensor_factor.defined() ? factor->tensor_factor.item<double>()
                                                     : factor->double_factor;
      return c10d::ReduceOp::SUM;
    }
    default:
      TORCH_CHECK(false, "tpu_dist: ", collective_, " does not support reduce op ",
                  static_cast<int>(op.op_));
  }
}

at::Tensor HostStaging::transport(const at::Tensor& host) const {
  // Gloo's data-moving collectives take neither complex nor float8 tensors; their real view
  // and their bytes move the same bytes.
  if (bytes_only_ && host.is_complex()) return at::view_as_real(host);
  if (bytes_only_ && c10::isFloat8Type(host.scalar_type())) return host.view(at::kByte);
  return host;
}

at::Tensor HostStaging::to_host(const at::Tensor& tensor, bool copy_values) {
  if (tensor.device().is_cpu()) return tensor;
  // Staging buffers come from the caching pinned allocator: reused blocks are not faulted in
  // again, and a result handed to the device (adopt_host_values) goes back to the cache when
  // its device buffer is freed.
  at::Tensor host = at::detail::empty_generic(tensor.sizes(), pinned_memory_allocator(),
                                              c10::DispatchKeySet(c10::DispatchKey::CPU),
                                              tensor.scalar_type(), std::nullopt);
  // copy_ waits for exactly the device work (pending fused graphs included) that produces
  // this tensor, and downloads straight into the buffer.
  if (copy_values) host.copy_(tensor);
  return host;
}

at::Tensor HostStaging::write_back_later(const at::Tensor& device, at::Tensor host) {
  if (!host.is_same(device) || output_scale_ != 1.0) write_backs_.push_back({device, host});
  return transport(host);
}

at::Tensor HostStaging::scaled_input(const at::Tensor& tensor, const at::Tensor& host) const {
  if (input_scale_ == 1.0) return host;
  // A CPU input is the caller's own tensor: scale a copy. A staging buffer is scaled in place.
  return host.is_same(tensor) ? host * input_scale_ : host.mul_(input_scale_);
}

at::Tensor HostStaging::input(const at::Tensor& tensor) {
  at::Tensor host = to_host(tensor, true);
  return transport(scaled_input(tensor, host));
}

at::Tensor HostStaging::output(const at::Tensor& tensor) {
  return write_back_later(tensor, to_host(tensor, false));
}

at::Tensor HostStaging::in_out(const at::Tensor& tensor) {
  at::Tensor host = to_host(tensor, true);
  return write_back_later(tensor, scaled_input(tensor, host));
}

std::vector<at::Tensor> HostStaging::inputs(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> host;
  host.reserve(tensors.size());
  for (const auto& t : tensors) host.push_back(input(t));
  return host;
}

std::vector<at::Tensor> HostStaging::outputs(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> host;
  host.reserve(tensors.size());
  for (const auto& t : tensors) host.push_back(output(t));
  return host;
}

std::vector<at::Tensor> HostStaging::in_outs(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> host;
  host.reserve(tensors.size());
  for (const auto& t : tensors) host.push_back(in_out(t));
  return host;
}

std::vector<std::vector<at::Tensor>> HostStaging::input_lists(
    const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<std::vector<at::Tensor>> host;
  for (const auto& list : lists) host.push_back(inputs(list));
  return host;
}

std::vector<std::vector<at::Tensor>> HostStaging::output_lists(
    const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<std::vector<at::Tensor>> host;
  for (const auto& list : lists) host.push_back(outputs(list));
  return host;
}

void HostStaging::wait_and_write_back(const c10::intrusive_ptr<c10d::Work>& host_work) {
  try {
    host_work->wait();
  } catch (const std::exception& error) {
    // A timeout, a peer gone: what this rank ran up to it is in the flight record.
    const std::string message = "tpu_dist: " + collective_ + " failed: " + error.what();
    TORCH_CHECK(false, message, flight::dump_note(message));
  }
  for (auto& [device, host] : write_backs_) {
    if (output_scale_ != 1.0) host.mul_(output_scale_);
    // The staging buffer is not used again: the device tensor may take it over.
    if (!host.is_same(device)) aten::adopt_host_values(device, host);
  }
}

c10::intrusive_ptr<c10d::Work> HostStaging::finish(const c10::intrusive_ptr<c10d::Work>& host_work,
                                                   std::vector<at::Tensor> results) {
  wait_and_write_back(host_work);
  return completed_work(std::move(results));
}

namespace {

// A Work done when it is made, whose result() and get_future() hand back its tensors as
// NCCL's do (torch's own future-wrapping Work answers result() only for Python futures).
class CompletedWork final : public c10d::Work {
 public:
  explicit CompletedWork(std::vector<at::Tensor> results) : results_(std::move(results)) {
    // No devices: the future does no stream bookkeeping; the values are ready now.
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
    future_->markCompleted(c10::IValue(c10::List<at::Tensor>(results_)));
    finish();
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds) override { return true; }
  std::vector<at::Tensor> result() override { return results_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> results_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> completed_work(std::vector<at::Tensor> results) {
  return c10::make_intrusive<CompletedWork>(std::move(results));
}

}  // namespace torch_tpu::distributed
