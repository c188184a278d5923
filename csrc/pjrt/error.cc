#include "csrc/pjrt/error.h"

namespace torch_tpu::pjrt {

Error to_exception(const PJRT_Api* api, PJRT_Error* error, const char* what) {
  auto message_args = make_args<PJRT_Error_Message_Args>();
  message_args.error = error;
  api->PJRT_Error_Message(&message_args);
  std::string message(message_args.message, message_args.message_size);

  auto code_args = make_args<PJRT_Error_GetCode_Args>();
  code_args.error = error;
  PJRT_Error_Code code = PJRT_Error_Code_UNKNOWN;
  if (api->PJRT_Error_GetCode(&code_args) == nullptr) code = code_args.code;

  auto destroy_args = make_args<PJRT_Error_Destroy_Args>();
  destroy_args.error = error;
  api->PJRT_Error_Destroy(&destroy_args);
  return Error(std::string(what) + ": " + message, code);
}

void check(const PJRT_Api* api, PJRT_Error* error, const char* what) {
  if (error != nullptr) throw to_exception(api, error, what);
}

}  // namespace torch_tpu::pjrt
