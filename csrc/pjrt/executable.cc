#include "csrc/pjrt/executable.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <utility>

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

// The executable's devices; for one partition, device i runs replica i.
std::vector<PJRT_Device*> addressable_devices(const PJRT_Api* api,
                                              PJRT_LoadedExecutable* executable) {
  auto args = make_args<PJRT_LoadedExecutable_AddressableDevices_Args>();
  args.executable = executable;
  check(api, api->PJRT_LoadedExecutable_AddressableDevices(&args),
        "PJRT_LoadedExecutable_AddressableDevices");
  return {args.addressable_devices, args.addressable_devices + args.num_addressable_devices};
}

PJRT_Device* buffer_device(const PJRT_Api* api, PJRT_Buffer* buffer) {
  auto args = make_args<PJRT_Buffer_Device_Args>();
  args.buffer = buffer;
  check(api, api->PJRT_Buffer_Device(&args), "PJRT_Buffer_Device");
  return args.device;
}

// Element type and dimensions: what replicas of one program must agree on.
std::pair<PJRT_Buffer_Type, std::vector<int64_t>> buffer_signature(const PJRT_Api* api,
                                                                   PJRT_Buffer* buffer) {
  auto type = make_args<PJRT_Buffer_ElementType_Args>();
  type.buffer = buffer;
  check(api, api->PJRT_Buffer_ElementType(&type), "PJRT_Buffer_ElementType");
  auto dims = make_args<PJRT_Buffer_Dimensions_Args>();
  dims.buffer = buffer;
  check(api, api->PJRT_Buffer_Dimensions(&dims), "PJRT_Buffer_Dimensions");
  return {type.type, std::vector<int64_t>(dims.dims, dims.dims + dims.num_dims)};
}

std::atomic<int64_t> largest_temp{0};

void note_temp_run(int64_t bytes) {
  int64_t seen = largest_temp.load(std::memory_order_relaxed);
  while (bytes > seen && !largest_temp.compare_exchange_weak(seen, bytes)) {
  }
}

// XLA's temporaries for one run of `inner`; -1 where the plugin lacks the call or refuses it.
int64_t compiled_temp_bytes(const PJRT_Api* api, PJRT_Executable* inner) {
  if (api->struct_size <= offsetof(PJRT_Api, PJRT_Executable_GetCompiledMemoryStats) ||
      api->PJRT_Executable_GetCompiledMemoryStats == nullptr) {
    return -1;
  }
  auto args = make_args<PJRT_Executable_GetCompiledMemoryStats_Args>();
  args.executable = inner;
  PJRT_Error* error = api->PJRT_Executable_GetCompiledMemoryStats(&args);
  if (error != nullptr) {
    (void)to_exception(api, error, "PJRT_Executable_GetCompiledMemoryStats");
    return -1;
  }
  return args.temp_size_in_bytes;
}

Error invalid_argument(const std::string& message) {
  return Error("execute_replicated: " + message, PJRT_Error_Code_INVALID_ARGUMENT);
}

// The plugin launches replicas one by one: if one replica's arguments are rejected after
// another replica started, that one waits in its first collective until the plugin aborts the
// process. So every replica's arguments are checked before anything is launched.
void check_replicated_arguments(const PJRT_Api* api, PJRT_LoadedExecutable* executable,
                                const std::vector<std::vector<PJRT_Buffer*>>& arguments) {
  if (arguments.empty()) throw invalid_argument("no argument lists");
  std::vector<PJRT_Device*> devices = addressable_devices(api, executable);
  if (arguments.size() != devices.size()) {
    throw invalid_argument(std::to_string(arguments.size()) +
                           " argument lists for an executable compiled for " +
                           std::to_string(devices.size()) + " devices");
  }
  for (std::size_t d = 0; d < arguments.size(); ++d) {
    if (arguments[d].size() != arguments[0].size()) {
      throw invalid_argument("replicas were given different numbers of arguments");
    }
    for (std::size_t i = 0; i < arguments[d].size(); ++i) {
      if (buffer_device(api, arguments[d][i]) != devices[d]) {
        throw invalid_argument("argument " + std::to_string(i) + " of replica " +
                               std::to_string(d) + " is not on that replica's device");
      }
      if (buffer_signature(api, arguments[d][i]) != buffer_signature(api, arguments[0][i])) {
        throw invalid_argument("argument " + std::to_string(i) + " of replica " +
                               std::to_string(d) + " differs in type or shape from replica 0's");
      }
    }
  }
}

}  // namespace

Executable::Executable(const PJRT_Api* api, PJRT_LoadedExecutable* executable)
    : api_(api), executable_(executable) {
  PJRT_Executable* inner = get_executable(api_, executable_);
  auto args = make_args<PJRT_Executable_NumOutputs_Args>();
  args.executable = inner;
  PJRT_Error* error = api_->PJRT_Executable_NumOutputs(&args);
  temp_bytes_ = compiled_temp_bytes(api_, inner);
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

ExecuteResult Executable::execute(std::span<PJRT_Buffer* const> arguments, PJRT_Device* device,
                                  std::span<const int64_t> donated) const {
  auto options = make_args<PJRT_ExecuteOptions>();
  // Inputs are storage buffers that other tensors may still alias: XLA reuses only those the
  // caller donates. (Both lists are reused by the thread: a launch allocates none of its own.)
  thread_local std::vector<int64_t> non_donatable;
  non_donatable.clear();
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    if (std::find(donated.begin(), donated.end(), static_cast<int64_t>(i)) == donated.end()) {
      non_donatable.push_back(static_cast<int64_t>(i));
    }
  }
  options.non_donatable_input_indices = non_donatable.data();
  options.num_non_donatable_input_indices = non_donatable.size();

  thread_local std::vector<PJRT_Buffer*> outputs;
  outputs.assign(num_outputs_, nullptr);
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
  result.outputs = take_outputs(outputs);
  result.done = Event(api_, done);
  return result;
}

const std::vector<int64_t>& Executable::output_bytes(
    const std::vector<PJRT_Buffer*>& outputs) const {
  std::call_once(output_bytes_once_, [&] {
    output_bytes_.reserve(outputs.size());
    for (PJRT_Buffer* buffer : outputs) {
      auto args = make_args<PJRT_Buffer_OnDeviceSizeInBytes_Args>();
      args.buffer = buffer;
      check(api_, api_->PJRT_Buffer_OnDeviceSizeInBytes(&args), "PJRT_Buffer_OnDeviceSizeInBytes");
      output_bytes_.push_back(static_cast<int64_t>(args.on_device_size_in_bytes));
    }
  });
  return output_bytes_;
}

std::vector<Buffer> Executable::take_outputs(const std::vector<PJRT_Buffer*>& outputs) const {
  const std::vector<int64_t>& bytes = output_bytes(outputs);
  std::vector<Buffer> taken;
  taken.reserve(outputs.size());
  for (std::size_t i = 0; i < outputs.size(); ++i) taken.emplace_back(api_, outputs[i], bytes[i]);
  note_temp_run(temp_bytes_);
  note_launch(temp_bytes_);
  return taken;
}

std::vector<ExecuteResult> Executable::execute_replicated(
    const std::vector<std::vector<PJRT_Buffer*>>& arguments_per_device) const {
  check_replicated_arguments(api_, executable_, arguments_per_device);
  const std::size_t num_devices = arguments_per_device.size();
  const std::size_t num_args = arguments_per_device[0].size();
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
    results[d].outputs = take_outputs(outputs[d]);
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

int64_t largest_temp_run() { return largest_temp.load(std::memory_order_relaxed); }

void reset_largest_temp_run() { largest_temp.store(0, std::memory_order_relaxed); }

}  // namespace torch_tpu::pjrt
