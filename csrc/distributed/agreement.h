// Before a collective runs, the ranks exchange what each passes (which collective, dtype,
// element count) over the host group, so a rank that calls a different collective, or passes
// another dtype or size, gets an error naming the difference instead of a hang or silently
// mixed bytes. One small all_gather per collective, overlapped with staging;
// TORCH_TPU_DIST_CHECK=0 turns it off.
#pragma once

#include <ATen/core/Tensor.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <vector>

namespace torch_tpu::distributed {

// Whether the check is on: TORCH_TPU_DIST_CHECK (default 1), then set_agreement_check.
bool agreement_check_enabled();
void set_agreement_check(bool enabled);

// The exchange for one collective call. It starts at construction, so it overlaps with
// staging the collective's tensors; verify() waits for it and throws (on every rank) if the
// ranks' calls differ. `tensors` are this rank's tensors whose dtype (and, with
// `compare_numel`, total element count) every rank must share.
class Agreement {
 public:
  Agreement(c10d::Backend& host, const char* collective, c10d::OpType op,
            const std::vector<at::Tensor>& tensors, bool compare_numel);
  // Waits for an exchange verify() was not called for (an earlier error), so it never
  // outlives its buffers.
  ~Agreement();
  Agreement(const Agreement&) = delete;
  Agreement& operator=(const Agreement&) = delete;

  void verify();

 private:
  c10d::Backend& host_;
  const char* collective_;
  std::vector<at::Tensor> mine_;
  std::vector<std::vector<at::Tensor>> all_;
  c10::intrusive_ptr<c10d::Work> work_;
};

}  // namespace torch_tpu::distributed
