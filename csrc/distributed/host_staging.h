// The host-staged collective engine: a collective on tpu tensors copies its inputs to the
// host, runs there on a CPU process group (Gloo), and copies the results back. It is what
// the CPU plugin (no cross-process transport) uses, and a fallback on any plugin.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace torch_tpu::distributed {

// One collective call's staging: host copies of its tpu tensors, and where each host result
// goes back. Tensors already on the CPU are used as they are.
class HostStaging {
 public:
  // Records the collective in the flight recorder.
  explicit HostStaging(std::string collective);

  // A host copy of `tensor`'s values, read by the collective and never written back.
  at::Tensor input(const at::Tensor& tensor);
  // A host tensor the collective fills; its values are copied into `tensor` on finish().
  at::Tensor output(const at::Tensor& tensor);
  // A host tensor the caller laid out (a view into one flat buffer); its values are copied
  // into `tensor` on finish(). `host` must be in the dtype the collective moves.
  at::Tensor output_as(const at::Tensor& tensor, at::Tensor host) {
    return write_back_later(tensor, std::move(host));
  }
  // Both: the collective reads `tensor` and writes its result back (all_reduce, broadcast).
  at::Tensor in_out(const at::Tensor& tensor);

  std::vector<at::Tensor> inputs(const std::vector<at::Tensor>& tensors);
  std::vector<at::Tensor> outputs(const std::vector<at::Tensor>& tensors);
  std::vector<at::Tensor> in_outs(const std::vector<at::Tensor>& tensors);
  std::vector<std::vector<at::Tensor>> input_lists(
      const std::vector<std::vector<at::Tensor>>& lists);
  std::vector<std::vector<at::Tensor>> output_lists(
      const std::vector<std::vector<at::Tensor>>& lists);

  // The collective only moves data (no reduction): complex tensors may travel as their real
  // view. Call before input()/output().
  void move_bytes_only() { bytes_only_ = true; }

  // Reductions the host group lacks: PREMUL_SUM scales the inputs before a SUM, AVG divides
  // the SUM's results. Returns the op the host group runs; call before staging any tensor.
  // Throws for an op the engine cannot run on `dtype`.
  c10d::ReduceOp reduce_op(const c10d::ReduceOp& op, int group_size, c10::ScalarType dtype);

  // Waits for the host collective and writes the results back to their tpu tensors.
  void wait_and_write_back(const c10::intrusive_ptr<c10d::Work>& host_work);
  // Waits for the host collective, writes the results back to their tpu tensors and returns a
  // completed Work whose future holds `results`. A failed or timed-out host collective throws
  // an error that names the collective.
  c10::intrusive_ptr<c10d::Work> finish(const c10::intrusive_ptr<c10d::Work>& host_work,
                                        std::vector<at::Tensor> results);

  const std::string& collective() const { return collective_; }
  // The tensor the host group is given for `host`: itself, or its real view (see
  // move_bytes_only).
  at::Tensor transport(const at::Tensor& host) const;

 private:
  at::Tensor to_host(const at::Tensor& tensor, bool copy_values);
  // `host` (to_host of `tensor`) scaled for PREMUL_SUM.
  at::Tensor scaled_input(const at::Tensor& tensor, const at::Tensor& host) const;
  at::Tensor write_back_later(const at::Tensor& device, at::Tensor host);

  struct WriteBack {
    at::Tensor device;
    at::Tensor host;
  };
  std::string collective_;
  std::vector<WriteBack> write_backs_;
  bool bytes_only_ = false;
  double input_scale_ = 1.0;
  double output_scale_ = 1.0;
};

// A Work that is already complete, holding `results` in its future.
c10::intrusive_ptr<c10d::Work> completed_work(std::vector<at::Tensor> results);

}  // namespace torch_tpu::distributed
