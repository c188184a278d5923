// The persistent compile cache: serialized executables on disk, so that a process, host or job
// restart does not compile again. Entries are keyed by the module text, the plugin's identity
// and version, the compile options and torch_tpu's version; writes are atomic (temp file and
// rename); a truncated, corrupted or foreign entry is warned about and recompiled.
#pragma once

#include <memory>
#include <string>

#include "csrc/pjrt/executable.h"

namespace torch_tpu {

// TORCH_TPU_CACHE_DIR, else $XDG_CACHE_HOME/torch_tpu, else ~/.cache/torch_tpu; empty when
// disabled (TORCH_TPU_CACHE_DIR set to an empty string).
std::string cache_directory();

// Compiles `module` with single-device options, or loads it from the disk cache. `persist`
// says whether this kind of executable uses the disk cache; `label` names it in the compile log
// (TORCH_TPU_LOG_COMPILES=1), the module's own name where empty.
std::unique_ptr<pjrt::Executable> compile_with_cache(const std::string& module, bool persist,
                                                     const std::string& label = "");

// Test hook: the next compile_with_cache fails, as the plugin's compiler would on a module it
// refuses (the flight recorder's tests).
void inject_compile_failure();

}  // namespace torch_tpu
