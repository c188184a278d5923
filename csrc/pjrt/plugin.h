// A loaded PJRT plugin: the shared library, its PJRT_Api table, and version checks.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "csrc/pjrt/c_api.h"

namespace torch_tpu::pjrt {

class Plugin {
 public:
  // dlopens `path`, calls GetPjrtApi, checks the API version against the header's and runs
  // PJRT_Plugin_Initialize. Throws std::runtime_error naming the path on any failure.
  static std::shared_ptr<Plugin> load(const std::string& path);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const PJRT_Api* api() const { return api_; }
  const std::string& path() const { return path_; }
  int major_version() const { return api_->pjrt_api_version.major_version; }
  int minor_version() const { return api_->pjrt_api_version.minor_version; }

  // True if the plugin's PJRT_Api is large enough to hold the function slot at `offset`
  // and the slot is set. Older plugins have shorter tables.
  bool has_slot(std::size_t offset) const;

  // True if the plugin lists an extension of `type` (FFI custom calls, layouts, ...).
  bool has_extension(PJRT_Extension_Type type) const;
  // The plugin's extension of `type`, or nullptr.
  const PJRT_Extension_Base* extension(PJRT_Extension_Type type) const;

  // Plugin attributes (PJRT_Plugin_Attributes) as "key=value" lines, for diagnostics.
  std::string attributes() const;

 private:
  Plugin(void* handle, const PJRT_Api* api, std::string path)
      : handle_(handle), api_(api), path_(std::move(path)) {}
  void* handle_;
  const PJRT_Api* api_;
  std::string path_;
};

// Expands to a check that `plugin` provides the PJRT function `name`.
#define TORCH_TPU_PJRT_HAS(plugin, name) ((plugin).has_slot(offsetof(PJRT_Api, name)))

}  // namespace torch_tpu::pjrt
