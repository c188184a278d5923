// Complex tensors reach only the kernels known to compute them correctly; any other kernel
// would misread them (a comparison, a float-only formula), so it raises a TypeError instead.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace torch_tpu {

// Whether a complex tensor reaches an op not known to take it.
bool refuses_complex(const std::string& op_name, const std::vector<c10::IValue>& args);
// Raises a TypeError naming the op when a complex tensor reaches an op not known to take it.
void check_complex_support(const std::string& op_name, const std::vector<c10::IValue>& args);

// The complex survey (tools/complex_coverage.py): while on, no op refuses complex tensors and
// the ops that would have are recorded, so that a sweep can tell which of them compute complex
// numbers as CPU does. Never on outside that tool.
void set_complex_survey(bool on);
// The ops recorded since the last call (base names), and the record is emptied.
std::vector<std::string> take_complex_survey();

}  // namespace torch_tpu
