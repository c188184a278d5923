#include "csrc/pjrt/executable.h"

#include "csrc/pjrt/error.h"

namespace torch_tpu::pjrt {
namespace {

PJRT_Executable* get_executable(const PJRT_Api* api, PJRT_LoadedExecutable* loaded) {
  auto args = make_args<PJRT_LoadedExecutable_GetExecutable_Args>();
  args.loaded_executable = loaded;
  check(api, api->PJRT_LoadedExecutable_GetExecutable(&args),
        "PJRT_LoadedExecutable_GetExecutable");
  return args.executable;
}

void destroy_executable(const PJRT_Api* api, PJRT_Executable* executable) {
  auto args = make_args<PJRT_Executable_Destroy_Args>();
  args.executable = executable;
  check(api, api->PJRT_Executable_Destroy(&args), "PJRT_Executable_Destroy");
}

}  // namespace

Executable::Executable(const PJRT_Api* api, PJRT_LoadedExecutable* executable)
    : api_(api), executable_(executable) {
  PJRT_Executable* inner = get_executable(api_, executable_);
  auto args = make_args<PJRT_Executable_NumOutputs_Args>();
  args.executable = inner;
  PJRT_Error* error = api_->PJRT_Executable_NumOutputs(&args);
  destroy_executable(api_, inner);
  check(api_, error, "PJRT_Executable_NumOutputs");
  num_outputs_ = args.num_outputs;
}

Executable::~Executable() {
  auto args = make_args<PJRT_LoadedExecutable_Destroy_Args>();
  args.executable = executable_;
  PJRT_Error* error = api_->PJRT_LoadedExecutable_Destroy(&args);
  if (error != nullptr) (void)to_exception(api_, error, "PJRT_LoadedExecutable_Destroy");
}

ExecuteResult Executable::execute(std::span<PJRT_Buffer* const> arguments,
                                  PJRT_Device* device) const {
  auto options = make_args<PJRT_ExecuteOptions>();
  // Inputs are storage buffers that other tensors still alias: never let XLA reuse them.
  std::vector<int64_t> non_donatable(arguments.size());
  for (std::size_t i = 0; i < arguments.size(); ++i) non_donatable[i] = static_cast<int64_t>(i);
  options.non_donatable_input_indices = non_donatable.data();
  options.num_non_donatable_input_indices = non_donatable.size();

  std::vector<PJRT_Buffer*> outputs(num_outputs_, nullptr);
  PJRT_Buffer* const* argument_list = arguments.data();
  PJRT_Buffer** output_list = outputs.data();
  PJRT_Event* done = nullptr;

  auto args = make_args<PJRT_LoadedExecutable_Execute_Args>();
  args.executable = executable_;
  args.options = &options;
  args.argument_lists = &argument_list;
  args.num_devices = 1;
  args.num_args = arguments.size();
  args.output_lists = &output_list;
  args.device_complete_events = &done;
  args.execute_device = device;
  check(api_, api_->PJRT_LoadedExecutable_Execute(&args), "PJRT_LoadedExecutable_Execute");

  ExecuteResult result;
  result.outputs.reserve(num_outputs_);
  for (PJRT_Buffer* buffer : outputs) result.outputs.emplace_back(api_, buffer);
  result.done = Event(api_, done);
  return result;
}

std::vector<ExecuteResult> Executable::execute_replicated(
    const std::vector<std::vector<PJRT_Buffer*>>& arguments_per_device) const {
  const std::size_t num_devices = arguments_per_device.size();
  if (num_devices == 0) {
    throw Error("execute_replicated: no argument lists", PJRT_Error_Code_INVALID_ARGUMENT);
  }
  const std::size_t num_args = arguments_per_device[0].size();
  for (const auto& arguments : arguments_per_device) {
    if (arguments.size() != num_args) {  // the C API takes one num_args for all replicas
      throw Error("execute_replicated: every replica needs the same number of arguments",
                  PJRT_Error_Code_INVALID_ARGUMENT);
    }
  }
  auto options = make_args<PJRT_ExecuteOptions>();
  std::vector<int64_t> non_donatable(num_args);  // as in execute: never donate inputs
  for (std::size_t i = 0; i < num_args; ++i) non_donatable[i] = static_cast<int64_t>(i);
  options.non_donatable_input_indices = non_donatable.data();
  options.num_non_donatable_input_indices = non_donatable.size();

  std::vector<PJRT_Buffer* const*> argument_lists;
  std::vector<std::vector<PJRT_Buffer*>> outputs(num_devices,
                                                 std::vector<PJRT_Buffer*>(num_outputs_));
  std::vector<PJRT_Buffer**> output_lists;
  for (std::size_t d = 0; d < num_devices; ++d) {
    argument_lists.push_back(arguments_per_device[d].data());
    output_lists.push_back(outputs[d].data());
  }
  std::vector<PJRT_Event*> done(num_devices, nullptr);

  auto args = make_args<PJRT_LoadedExecutable_Execute_Args>();
  args.executable = executable_;
  args.options = &options;
  args.argument_lists = argument_lists.data();
  args.num_devices = num_devices;
  args.num_args = num_args;
  args.output_lists = output_lists.data();
  args.device_complete_events = done.data();
  args.execute_device = nullptr;  // the devices fixed by the compiled device assignment
  check(api_, api_->PJRT_LoadedExecutable_Execute(&args), "PJRT_LoadedExecutable_Execute");

  std::vector<ExecuteResult> results(num_devices);
  for (std::size_t d = 0; d < num_devices; ++d) {
    results[d].outputs.reserve(num_outputs_);
    for (PJRT_Buffer* buffer : outputs[d]) results[d].outputs.emplace_back(api_, buffer);
    results[d].done = Event(api_, done[d]);
  }
  return results;
}

std::string Executable::serialize() const {
  PJRT_Executable* inner = get_executable(api_, executable_);
  auto args = make_args<PJRT_Executable_Serialize_Args>();
  args.executable = inner;
  PJRT_Error* error = api_->PJRT_Executable_Serialize(&args);
  destroy_executable(api_, inner);
  check(api_, error, "PJRT_Executable_Serialize");
  std::string bytes(args.serialized_bytes, args.serialized_bytes_size);
  args.serialized_executable_deleter(args.serialized_executable);
  return bytes;
}

}  // namespace torch_tpu::pjrt
