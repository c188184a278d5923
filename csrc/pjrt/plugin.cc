#include "csrc/pjrt/plugin.h"

#include <dlfcn.h>

#include <cstring>
#include <sstream>
#include <stdexcept>

#include "csrc/pjrt/error.h"

namespace torch_tpu::pjrt {

std::shared_ptr<Plugin> Plugin::load(const std::string& path) {
  // RTLD_LOCAL: plugins bundle their own copies of LLVM/absl; keep them out of the global
  // namespace so they cannot clash with torch's symbols.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw std::runtime_error("torch_tpu: cannot load PJRT plugin '" + path + "': " + dlerror());
  }
  using GetApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetApiFn>(dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    dlclose(handle);
    throw std::runtime_error("torch_tpu: '" + path + "' is not a PJRT plugin (no GetPjrtApi)");
  }
  const PJRT_Api* api = get_api();
  if (api == nullptr || api->struct_size < offsetof(PJRT_Api, PJRT_Plugin_Initialize)) {
    dlclose(handle);
    throw std::runtime_error("torch_tpu: PJRT plugin '" + path + "' returned no usable API");
  }
  const auto& version = api->pjrt_api_version;
  // Major versions are incompatible by definition. Within a major version the plugin accepts
  // argument structs from older headers; a plugin older than our header may lack trailing
  // function slots, which has_slot() guards at each use.
  if (version.major_version != PJRT_API_MAJOR) {
    dlclose(handle);
    std::ostringstream message;
    message << "torch_tpu: PJRT plugin '" << path << "' has API version " << version.major_version
            << "." << version.minor_version << " but torch_tpu was built against " << PJRT_API_MAJOR
            << "." << PJRT_API_MINOR;
    throw std::runtime_error(message.str());
  }
  std::shared_ptr<Plugin> plugin(new Plugin(handle, api, path));
  auto init_args = make_args<PJRT_Plugin_Initialize_Args>();
  check(api, api->PJRT_Plugin_Initialize(&init_args), "PJRT_Plugin_Initialize");
  return plugin;
}

Plugin::~Plugin() {
  // Plugins are not designed to be unloaded (static destructors race with their thread
  // pools), so the handle is intentionally kept open for the life of the process.
  (void)handle_;
}

bool Plugin::has_slot(std::size_t offset) const {
  if (offset + sizeof(void*) > api_->struct_size) return false;
  void* slot = nullptr;
  std::memcpy(&slot, reinterpret_cast<const char*>(api_) + offset, sizeof(void*));
  return slot != nullptr;
}

const PJRT_Extension_Base* Plugin::extension(PJRT_Extension_Type type) const {
  for (const PJRT_Extension_Base* extension = api_->extension_start; extension != nullptr;
       extension = extension->next) {
    if (extension->type == type) return extension;
  }
  return nullptr;
}

bool Plugin::has_extension(PJRT_Extension_Type type) const { return extension(type) != nullptr; }

std::string Plugin::attributes() const {
  if (!TORCH_TPU_PJRT_HAS(*this, PJRT_Plugin_Attributes)) return "";
  auto args = make_args<PJRT_Plugin_Attributes_Args>();
  check(api_, api_->PJRT_Plugin_Attributes(&args), "PJRT_Plugin_Attributes");
  std::ostringstream out;
  for (size_t i = 0; i < args.num_attributes; ++i) {
    const PJRT_NamedValue& value = args.attributes[i];
    out << std::string(value.name, value.name_size) << "=";
    switch (value.type) {
      case PJRT_NamedValue_kString:
        out << std::string(value.string_value, value.value_size);
        break;
      case PJRT_NamedValue_kInt64:
        out << value.int64_value;
        break;
      case PJRT_NamedValue_kBool:
        out << (value.bool_value ? "true" : "false");
        break;
      case PJRT_NamedValue_kFloat:
        out << value.float_value;
        break;
      case PJRT_NamedValue_kInt64List:
        for (size_t j = 0; j < value.value_size; ++j) {
          out << (j ? "," : "") << value.int64_array_value[j];
        }
        break;
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace torch_tpu::pjrt
