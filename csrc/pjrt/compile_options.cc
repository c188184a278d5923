#include "csrc/pjrt/compile_options.h"

#include <cstdint>

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

// Field numbers from xla/pjrt/proto/compile_options.proto.
constexpr int kBuildOptionsNumReplicas = 4;
constexpr int kBuildOptionsNumPartitions = 5;
constexpr int kCompileOptionsExecutableBuildOptions = 3;
constexpr int kCompileOptionsCompilePortableExecutable = 4;

}  // namespace

std::string single_device_compile_options() {
  std::string build_options;
  put_varint_field(build_options, kBuildOptionsNumReplicas, 1);
  put_varint_field(build_options, kBuildOptionsNumPartitions, 1);
  std::string options;
  put_bytes_field(options, kCompileOptionsExecutableBuildOptions, build_options);
  put_varint_field(options, kCompileOptionsCompilePortableExecutable, 1);
  return options;
}

}  // namespace torch_tpu::pjrt
