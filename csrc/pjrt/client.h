// RAII over PJRT_Client: devices, host-to-device transfers and compilation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "csrc/pjrt/buffer.h"
#include "csrc/pjrt/c_api.h"
#include "csrc/pjrt/executable.h"
#include "csrc/pjrt/plugin.h"

namespace torch_tpu::pjrt {

// A PJRT_Client_Create option, e.g. {"cpu_device_count", int64_t{1}}.
struct ClientOption {
  std::string name;
  std::variant<std::string, int64_t, bool, float, std::vector<int64_t>> value;
};

// The key-value store a client spanning several processes exchanges its start-up data through
// (the CUDA plugin: each node's devices and NCCL ids). All three callbacks get `user_arg`.
struct KeyValueCallbacks {
  PJRT_KeyValueGetCallback get = nullptr;
  PJRT_KeyValueTryGetCallback try_get = nullptr;
  PJRT_KeyValuePutCallback put = nullptr;
  void* user_arg = nullptr;
};

struct DeviceInfo {
  PJRT_Device* device = nullptr;
  int id = 0;
  std::string kind;
  std::string description;
  int process_index = 0;
  // The device's integer attributes (TPU: coords, core_on_chip, slice_index, ...), which place
  // it in the interconnect; scalars are one-element lists.
  std::vector<std::pair<std::string, std::vector<int64_t>>> int_attributes;
};

struct MemoryStats {
  int64_t bytes_in_use = 0;
  std::optional<int64_t> peak_bytes_in_use;
  std::optional<int64_t> bytes_limit;
  std::optional<int64_t> num_allocs;
};

class Client {
 public:
  // `key_value`, when given, must outlive the client.
  static std::shared_ptr<Client> create(std::shared_ptr<Plugin> plugin,
                                        const std::vector<ClientOption>& options,
                                        const KeyValueCallbacks* key_value = nullptr);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const PJRT_Api* api() const { return plugin_->api(); }
  const Plugin& plugin() const { return *plugin_; }
  const std::vector<DeviceInfo>& devices() const { return devices_; }
  std::string platform_name() const;
  std::string platform_version() const;

  // Compiles StableHLO text (MLIR, entry `func.func public @main`). Throws Error with the
  // compiler's message on failure.
  std::unique_ptr<Executable> compile(const std::string& mlir_text,
                                      const std::string& compile_options) const;
  std::unique_ptr<Executable> deserialize(const std::string& bytes) const;

  // Copies a dense row-major host array to `device`. The plugin takes its own copy during
  // the call, so `data` may be reused as soon as this returns.
  Buffer upload(const void* data, PJRT_Buffer_Type type, std::span<const int64_t> dims,
                PJRT_Device* device) const;
  // As upload, but returns at once; `release` runs (on any thread) once `data` may be freed.
  Buffer upload_async(const void* data, PJRT_Buffer_Type type, std::span<const int64_t> dims,
                      PJRT_Device* device, std::function<void()> release) const;
  // As upload_async, but the buffer may alias `data` for its whole life (the CPU plugin does,
  // which skips the copy): `data` must stay unchanged until `release` runs.
  Buffer upload_zero_copy(const void* data, PJRT_Buffer_Type type, std::span<const int64_t> dims,
                          PJRT_Device* device, std::function<void()> release) const;

  // Whether prefix_view works here: the plugin can make a buffer over memory it did not
  // allocate (as dlpack imports need), and lays 1-d arrays out densely.
  bool supports_views() const;
  // A buffer of `dims` over the first elements of `whole`'s memory, which must hold at least
  // as many of `type`. Waits for `whole` to be defined: the view's readers know no producer.
  std::shared_ptr<Buffer> prefix_view(std::shared_ptr<Buffer> whole, PJRT_Buffer_Type type,
                                      std::span<const int64_t> dims, PJRT_Device* device) const;
  // Memory statistics where the plugin reports them; nullopt where it does not.
  std::optional<MemoryStats> memory_stats(PJRT_Device* device) const;

 private:
  Client(std::shared_ptr<Plugin> plugin, PJRT_Client* client);
  Buffer upload_with(const void* data, PJRT_Buffer_Type type, std::span<const int64_t> dims,
                     PJRT_Device* device, PJRT_HostBufferSemantics semantics,
                     PJRT_Event** done) const;
  // Uploads with `semantics`; `release` runs once the plugin is done with `data`.
  Buffer upload_releasing(const void* data, PJRT_Buffer_Type type, std::span<const int64_t> dims,
                          PJRT_Device* device, PJRT_HostBufferSemantics semantics,
                          std::function<void()> release) const;
  std::shared_ptr<Plugin> plugin_;
  PJRT_Client* client_;
  std::vector<DeviceInfo> devices_;
};

}  // namespace torch_tpu::pjrt
