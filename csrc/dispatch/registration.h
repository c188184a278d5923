// Installs the lowered ops and the unimplemented-op fallback as PrivateUse1 kernels.
#pragma once

#include <string>
#include <vector>

namespace torch_tpu {

// Called once, when torch_tpu._C is imported (after every static LOWER registrar has run).
void register_lowered_kernels();
std::vector<std::string> lowered_op_names();
// Every _foreach_ op records its per-tensor composite form into one executable (foreach.cc).
void register_foreach_kernels();

}  // namespace torch_tpu
