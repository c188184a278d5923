// jax functions as ops: the StableHLO that torch_tpu.kernels lowers a jax function to, kept
// under a key that torch_tpu::jax_call(inputs, key) runs.
#pragma once

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

}  // namespace torch_tpu::kernels
