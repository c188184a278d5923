// Integer settings read from the environment, refused with a clear error when malformed.
#pragma once

#include <cstddef>

namespace torch_tpu {

// The value of environment variable `name` as an integer of at least `at_least` (0 or 1), or
// `fallback` when it is unset or empty; anything else raises an error naming the variable.
size_t count_setting(const char* name, size_t fallback, size_t at_least);

}  // namespace torch_tpu
