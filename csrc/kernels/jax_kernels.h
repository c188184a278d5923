// jax functions as ops: the StableHLO that torch_tpu.kernels lowers a jax function to, kept
// under a key that torch_tpu::jax_call(inputs, key) runs.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "csrc/hlo/types.h"

namespace torch_tpu::kernels {

struct JaxKernel {
  std::string functions;  // func.func definitions, with names unique to this kernel
  std::string entry;      // the one jax_call calls
  std::vector<std::pair<hlo::Shape, hlo::ElementType>> params, results;
};

void register_jax_kernel(const std::string& key, JaxKernel kernel);
bool has_jax_kernel(const std::string& key);

// Runs kernel `key` as one replica per device, its collectives (a jax psum over a named axis)
// spanning the devices: inputs_per_device[r] are replica r's tensors, on one device each.
// Returns each replica's results.
std::vector<std::vector<at::Tensor>> run_jax_kernel_on_devices(
    const std::string& key, const std::vector<std::vector<at::Tensor>>& inputs_per_device);

}  // namespace torch_tpu::kernels
