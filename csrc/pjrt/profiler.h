// A plugin's own profiler (PJRT's profiler extension): libtpu and the XLA CUDA plugin trace
// their devices and hand the trace back as a serialized XSpace, the protobuf XProf reads. The
// CPU plugin has none.
#pragma once

#include <memory>
#include <string>

#include "csrc/pjrt/plugin.h"

namespace torch_tpu::pjrt {

struct ProfilerApi;  // the extension's function table (profiler.cc declares its layout)

// The serialized profiler options a torch.profiler profile asks the plugin for: host and
// device tracing on, as XLA's own profiler sessions default to.
std::string default_profile_options();

class PluginProfiler {
 public:
  // A profiler of `plugin`'s, not yet started; nullptr when the plugin has no profiler
  // extension. Throws Error when the plugin refuses to create one.
  static std::unique_ptr<PluginProfiler> create(
      const Plugin& plugin, const std::string& options = default_profile_options());
  ~PluginProfiler();
  PluginProfiler(const PluginProfiler&) = delete;
  PluginProfiler& operator=(const PluginProfiler&) = delete;

  void start();
  void stop();
  // The trace since start(), a serialized XSpace (possibly empty) as the plugin hands it over:
  // some plugins append a padding byte. Call after stop().
  std::string collect();

 private:
  PluginProfiler(const ProfilerApi* api, void* profiler) : api_(api), profiler_(profiler) {}
  // Throws Error("<what>: <the plugin's message>") for a non-null profiler error, destroying it.
  void raise_if_error(void* error, const char* what) const;

  const ProfilerApi* api_;  // the plugin outlives it: a runtime's plugin is never unloaded
  void* profiler_;
};

}  // namespace torch_tpu::pjrt
