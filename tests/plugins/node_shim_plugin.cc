// A test PJRT plugin that stands in for a multi-process one (the CUDA plugin) on a machine that
// only has the CPU plugin. It wraps the plugin at $TORCH_TPU_SHIM_TARGET and changes one call,
// PJRT_Client_Create: given node_id and num_nodes, it does what a multi-node client does first
// (each node puts its entry in the caller's key-value store and waits for every other node's),
// writes what it saw to $TORCH_TPU_SHIM_REPORT.<node_id> as JSON, then creates the wrapped
// plugin's single-process client without the node options (the CPU plugin refuses them).
//
// With $TORCH_TPU_SHIM_TRACE set to a file, it also offers a profiler extension, as libtpu and
// the CUDA plugin do: a profile collects that file's bytes (an XSpace), handed back with one
// padding byte more, as libtpu's buffer has.
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "xla/pjrt/c/pjrt_c_api.h"

namespace {

PJRT_Api shim_api;
PJRT_Client_Create* target_create = nullptr;

struct Failure {
  PJRT_Error_Code code = PJRT_Error_Code_OK;
  std::string message;
};
thread_local Failure last_failure;

// The error function the shim hands the store callbacks: it records and returns a marker.
PJRT_Error* record_failure(PJRT_Error_Code code, const char* message, size_t size) {
  last_failure = {code, std::string(message, size)};
  return reinterpret_cast<PJRT_Error*>(&last_failure);
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += (static_cast<unsigned char>(c) < 0x20) ? '?' : c;
  }
  return out + "\"";
}

// Runs one key-value call; returns the value, or "error <code>: <message>".
std::string kv_get(PJRT_Client_Create_Args* args, const std::string& key, int timeout_ms) {
  PJRT_CallbackError error = record_failure;
  PJRT_KeyValueGetCallback_Args get{};
  get.struct_size = sizeof(get);
  get.key = key.data();
  get.key_size = key.size();
  get.timeout_in_ms = timeout_ms;
  get.callback_error = &error;
  get.user_arg = args->kv_get_user_arg;
  if (args->kv_get_callback(&get) != nullptr)
    return "error " + std::to_string(last_failure.code) + ": " + last_failure.message;
  std::string value(get.value, get.value_size);
  get.value_deleter_callback(get.value);
  return value;
}

std::string kv_try_get(PJRT_Client_Create_Args* args, const std::string& key) {
  PJRT_CallbackError error = record_failure;
  PJRT_KeyValueTryGetCallback_Args get{};
  get.struct_size = sizeof(get);
  get.key = key.data();
  get.key_size = key.size();
  get.callback_error = &error;
  get.user_arg = args->kv_try_get_user_arg;
  if (args->kv_try_get_callback(&get) != nullptr)
    return "error " + std::to_string(last_failure.code);
  std::string value(get.value, get.value_size);
  get.value_deleter_callback(get.value);
  return value;
}

void kv_put(PJRT_Client_Create_Args* args, const std::string& key, const std::string& value) {
  PJRT_CallbackError error = record_failure;
  PJRT_KeyValuePutCallback_Args put{};
  put.struct_size = sizeof(put);
  put.key = key.data();
  put.key_size = key.size();
  put.value = value.data();
  put.value_size = value.size();
  put.callback_error = &error;
  put.user_arg = args->kv_put_user_arg;
  (void)args->kv_put_callback(&put);
}

PJRT_Error* shim_create(PJRT_Client_Create_Args* args) {
  int64_t node_id = -1;
  int64_t num_nodes = -1;
  std::vector<int64_t> visible;
  std::vector<PJRT_NamedValue> kept;
  for (size_t i = 0; i < args->num_options; ++i) {
    const PJRT_NamedValue& option = args->create_options[i];
    const std::string name(option.name, option.name_size);
    if (name == "node_id") {
      node_id = option.int64_value;
    } else if (name == "num_nodes") {
      num_nodes = option.int64_value;
    } else if (name == "visible_devices") {
      visible.assign(option.int64_array_value, option.int64_array_value + option.value_size);
    } else {
      kept.push_back(option);
    }
  }
  const bool has_store = args->kv_get_callback != nullptr && args->kv_put_callback != nullptr &&
                         args->kv_try_get_callback != nullptr;
  std::string report = "{\"node_id\": " + std::to_string(node_id) +
                       ", \"num_nodes\": " + std::to_string(num_nodes) +
                       ", \"has_store\": " + (has_store ? "true" : "false") + ", \"peers\": [";
  if (has_store && num_nodes > 0) {
    kv_put(args, "shim/node/" + std::to_string(node_id), "node " + std::to_string(node_id));
    for (int64_t j = 0; j < num_nodes; ++j) {
      report += (j ? ", " : "") + quoted(kv_get(args, "shim/node/" + std::to_string(j), 60000));
    }
    report += "], \"missing_get\": " + quoted(kv_get(args, "shim/never-put", 200));
    report += ", \"missing_try_get\": " + quoted(kv_try_get(args, "shim/never-put"));
  } else {
    report += "]";
  }
  report += ", \"visible_devices\": [";
  for (size_t i = 0; i < visible.size(); ++i)
    report += (i ? ", " : "") + std::to_string(visible[i]);
  report += "]}\n";
  if (const char* path = std::getenv("TORCH_TPU_SHIM_REPORT")) {
    const std::string file = std::string(path) + "." + std::to_string(node_id);
    if (FILE* out = std::fopen(file.c_str(), "w")) {
      std::fputs(report.c_str(), out);
      std::fclose(out);
    }
  }
  PJRT_Client_Create_Args inner = *args;
  inner.create_options = kept.data();
  inner.num_options = kept.size();
  inner.kv_get_callback = nullptr;
  inner.kv_put_callback = nullptr;
  inner.kv_try_get_callback = nullptr;
  PJRT_Error* error = target_create(&inner);
  args->client = inner.client;
  return error;
}

// The profiler extension's ABI (torch_tpu's csrc/pjrt/profiler.cc declares the same; this
// plugin links nothing of torch_tpu's, as a real one would not).
struct ShimProfiler {
  bool started = false, stopped = false;
  std::string trace;
};
struct ProfilerArgs {
  size_t struct_size;
  ShimProfiler* profiler;
};
struct CreateArgs {
  size_t struct_size;
  const char* options;
  size_t options_size;
  ShimProfiler* profiler;
};
struct CollectArgs {
  size_t struct_size;
  ShimProfiler* profiler;
  uint8_t* buffer;
  size_t buffer_bytes;
};
struct ErrorArgs {
  size_t struct_size;
  std::string* error;
  const char* message;
  size_t message_size;
};
using Call = void* (*)(void*);
struct ProfilerApi {
  size_t struct_size;
  void* priv;
  Call error_destroy, error_message, error_get_code, create, destroy, start, stop, collect_data;
};
struct ProfilerExtension {
  PJRT_Extension_Base base;
  const ProfilerApi* api;
  int64_t traceme_context_id;
};

template <typename Args, typename Body>
Call profiler_call(Body body) {
  return [](void* args) -> void* { return Body{}(static_cast<Args*>(args)); };
}

const ProfilerApi shim_profiler_api{
    sizeof(ProfilerApi),
    nullptr,
    profiler_call<ErrorArgs>([](ErrorArgs* args) -> void* {
      delete args->error;
      return nullptr;
    }),
    profiler_call<ErrorArgs>([](ErrorArgs* args) -> void* {
      args->message = args->error->data();
      args->message_size = args->error->size();
      return nullptr;
    }),
    nullptr,
    profiler_call<CreateArgs>([](CreateArgs* args) -> void* {
      args->profiler = new ShimProfiler;
      return nullptr;
    }),
    profiler_call<ProfilerArgs>([](ProfilerArgs* args) -> void* {
      delete args->profiler;
      return nullptr;
    }),
    profiler_call<ProfilerArgs>([](ProfilerArgs* args) -> void* {
      args->profiler->started = true;
      return nullptr;
    }),
    profiler_call<ProfilerArgs>([](ProfilerArgs* args) -> void* {
      args->profiler->stopped = args->profiler->started;
      return nullptr;
    }),
    profiler_call<CollectArgs>([](CollectArgs* args) -> void* {
      ShimProfiler& profiler = *args->profiler;
      if (!profiler.stopped) return new std::string("shim profiler: collect before stop");
      profiler.trace.clear();
      if (FILE* in = std::fopen(std::getenv("TORCH_TPU_SHIM_TRACE"), "rb")) {
        char chunk[4096];
        for (size_t n; (n = std::fread(chunk, 1, sizeof(chunk), in)) > 0;)
          profiler.trace.append(chunk, n);
        std::fclose(in);
      }
      profiler.trace.push_back('\0');  // the padding byte
      args->buffer = reinterpret_cast<uint8_t*>(profiler.trace.data());
      args->buffer_bytes = profiler.trace.size();
      return nullptr;
    }),
};
ProfilerExtension shim_profiler_extension{
    {sizeof(ProfilerExtension), PJRT_Extension_Type_Profiler, nullptr}, &shim_profiler_api, 0};

}  // namespace

extern "C" const PJRT_Api* GetPjrtApi() {
  if (target_create != nullptr) return &shim_api;
  const char* path = std::getenv("TORCH_TPU_SHIM_TARGET");
  void* handle = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
  auto* get_api =
      handle ? reinterpret_cast<const PJRT_Api* (*)()>(dlsym(handle, "GetPjrtApi")) : nullptr;
  if (get_api == nullptr) {
    std::fprintf(stderr, "node_shim_plugin: set TORCH_TPU_SHIM_TARGET to a PJRT plugin\n");
    return nullptr;
  }
  const PJRT_Api* target = get_api();
  std::memcpy(&shim_api, target, std::min(sizeof(shim_api), target->struct_size));
  shim_api.struct_size = std::min(sizeof(shim_api), target->struct_size);
  target_create = target->PJRT_Client_Create;
  shim_api.PJRT_Client_Create = shim_create;
  if (std::getenv("TORCH_TPU_SHIM_TRACE") != nullptr) {
    shim_profiler_extension.base.next = shim_api.extension_start;
    shim_api.extension_start = &shim_profiler_extension.base;
  }
  return &shim_api;
}
