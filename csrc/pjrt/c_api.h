// The one include of the PJRT C API header. The header is not committed: the set-up script
// extracts it from a registry package into .deps/include (see README, "PJRT header").
#pragma once

#include <xla/pjrt/c/pjrt_c_api.h>

#include <cstddef>

namespace torch_tpu::pjrt {

// Fills the struct_size field the way every PJRT argument struct expects: the caller's view of
// the struct's size, so the plugin knows which trailing fields we know about.
template <typename Args>
Args make_args() {
  Args args{};
  args.struct_size = sizeof(Args);
  return args;
}

}  // namespace torch_tpu::pjrt
