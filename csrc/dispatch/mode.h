// The eager execution mode: Strict (each op enqueued on its own, asynchronously), Debug (each
// op waited for, indices bounds-checked), DeferAndFuse (ops gathered into one fused executable
// that runs at the next materialization point).
#pragma once

#include <string>

namespace torch_tpu {

enum class EagerMode { Strict, Debug, DeferAndFuse };

EagerMode eager_mode();
// Materializes pending deferred work first, so that switching is always safe.
void set_eager_mode(EagerMode mode);
EagerMode parse_eager_mode(const std::string& name);  // "strict", "debug", "defer_and_fuse"
std::string eager_mode_name(EagerMode mode);

// TORCH_TPU_CHECK_FINITE=1: name the first op whose output holds NaN or Inf.
bool check_finite_enabled();

}  // namespace torch_tpu
