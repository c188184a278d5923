#include "csrc/pjrt/compile_options.h"

#include <cstdint>
#include <stdexcept>

namespace torch_tpu::pjrt {
namespace {

// Protobuf wire format: a tag is (field_number << 3) | wire_type; 0 = varint, 2 = bytes.
void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_varint_field(std::string& out, int field, uint64_t value) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 0);
  put_varint(out, value);
}

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// Field numbers from xla/pjrt/proto/compile_options.proto: CompileOptionsProto
// {executable_build_options = 3; compile_portable_executable = 4;} and
// ExecutableBuildOptionsProto {num_replicas = 4; num_partitions = 5; device_assignment = 9;}.
constexpr int kBuildOptionsNumReplicas = 4;
constexpr int kBuildOptionsNumPartitions = 5;
constexpr int kCompileOptionsExecutableBuildOptions = 3;
constexpr int kCompileOptionsCompilePortableExecutable = 4;
constexpr int kBuildOptionsDeviceAssignment = 9;
// CompileOptionsProto {map<string, OptionOverrideProto> env_option_overrides = 7;}, a map entry
// being {key = 1; value = 2;}, and OptionOverrideProto {oneof {... int64 int_field = 3;}}.
constexpr int kCompileOptionsEnvOptionOverrides = 7;
constexpr int kMapEntryKey = 1;
constexpr int kMapEntryValue = 2;
constexpr int kOverrideIntField = 3;
// Field numbers from xla/xla_data.proto: DeviceAssignmentProto {int32 replica_count = 1;
// int32 computation_count = 2; repeated ComputationDevice computation_devices = 3;} and
// ComputationDevice {repeated int64 replica_device_ids = 1;}.
constexpr int kAssignmentReplicaCount = 1;
constexpr int kAssignmentComputationCount = 2;
constexpr int kAssignmentComputationDevices = 3;
constexpr int kComputationDeviceReplicaDeviceIds = 1;

}  // namespace

std::string single_device_compile_options(int backend_optimization_level) {
  std::string build_options;
  put_varint_field(build_options, kBuildOptionsNumReplicas, 1);
  put_varint_field(build_options, kBuildOptionsNumPartitions, 1);
  std::string options;
  put_bytes_field(options, kCompileOptionsExecutableBuildOptions, build_options);
  put_varint_field(options, kCompileOptionsCompilePortableExecutable, 1);
  if (backend_optimization_level != kDefaultOptimizationLevel) {
    // A DebugOptions field set by name, as jax passes its compiler options.
    std::string value;
    put_varint_field(value, kOverrideIntField, static_cast<uint64_t>(backend_optimization_level));
    std::string entry;
    put_bytes_field(entry, kMapEntryKey, "xla_backend_optimization_level");
    put_bytes_field(entry, kMapEntryValue, value);
    put_bytes_field(options, kCompileOptionsEnvOptionOverrides, entry);
  }
  return options;
}

std::string replicated_compile_options(int num_replicas, const std::vector<int>& device_ids) {
  if (num_replicas < 1 || device_ids.size() != static_cast<size_t>(num_replicas)) {
    throw std::invalid_argument(
        "torch_tpu: replicated_compile_options needs one device id per "
        "replica (" +
        std::to_string(num_replicas) + " replicas, " + std::to_string(device_ids.size()) + " ids)");
  }
  std::string packed_ids;  // a packed repeated int64: the varints back to back
  for (int id : device_ids) put_varint(packed_ids, static_cast<uint64_t>(static_cast<int64_t>(id)));
  std::string computation;
  put_bytes_field(computation, kComputationDeviceReplicaDeviceIds, packed_ids);
  std::string assignment;
  put_varint_field(assignment, kAssignmentReplicaCount, num_replicas);
  put_varint_field(assignment, kAssignmentComputationCount, 1);
  put_bytes_field(assignment, kAssignmentComputationDevices, computation);

  std::string build_options;
  put_varint_field(build_options, kBuildOptionsNumReplicas, num_replicas);
  put_varint_field(build_options, kBuildOptionsNumPartitions, 1);
  put_bytes_field(build_options, kBuildOptionsDeviceAssignment, assignment);
  std::string options;
  put_bytes_field(options, kCompileOptionsExecutableBuildOptions, build_options);
  return options;  // compile_portable_executable stays false: the assignment fixes the devices
}

}  // namespace torch_tpu::pjrt
