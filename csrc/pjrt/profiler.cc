#include "csrc/pjrt/profiler.h"

#include <cstdint>

#include "csrc/pjrt/error.h"

namespace torch_tpu::pjrt {

// The profiler extension's ABI, which pjrt_c_api.h does not declare (XLA keeps it in a header of
// its own, not shipped in any package we can build against). Every argument struct starts with
// its struct_size, as in the rest of PJRT; the layouts were checked against the XLA CUDA
// plugin's extension (tests/cpp/plugin_profiler_test.cc).
namespace {

struct ProfilerError;

struct ErrorDestroyArgs {
  size_t struct_size;
  ProfilerError* error;
};
struct ErrorMessageArgs {
  size_t struct_size;
  const ProfilerError* error;
  const char* message;  // out, owned by the error
  size_t message_size;  // out
};
struct CreateArgs {
  size_t struct_size;
  const char* options;  // a serialized ProfileOptions; empty: the plugin's defaults
  size_t options_size;
  void* profiler;  // out
};
struct ProfilerArgs {  // destroy, start and stop
  size_t struct_size;
  void* profiler;
};
struct CollectArgs {
  size_t struct_size;
  void* profiler;
  uint8_t* buffer;      // in: null; out: the plugin's copy, valid until the next call
  size_t buffer_bytes;  // out
};

using Call = ProfilerError* (*)(void*);

struct ProfilerExtension {
  PJRT_Extension_Base base;
  const ProfilerApi* api;
};

}  // namespace

struct ProfilerApi {
  size_t struct_size;
  void* priv;
  Call error_destroy;
  Call error_message;
  Call error_get_code;
  Call create;
  Call destroy;
  Call start;
  Call stop;
  Call collect_data;
};

std::string default_profile_options() {
  // A ProfileOptions message (tsl's profiler_options.proto) as a profiler session defaults it:
  // host tracer level 2 (field 2), device tracer level 1 (field 3), version 1 (field 5). An
  // empty message reads as every tracer at level 0, and the plugin then traces nothing.
  return std::string{0x10, 0x02, 0x18, 0x01, 0x28, 0x01};
}

std::unique_ptr<PluginProfiler> PluginProfiler::create(const Plugin& plugin,
                                                       const std::string& options) {
  const auto* extension =
      reinterpret_cast<const ProfilerExtension*>(plugin.extension(PJRT_Extension_Type_Profiler));
  if (extension == nullptr || extension->api == nullptr) return nullptr;
  const ProfilerApi* api = extension->api;
  if (api->struct_size < sizeof(ProfilerApi) || api->create == nullptr) return nullptr;
  CreateArgs args{sizeof(CreateArgs), options.data(), options.size(), nullptr};
  std::unique_ptr<PluginProfiler> profiler(new PluginProfiler(api, nullptr));
  profiler->raise_if_error(api->create(&args), "creating the plugin's profiler");
  profiler->profiler_ = args.profiler;
  return profiler;
}

PluginProfiler::~PluginProfiler() {
  if (profiler_ == nullptr) return;
  ProfilerArgs args{sizeof(ProfilerArgs), profiler_};
  if (ProfilerError* error = api_->destroy(&args)) {
    ErrorDestroyArgs destroy{sizeof(ErrorDestroyArgs), error};
    api_->error_destroy(&destroy);
  }
}

void PluginProfiler::raise_if_error(void* error, const char* what) const {
  if (error == nullptr) return;
  auto* failure = static_cast<ProfilerError*>(error);
  ErrorMessageArgs message{sizeof(ErrorMessageArgs), failure, nullptr, 0};
  api_->error_message(&message);
  std::string text = std::string(what) + ": " + std::string(message.message, message.message_size);
  ErrorDestroyArgs destroy{sizeof(ErrorDestroyArgs), failure};
  api_->error_destroy(&destroy);
  throw Error(std::move(text), PJRT_Error_Code_INTERNAL);
}

void PluginProfiler::start() {
  ProfilerArgs args{sizeof(ProfilerArgs), profiler_};
  raise_if_error(api_->start(&args), "starting the plugin's profiler");
}

void PluginProfiler::stop() {
  ProfilerArgs args{sizeof(ProfilerArgs), profiler_};
  raise_if_error(api_->stop(&args), "stopping the plugin's profiler");
}

std::string PluginProfiler::collect() {
  CollectArgs args{sizeof(CollectArgs), profiler_, nullptr, 0};
  raise_if_error(api_->collect_data(&args), "collecting the plugin's trace");
  if (args.buffer == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(args.buffer), args.buffer_bytes);
}

}  // namespace torch_tpu::pjrt
