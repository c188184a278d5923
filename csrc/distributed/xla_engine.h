// The XLA collective engine: one collective over tensors on several local devices, compiled
// into one replicated executable (stablehlo.all_reduce, all_gather, reduce_scatter,
// all_to_all, collective_permute) that PJRT launches on every device at once. This is how a
// plugin with a device interconnect (libtpu, the CUDA plugin) moves data without the host; on
// the CPU plugin it runs in one process over several CPU devices (TORCH_TPU_CPU_DEVICE_COUNT).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

namespace torch_tpu::distributed {

struct XlaCollective {
  std::string kind;     // all_reduce, all_gather, reduce_scatter, all_to_all, permute
  std::string reducer;  // all_reduce / reduce_scatter: add, multiply, minimum, maximum, and, or
  int64_t dim = 0;      // all_gather / reduce_scatter / all_to_all: the dimension
};

// XLA's reducer for `op` on `dtype` (bool: or/and; AVG sums, the caller divides); nullopt
// where XLA has none that matches: bitwise ops, MIN/MAX of complex numbers, float8 (moved,
// never reduced, as with NCCL), AVG of integers, PREMUL_SUM of bools.
std::optional<std::string> xla_reducer(c10d::ReduceOp::RedOpType op, c10::ScalarType dtype);

// `inputs` holds one tensor per participating device (distinct tpu devices, equal shapes and
// dtypes); returns the result on each device, in the same order. `permute` sends device i's
// tensor to device i + 1 (a ring). Waits for the results.
std::vector<at::Tensor> run_xla_collective(const XlaCollective& collective,
                                           const std::vector<at::Tensor>& inputs);

// One collective across processes: this process's replica of a program over `assignment`
// (the PJRT device ids of the group's ranks, in rank order), run on `input`'s device, which
// must be this rank's entry of it. Every rank of the group calls it with the same collective
// and shape. Waits for the result.
at::Tensor run_xla_collective(const XlaCollective& collective, const at::Tensor& input,
                              const std::vector<int>& assignment);

// Runs `module` as one replica per device: inputs_per_device[r] are the arguments of this
// process's replica r (tensors on one device, read as their flat storages), and the module
// returns flat results of `result_shapes` and `result_types`. `assignment` lists every
// replica's device id, this process's and the other processes'; empty, the replicas are the
// inputs' devices. Returns each local replica's results. Waits for them.
std::vector<std::vector<at::Tensor>> run_replicated(
    const std::string& module, const std::vector<std::vector<at::Tensor>>& inputs_per_device,
    const std::vector<std::vector<int64_t>>& result_shapes,
    const std::vector<c10::ScalarType>& result_types, const std::vector<int>& assignment = {});

}  // namespace torch_tpu::distributed
