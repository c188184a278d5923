// Runtime checks that ops make on the device (every index in range, see
// hlo::Builder::check_at_runtime), reported at the next sync point as CUDA reports its
// device-side asserts, but as an IndexError that leaves the process usable.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "csrc/hlo/types.h"
#include "csrc/pjrt/buffer.h"

namespace torch_tpu {

// False when TORCH_TPU_INDEX_CHECKS=0: ops then carry no runtime checks, and an index out of
// range reads a clamped position unreported (read once, at the first compile).
bool runtime_checks_enabled();

// The exception a failed check raises: CPU's for the same bad value (IndexError for an index,
// LinAlgError for a matrix LAPACK refuses, RuntimeError for other values).
enum class CheckError { Index, Runtime, LinAlg };

// An op's runtime checks: what their failure means, and what it raises.
struct CheckedOp {
  std::string op_name;
  std::string failure;
  CheckError error = CheckError::Index;
};

// Watches `flag` until the next sync point. It is a scalar i1 (true: the checks of `ops[0]`
// held), or a fused graph's scalar s32 (-1: every check held; k: the first that failed
// belongs to `ops[k]`). `results` are the execution's other results: if a check failed, their
// values are undefined, and every later read of them raises too.
void watch_runtime_check(std::shared_ptr<pjrt::Buffer> flag, hlo::ElementType type,
                         std::vector<CheckedOp> ops,
                         std::vector<std::weak_ptr<pjrt::Buffer>> results);

// A sync point: reads every watched flag and raises IndexError (or RuntimeError) naming the
// first op whose check failed and what was wrong.
void raise_failed_runtime_checks();

// Raises as raise_failed_runtime_checks() did where `buffer` is a result of an execution
// whose check failed: a host read of it, however late, never hands back its values.
void raise_if_result_of_failed_check(const pjrt::Buffer& buffer);

}  // namespace torch_tpu
