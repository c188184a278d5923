// A serialized xla.CompileOptionsProto, written by hand so that no protobuf library is needed.
#pragma once

#include <string>
#include <vector>

namespace torch_tpu::pjrt {

inline constexpr int kDefaultOptimizationLevel = -1;

// One replica, one partition, portable (runnable on any addressable device given at execute
// time). An empty proto would mean zero replicas, which the compilers reject.
// `backend_optimization_level` overrides XLA's xla_backend_optimization_level (LLVM's -O level
// on the CPU and GPU backends) unless it is kDefaultOptimizationLevel.
std::string single_device_compile_options(
    int backend_optimization_level = kDefaultOptimizationLevel);

// `num_replicas` replicas, one partition, compiled for a fixed device assignment: replica i
// runs on the device whose id is device_ids[i] (not portable). Launch it on all of them with
// one Executable::execute_replicated call; its collectives then run across those devices.
// Throws std::invalid_argument unless there is one device id per replica.
std::string replicated_compile_options(int num_replicas, const std::vector<int>& device_ids);

}  // namespace torch_tpu::pjrt
