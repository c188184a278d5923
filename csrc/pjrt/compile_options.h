// A serialized xla.CompileOptionsProto, written by hand so that no protobuf library is needed.
#pragma once

#include <string>

namespace torch_tpu::pjrt {

// One replica, one partition, portable (runnable on any addressable device given at execute
// time). An empty proto would mean zero replicas, which the compilers reject.
std::string single_device_compile_options();

}  // namespace torch_tpu::pjrt
