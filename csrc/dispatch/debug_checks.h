// Debug mode's bounds checks: every indexing op's indices are read back and compared with the
// dimension they index, raising IndexError (as CPU does) instead of undefined results.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <vector>

namespace torch_tpu {

void check_indices(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args);

}  // namespace torch_tpu
