// The symbol a module is named by (module @name): XLA names the program after it, so a
// plugin's profiler shows it for the program's runs.
#pragma once

#include <string>
#include <string_view>

namespace torch_tpu::hlo {

// `name` as an MLIR symbol: letters, digits, '_' and '.' kept, every other run of characters
// one '_' ("aten::mm.default" -> "aten_mm.default"), never starting with a digit.
std::string module_symbol(std::string_view name);

}  // namespace torch_tpu::hlo
