// The eager execution mode: Strict (each op enqueued on its own, asynchronously), Debug (each
// op waited for, indices bounds-checked), DeferAndFuse (ops gathered into one fused executable
// that runs at the next materialization point).
#pragma once

#include <string>
#include <string_view>

namespace torch_tpu {

enum class EagerMode { Strict, Debug, DeferAndFuse };

// DeferAndFuse while this thread records a compiled graph (RecordScope), else the set mode.
EagerMode eager_mode();

// While alive, this thread's ops are recorded into the pending graph without loop-repeat cuts;
// the outermost scope's end runs the graph, so a compiled FX graph becomes one executable.
class RecordScope {
 public:
  RecordScope();
  ~RecordScope() noexcept(false);
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;
};
bool recording();
// Materializes pending deferred work first, so that switching is always safe.
void set_eager_mode(EagerMode mode);
EagerMode parse_eager_mode(const std::string& name);  // "strict", "debug", "defer_and_fuse"
std::string_view eager_mode_name(EagerMode mode);     // static text: a signal handler reads it

// TORCH_TPU_CHECK_FINITE=1: name the first op whose output holds NaN or Inf.
bool check_finite_enabled();

}  // namespace torch_tpu
