// Before a collective runs, the ranks exchange what each passes (which collective, dtype,
// element count) over the host group, so a rank that calls a different collective, or passes
// another dtype or size, gets an error naming the difference instead of a hang or silently
// mixed bytes. One small all_gather per collective; TORCH_TPU_DIST_CHECK=0 turns it off.
#pragma once

#include <ATen/core/Tensor.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <vector>

namespace torch_tpu::distributed {

// Whether the check is on (TORCH_TPU_DIST_CHECK, default 1); read once.
bool agreement_check_enabled();

// Throws (on every rank) if the ranks' calls differ. `tensors` are this rank's tensors whose
// dtype (and, with `compare_numel`, total element count) every rank must share.
void check_agreement(c10d::Backend& host, const char* collective, c10d::OpType op,
                     const std::vector<at::Tensor>& tensors, bool compare_numel);

}  // namespace torch_tpu::distributed
