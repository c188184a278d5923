// tpu_dist's XLA engine for one process group: the collectives it can compile, run as this
// rank's replica of a program over every rank's device (libtpu, or the CUDA plugin started
// with node ids: PJRT moves the data between devices, never through the host). The backend
// hands a call here first; a call this engine does not take (point-to-point, gather, scatter,
// bitwise reductions, uneven all_to_all) goes to the host engine.
#pragma once

#include <ATen/core/Tensor.h>

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

namespace torch_tpu::distributed {

class XlaGroup {
 public:
  // `assignment`: the PJRT device id of each rank's device, in group rank order.
  XlaGroup(int rank, std::vector<int> assignment);

  // Each returns false, having done nothing, when the call is not one for this engine; else
  // it has written the result into its outputs.
  bool all_reduce(at::Tensor& tensor, const c10d::ReduceOp& op);
  bool broadcast(at::Tensor& tensor, int64_t root);
  bool all_gather_into(at::Tensor& output, const at::Tensor& input);
  bool reduce_scatter_into(at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& op);
  bool all_to_all_even(at::Tensor& output, const at::Tensor& input);

 private:
  int size() const { return static_cast<int>(assignment_.size()); }
  // XLA's reducer name for `op`, with the scale of the input (PREMUL_SUM's factor) and of the
  // result (AVG's 1 / size); nullopt when the op or dtype is not this engine's.
  struct Reduction {
    std::string reducer;
    double input_scale = 1.0;
    double output_scale = 1.0;
  };
  std::optional<Reduction> reduction(const c10d::ReduceOp& op, c10::ScalarType dtype) const;
  at::Tensor run(const std::string& kind, const at::Tensor& input, const std::string& reducer = "",
                 int64_t dim = 0) const;

  int rank_;
  std::vector<int> assignment_;
};

}  // namespace torch_tpu::distributed
