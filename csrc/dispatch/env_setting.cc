#include "csrc/dispatch/env_setting.h"

#include <c10/util/Exception.h>

#include <cstdlib>

namespace torch_tpu {

size_t count_setting(const char* name, size_t fallback, size_t at_least) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long parsed = std::strtoull(value, &end, 10);
  TORCH_CHECK(end != nullptr && *end == '\0' && *value != '-' && parsed >= at_least,
              "torch_tpu: ", name, " must be a ", at_least > 0 ? "positive" : "non-negative",
              " integer, got '", value, "'");
  return static_cast<size_t>(parsed);
}

}  // namespace torch_tpu
