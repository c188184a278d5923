// PJRT errors become C++ exceptions that carry the plugin's own message.
#pragma once

#include <stdexcept>
#include <string>

#include "csrc/pjrt/c_api.h"

namespace torch_tpu::pjrt {

class Error : public std::runtime_error {
 public:
  Error(std::string message, PJRT_Error_Code code)
      : std::runtime_error(std::move(message)), code_(code) {}
  PJRT_Error_Code code() const { return code_; }

 private:
  PJRT_Error_Code code_;
};

// Takes ownership of `error` (may be null); throws Error("<what>: <plugin message>") if set.
void check(const PJRT_Api* api, PJRT_Error* error, const char* what);

// Reads the message and code out of `error` and destroys it.
Error to_exception(const PJRT_Api* api, PJRT_Error* error, const char* what);

}  // namespace torch_tpu::pjrt
