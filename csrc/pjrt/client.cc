#include "csrc/pjrt/client.h"

#include <cstdio>
#include <cstdlib>

#include "csrc/pjrt/error.h"

namespace torch_tpu::pjrt {
namespace {

PJRT_NamedValue to_named_value(const ClientOption& option) {
  auto value = make_args<PJRT_NamedValue>();
  value.name = option.name.c_str();
  value.name_size = option.name.size();
  if (const auto* text = std::get_if<std::string>(&option.value)) {
    value.type = PJRT_NamedValue_kString;
    value.string_value = text->c_str();
    value.value_size = text->size();
  } else if (const auto* integer = std::get_if<int64_t>(&option.value)) {
    value.type = PJRT_NamedValue_kInt64;
    value.int64_value = *integer;
    value.value_size = 1;
  } else if (const auto* flag = std::get_if<bool>(&option.value)) {
    value.type = PJRT_NamedValue_kBool;
    value.bool_value = *flag;
    value.value_size = 1;
  } else if (const auto* list = std::get_if<std::vector<int64_t>>(&option.value)) {
    value.type = PJRT_NamedValue_kInt64List;
    value.int64_array_value = list->data();
    value.value_size = list->size();
  } else {
    value.type = PJRT_NamedValue_kFloat;
    value.float_value = std::get<float>(option.value);
    value.value_size = 1;
  }
  return value;
}

DeviceInfo describe(const PJRT_Api* api, PJRT_Device* device) {
  auto description_args = make_args<PJRT_Device_GetDescription_Args>();
  description_args.device = device;
  check(api, api->PJRT_Device_GetDescription(&description_args), "PJRT_Device_GetDescription");
  PJRT_DeviceDescription* description = description_args.device_description;

  DeviceInfo info;
  info.device = device;
  auto id_args = make_args<PJRT_DeviceDescription_Id_Args>();
  id_args.device_description = description;
  check(api, api->PJRT_DeviceDescription_Id(&id_args), "PJRT_DeviceDescription_Id");
  info.id = id_args.id;
  auto kind_args = make_args<PJRT_DeviceDescription_Kind_Args>();
  kind_args.device_description = description;
  check(api, api->PJRT_DeviceDescription_Kind(&kind_args), "PJRT_DeviceDescription_Kind");
  info.kind.assign(kind_args.device_kind, kind_args.device_kind_size);
  auto text_args = make_args<PJRT_DeviceDescription_DebugString_Args>();
  text_args.device_description = description;
  check(api, api->PJRT_DeviceDescription_DebugString(&text_args),
        "PJRT_DeviceDescription_DebugString");
  info.description.assign(text_args.debug_string, text_args.debug_string_size);
  auto process_args = make_args<PJRT_DeviceDescription_ProcessIndex_Args>();
  process_args.device_description = description;
  check(api, api->PJRT_DeviceDescription_ProcessIndex(&process_args),
        "PJRT_DeviceDescription_ProcessIndex");
  info.process_index = process_args.process_index;
  auto attribute_args = make_args<PJRT_DeviceDescription_Attributes_Args>();
  attribute_args.device_description = description;
  check(api, api->PJRT_DeviceDescription_Attributes(&attribute_args),
        "PJRT_DeviceDescription_Attributes");
  for (size_t i = 0; i < attribute_args.num_attributes; ++i) {
    const PJRT_NamedValue& value = attribute_args.attributes[i];
    std::string name(value.name, value.name_size);
    if (value.type == PJRT_NamedValue_kInt64) {
      info.int_attributes.push_back({std::move(name), {value.int64_value}});
    } else if (value.type == PJRT_NamedValue_kInt64List) {
      info.int_attributes.push_back(
          {std::move(name), {value.int64_array_value, value.int64_array_value + value.value_size}});
    }
  }
  return info;
}

}  // namespace

std::shared_ptr<Client> Client::create(std::shared_ptr<Plugin> plugin,
                                       const std::vector<ClientOption>& options,
                                       const KeyValueCallbacks* key_value) {
  std::vector<PJRT_NamedValue> values;
  values.reserve(options.size());
  for (const auto& option : options) values.push_back(to_named_value(option));
  auto args = make_args<PJRT_Client_Create_Args>();
  args.create_options = values.data();
  args.num_options = values.size();
  if (key_value != nullptr) {
    args.kv_get_callback = key_value->get;
    args.kv_get_user_arg = key_value->user_arg;
    args.kv_try_get_callback = key_value->try_get;
    args.kv_try_get_user_arg = key_value->user_arg;
    args.kv_put_callback = key_value->put;
    args.kv_put_user_arg = key_value->user_arg;
  }
  const PJRT_Api* api = plugin->api();
  check(api, api->PJRT_Client_Create(&args), "PJRT_Client_Create");
  return std::shared_ptr<Client>(new Client(std::move(plugin), args.client));
}

Client::Client(std::shared_ptr<Plugin> plugin, PJRT_Client* client)
    : plugin_(std::move(plugin)), client_(client) {
  auto args = make_args<PJRT_Client_AddressableDevices_Args>();
  args.client = client_;
  check(api(), api()->PJRT_Client_AddressableDevices(&args), "PJRT_Client_AddressableDevices");
  for (size_t i = 0; i < args.num_addressable_devices; ++i) {
    devices_.push_back(describe(api(), args.addressable_devices[i]));
  }
}

Client::~Client() {
  auto args = make_args<PJRT_Client_Destroy_Args>();
  args.client = client_;
  PJRT_Error* error = api()->PJRT_Client_Destroy(&args);
  if (error != nullptr) (void)to_exception(api(), error, "PJRT_Client_Destroy");
}

std::string Client::platform_name() const {
  auto args = make_args<PJRT_Client_PlatformName_Args>();
  args.client = client_;
  check(api(), api()->PJRT_Client_PlatformName(&args), "PJRT_Client_PlatformName");
  return std::string(args.platform_name, args.platform_name_size);
}

std::string Client::platform_version() const {
  auto args = make_args<PJRT_Client_PlatformVersion_Args>();
  args.client = client_;
  check(api(), api()->PJRT_Client_PlatformVersion(&args), "PJRT_Client_PlatformVersion");
  return std::string(args.platform_version, args.platform_version_size);
}

std::unique_ptr<Executable> Client::compile(const std::string& mlir_text,
                                            const std::string& compile_options) const {
  static const std::string kFormat = "mlir";
  auto program = make_args<PJRT_Program>();
  program.code = const_cast<char*>(mlir_text.data());  // read only for compilation
  program.code_size = mlir_text.size();
  program.format = kFormat.c_str();
  program.format_size = kFormat.size();
  auto args = make_args<PJRT_Client_Compile_Args>();
  args.client = client_;
  args.program = &program;
  args.compile_options = compile_options.data();
  args.compile_options_size = compile_options.size();
  PJRT_Error* error = api()->PJRT_Client_Compile(&args);
  if (error != nullptr && std::getenv("TORCH_TPU_DEBUG_COMPILE_ERRORS") != nullptr) {
    std::fprintf(stderr, "torch_tpu: compile failed for module:\n%s\n", mlir_text.c_str());
  }
  check(api(), error, "PJRT_Client_Compile");
  return std::make_unique<Executable>(api(), args.executable);
}

std::unique_ptr<Executable> Client::deserialize(const std::string& bytes) const {
  auto args = make_args<PJRT_Executable_DeserializeAndLoad_Args>();
  args.client = client_;
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  check(api(), api()->PJRT_Executable_DeserializeAndLoad(&args),
        "PJRT_Executable_DeserializeAndLoad");
  return std::make_unique<Executable>(api(), args.loaded_executable);
}

Buffer Client::upload_with(const void* data, PJRT_Buffer_Type type, std::span<const int64_t> dims,
                           PJRT_Device* device, PJRT_HostBufferSemantics semantics,
                           PJRT_Event** done) const {
  auto args = make_args<PJRT_Client_BufferFromHostBuffer_Args>();
  args.client = client_;
  args.data = data;
  args.type = type;
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.host_buffer_semantics = semantics;
  args.device = device;
  check(api(), api()->PJRT_Client_BufferFromHostBuffer(&args), "PJRT_Client_BufferFromHostBuffer");
  *done = args.done_with_host_buffer;
  return Buffer(api(), args.buffer);
}

Buffer Client::upload(const void* data, PJRT_Buffer_Type type, std::span<const int64_t> dims,
                      PJRT_Device* device) const {
  PJRT_Event* done = nullptr;
  Buffer buffer = upload_with(data, type, dims, device,
                              PJRT_HostBufferSemantics_kImmutableOnlyDuringCall, &done);
  Event(api(), done).await("host-to-device transfer");
  return buffer;
}

Buffer Client::upload_async(const void* data, PJRT_Buffer_Type type, std::span<const int64_t> dims,
                            PJRT_Device* device, std::function<void()> release) const {
  return upload_releasing(data, type, dims, device,
                          PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes,
                          std::move(release));
}

Buffer Client::upload_zero_copy(const void* data, PJRT_Buffer_Type type,
                                std::span<const int64_t> dims, PJRT_Device* device,
                                std::function<void()> release) const {
  return upload_releasing(data, type, dims, device, PJRT_HostBufferSemantics_kImmutableZeroCopy,
                          std::move(release));
}

Buffer Client::upload_releasing(const void* data, PJRT_Buffer_Type type,
                                std::span<const int64_t> dims, PJRT_Device* device,
                                PJRT_HostBufferSemantics semantics,
                                std::function<void()> release) const {
  PJRT_Event* done = nullptr;
  Buffer buffer = upload_with(data, type, dims, device, semantics, &done);
  Event(api(), done).on_ready([release = std::move(release)](auto) { release(); });
  return buffer;
}

bool Client::supports_views() const {
  // A prefix of a buffer's memory is the prefix of its array where the plugin lays arrays out
  // densely (CPU, GPU); TPUs tile them, so a prefix there may hold other elements.
  const std::string platform = platform_name();
  return (platform == "cpu" || platform == "cuda" || platform == "gpu") &&
         TORCH_TPU_PJRT_HAS(*plugin_, PJRT_Client_CreateViewOfDeviceBuffer) &&
         TORCH_TPU_PJRT_HAS(*plugin_, PJRT_Buffer_OpaqueDeviceMemoryDataPointer);
}

std::shared_ptr<Buffer> Client::prefix_view(std::shared_ptr<Buffer> whole, PJRT_Buffer_Type type,
                                            std::span<const int64_t> dims,
                                            PJRT_Device* device) const {
  whole->ready_event().await("a size bucket's buffer");
  auto pointer = make_args<PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args>();
  pointer.buffer = whole->raw();
  check(api(), api()->PJRT_Buffer_OpaqueDeviceMemoryDataPointer(&pointer),
        "PJRT_Buffer_OpaqueDeviceMemoryDataPointer");
  auto args = make_args<PJRT_Client_CreateViewOfDeviceBuffer_Args>();
  args.client = client_;
  args.device_buffer_ptr = pointer.device_memory_ptr;
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.element_type = type;
  args.device = device;
  // The memory stays `whole`'s, held by the view (Buffer::viewed). The CPU plugin calls the
  // callback unconditionally, so there must be one.
  args.on_delete_callback = [](void*, void*) {};
  check(api(), api()->PJRT_Client_CreateViewOfDeviceBuffer(&args),
        "PJRT_Client_CreateViewOfDeviceBuffer");
  auto view = std::make_shared<Buffer>(api(), args.buffer, /*bytes=*/0);
  view->viewed_ = std::move(whole);
  return view;
}

std::optional<MemoryStats> Client::memory_stats(PJRT_Device* device) const {
  if (!TORCH_TPU_PJRT_HAS(*plugin_, PJRT_Device_MemoryStats)) return std::nullopt;
  auto args = make_args<PJRT_Device_MemoryStats_Args>();
  args.device = device;
  PJRT_Error* error = api()->PJRT_Device_MemoryStats(&args);
  if (error != nullptr) {
    (void)to_exception(api(), error, "PJRT_Device_MemoryStats");  // unimplemented here
    return std::nullopt;
  }
  MemoryStats stats;
  stats.bytes_in_use = args.bytes_in_use;
  if (args.peak_bytes_in_use_is_set) stats.peak_bytes_in_use = args.peak_bytes_in_use;
  if (args.bytes_limit_is_set) stats.bytes_limit = args.bytes_limit;
  if (args.num_allocs_is_set) stats.num_allocs = args.num_allocs;
  return stats;
}

}  // namespace torch_tpu::pjrt
