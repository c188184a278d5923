#include "csrc/dispatch/mode.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "csrc/dispatch/fusion.h"

namespace torch_tpu {
namespace {

bool env_is_one(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, "1") == 0;
}

EagerMode initial_mode() {
  if (env_is_one("TPU_LAUNCH_BLOCKING")) return EagerMode::Debug;
  if (env_is_one("TPU_DEFER_AND_FUSE")) return EagerMode::DeferAndFuse;
  return EagerMode::Strict;
}

std::atomic<EagerMode> current{initial_mode()};
thread_local int record_depth = 0;

}  // namespace

EagerMode eager_mode() {
  return record_depth > 0 ? EagerMode::DeferAndFuse : current.load(std::memory_order_relaxed);
}

bool recording() { return record_depth > 0; }

RecordScope::RecordScope() {
  if (record_depth++ == 0) materialize_pending();  // the graph starts with this scope
}

RecordScope::~RecordScope() noexcept(false) {
  if (--record_depth != 0) return;
  if (std::uncaught_exceptions() == 0) {
    materialize_pending();
    return;
  }
  try {
    materialize_pending();  // the recorded prefix still runs: its writes are visible as in eager
  } catch (...) {
    // The exception already unwinding is the one to report.
  }
}

void set_eager_mode(EagerMode mode) {
  materialize_pending();
  current.store(mode);
}

EagerMode parse_eager_mode(const std::string& name) {
  if (name == "strict") return EagerMode::Strict;
  if (name == "debug") return EagerMode::Debug;
  if (name == "defer_and_fuse") return EagerMode::DeferAndFuse;
  TORCH_CHECK_VALUE(false, "torch_tpu: unknown eager mode '", name,
                    "'; expected one of 'strict', 'debug', 'defer_and_fuse'");
}

std::string_view eager_mode_name(EagerMode mode) {
  switch (mode) {
    case EagerMode::Strict:
      return "strict";
    case EagerMode::Debug:
      return "debug";
    case EagerMode::DeferAndFuse:
      return "defer_and_fuse";
  }
  return "strict";
}

bool check_finite_enabled() {
  static const bool enabled = env_is_one("TORCH_TPU_CHECK_FINITE");
  return enabled;
}

}  // namespace torch_tpu
