#include "csrc/hlo/symbol.h"

#include <cctype>

namespace torch_tpu::hlo {

std::string module_symbol(std::string_view name) {
  std::string symbol;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') {
      symbol += c;
    } else if (symbol.empty() || symbol.back() != '_') {
      symbol += '_';
    }
  }
  if (symbol.empty() || std::isdigit(static_cast<unsigned char>(symbol[0]))) symbol.insert(0, "m");
  return symbol;
}

}  // namespace torch_tpu::hlo
