#include "csrc/dispatch/disk_cache.h"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <vector>

#include "csrc/device/runtime.h"
#include "csrc/dispatch/env_setting.h"
#include "csrc/dispatch/metrics.h"
#include "csrc/pjrt/compile_options.h"
#include "csrc/pjrt/error.h"

namespace torch_tpu {
namespace {

constexpr char kMagic[8] = {'T', 'T', 'P', 'U', 'E', 'X', 'E', '1'};
constexpr const char* kTorchTpuVersion = "0.1.0";

uint64_t fnv1a(const std::string& bytes, uint64_t seed) {
  uint64_t hash = 1469598103934665603ULL ^ seed;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 1099511628211ULL;
  }
  return hash;
}

std::string hex(uint64_t value) {
  std::ostringstream out;
  out << std::hex;
  out.width(16);
  out.fill('0');
  out << value;
  return out.str();
}

// TORCH_TPU_QUICK_COMPILE_ELEMENTS=N, on the CPU plugin: an executable whose tensors all have
// at most N elements compiles with LLVM's optimizations off, in about half the time where XLA
// expands much (random numbers: 120 -> 58 ms, bench/eager_compile.py). Each run of such an
// executable costs ~1 us more (5.6 -> 6.8 us for an eager 4x4 add), so it is off by default:
// it pays where compiles dominate (test suites, scripts meeting many shapes), not in a loop
// that repeats its shapes. Other plugins are left alone, their compilers being another matter.
int64_t quick_compile_limit() {
  static const int64_t limit = [] {
    const char* setting = std::getenv("TORCH_TPU_QUICK_COMPILE_ELEMENTS");
    if (setting == nullptr || Runtime::get().client().platform_name() != "cpu") return int64_t{0};
    return int64_t{std::atoll(setting)};
  }();
  return limit;
}

// Everything an executable's validity depends on besides its module text.
const std::string& environment_key() {
  static const std::string key = [] {
    const auto& client = Runtime::get().client();
    std::ostringstream out;
    out << "plugin=" << client.plugin().path() << ";pjrt=" << client.plugin().major_version() << "."
        << client.plugin().minor_version() << ";platform=" << client.platform_name()
        << ";version=" << client.platform_version() << ";torch_tpu=" << kTorchTpuVersion
        << ";options=" << hex(fnv1a(pjrt::single_device_compile_options(), 0));
    std::error_code error;
    auto size = std::filesystem::file_size(client.plugin().path(), error);
    if (!error) out << ";plugin_size=" << size;
    // The plugin's compiler reads its flags from the environment (see torch_tpu/_plugin.py).
    if (const char* flags = std::getenv("XLA_FLAGS")) out << ";xla_flags=" << flags;
    out << ";quick_compile=" << quick_compile_limit();
    return out.str();
  }();
  return key;
}

void put_u64(std::string& out, uint64_t value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

bool get_u64(const std::string& in, size_t& offset, uint64_t* value) {
  if (offset + sizeof(uint64_t) > in.size()) return false;
  std::memcpy(value, in.data() + offset, sizeof(uint64_t));
  offset += sizeof(uint64_t);
  return true;
}

// The payload of a valid entry for `key`, or an empty string and a reason.
std::string read_entry(const std::filesystem::path& path, const std::string& key,
                       std::string* problem) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return "";
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  size_t offset = sizeof(kMagic);
  uint64_t key_size = 0, payload_size = 0, checksum = 0;
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0 ||
      !get_u64(bytes, offset, &key_size) || offset + key_size > bytes.size()) {
    *problem = "not a torch_tpu cache entry or truncated";
    return "";
  }
  if (bytes.compare(offset, key_size, key) != 0 || key_size != key.size()) {
    *problem = "written for another module, plugin or version";
    return "";
  }
  offset += key_size;
  if (!get_u64(bytes, offset, &payload_size) || !get_u64(bytes, offset, &checksum) ||
      offset + payload_size != bytes.size()) {
    *problem = "truncated";
    return "";
  }
  std::string payload = bytes.substr(offset);
  if (fnv1a(payload, 1) != checksum) {
    *problem = "corrupted (checksum mismatch)";
    return "";
  }
  return payload;
}

// Writes to a private temporary file, then renames: readers see the old entry or the new one,
// never a torn one, however many processes write at once. Returns the entry's bytes, 0 where it
// could not be written.
size_t write_entry(const std::filesystem::path& path, const std::string& key,
                   const std::string& payload) {
  std::string bytes(kMagic, sizeof(kMagic));
  put_u64(bytes, key.size());
  bytes += key;
  put_u64(bytes, payload.size());
  put_u64(bytes, fnv1a(payload, 1));
  bytes += payload;
  std::error_code error;
  std::filesystem::create_directories(path.parent_path(), error);
  std::random_device random;
  auto temporary = path;
  temporary += ".tmp." + std::to_string(getpid()) + "." + std::to_string(random());
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    if (!file) return 0;  // an unwritable cache only costs compile time
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!file) {
      std::filesystem::remove(temporary, error);
      return 0;
    }
  }
  std::filesystem::rename(temporary, path, error);
  if (!error) return bytes.size();
  std::filesystem::remove(temporary, error);
  return 0;
}

// TORCH_TPU_CACHE_MAX_BYTES (default 4 GiB; 0: no bound): the folder's entries are kept under
// it, the least recently used (a hit touches its entry) removed first, down to nine tenths, so
// that eager executables of every shape a process meets do not fill the disk.
int64_t cache_max_bytes() {
  static const auto limit = static_cast<int64_t>(
      count_setting("TORCH_TPU_CACHE_MAX_BYTES", size_t{4} << 30, /*at_least=*/0));
  return limit;
}

// Removes the least recently used entries of `directory` until they take at most nine tenths
// of `limit`, if they take more than `limit`; returns the bytes the entries then take.
int64_t trim(const std::filesystem::path& directory, int64_t limit) {
  struct Entry {
    std::filesystem::file_time_type used;
    int64_t bytes;
    std::filesystem::path path;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code error;
  for (const auto& item : std::filesystem::directory_iterator(directory, error)) {
    if (item.path().extension() != ".exe") continue;  // not other processes' temporary files
    std::error_code stat_error;
    const auto bytes = static_cast<int64_t>(item.file_size(stat_error));
    const auto used = item.last_write_time(stat_error);
    if (stat_error) continue;  // removed meanwhile by another process
    entries.push_back({used, bytes, item.path()});
    total += bytes;
  }
  if (total <= limit) return total;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& entry : entries) {
    if (total <= limit / 10 * 9) break;
    std::error_code remove_error;
    if (std::filesystem::remove(entry.path, remove_error)) total -= entry.bytes;
  }
  return total;
}

// Counts a written entry; the folder is listed at the first write and again whenever the
// count passes the bound (other processes' writes are seen then).
void note_written(const std::filesystem::path& directory, int64_t bytes) {
  const int64_t limit = cache_max_bytes();
  if (limit <= 0) return;
  static std::mutex mutex;
  static int64_t counted = -1;
  std::lock_guard<std::mutex> lock(mutex);
  if (counted < 0 || (counted += bytes) > limit) counted = trim(directory, limit);
}

// Read at every compile (a compile costs far more), so that it can be turned on mid-run.
bool compile_log_enabled() {
  const char* setting = std::getenv("TORCH_TPU_LOG_COMPILES");
  return setting != nullptr && std::string(setting) == "1";
}

// TORCH_TPU_LOG_COMPILES=1: one stderr line per compile, naming the module, its time and its
// parameter types, so that a recompile storm (a shape new at every step) shows which shapes
// cause it and what it costs.
void log_compile(const std::string& module, const std::string& label, double milliseconds,
                 bool quick) {
  auto text_between = [&module](const std::string& open, const std::string& close) {
    const size_t start = module.find(open);
    if (start == std::string::npos) return std::string();
    const size_t from = start + open.size();
    return module.substr(from, module.find(close, from) - from);
  };
  const std::string name = label.empty() ? text_between("module @", " ") : label;
  std::fprintf(stderr, "torch_tpu: compiled %s in %.0f ms%s; parameters (%s)\n", name.c_str(),
               milliseconds, quick ? " (quick)" : "", text_between("@main(", ") ->").c_str());
}

// The element count of the largest tensor type the module's text names (the most there is
// for one with a dynamic dimension: its size is not known here).
int64_t largest_tensor_elements(const std::string& module) {
  int64_t largest = 0;
  for (size_t at = module.find("tensor<"); at != std::string::npos;
       at = module.find("tensor<", at + 7)) {
    int64_t elements = 1;
    const char* p = module.c_str() + at + 7;
    while (true) {
      if (*p == '?') return std::numeric_limits<int64_t>::max();
      char* end = nullptr;
      const long long dim = std::strtoll(p, &end, 10);
      if (end == p || *end != 'x') break;  // the element type follows
      elements *= dim;
      p = end + 1;
    }
    largest = std::max(largest, elements);
  }
  return largest;
}

std::unique_ptr<pjrt::Executable> compile(const std::string& module, const std::string& label) {
  metrics().compiles++;
  const auto start = std::chrono::steady_clock::now();
  const int level =
      quick_compile_limit() > 0 && largest_tensor_elements(module) <= quick_compile_limit()
          ? 0
          : pjrt::kDefaultOptimizationLevel;
  auto executable =
      Runtime::get().client().compile(module, pjrt::single_device_compile_options(level));
  if (compile_log_enabled()) {
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    log_compile(module, label, took.count(), level != pjrt::kDefaultOptimizationLevel);
  }
  return executable;
}

}  // namespace

std::string cache_directory() {
  if (const char* dir = std::getenv("TORCH_TPU_CACHE_DIR")) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/torch_tpu";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/torch_tpu";
  }
  return "";
}

namespace {
std::atomic<bool> fail_next_compile{false};
}  // namespace

void inject_compile_failure() { fail_next_compile = true; }

std::unique_ptr<pjrt::Executable> compile_with_cache(const std::string& module, bool persist,
                                                     const std::string& label) {
  if (fail_next_compile.exchange(false))
    throw pjrt::Error("injected compile failure", PJRT_Error_Code_INVALID_ARGUMENT);
  const std::string directory = persist ? cache_directory() : "";
  if (directory.empty()) return compile(module, label);
  const std::string key = environment_key() + "\n" + module;
  const std::filesystem::path path =
      std::filesystem::path(directory) / (hex(fnv1a(key, 0)) + hex(fnv1a(key, 7)) + ".exe");
  std::string problem;
  std::string payload = read_entry(path, key, &problem);
  if (!payload.empty()) {
    try {
      auto executable = Runtime::get().client().deserialize(payload);
      metrics().disk_cache_hits++;
      std::error_code error;  // marks it recently used; a failure only makes it older
      std::filesystem::last_write_time(path, std::filesystem::file_time_type::clock::now(), error);
      return executable;
    } catch (const pjrt::Error& error) {
      problem = std::string("rejected by the plugin: ") + error.what();
    }
  }
  if (!problem.empty()) {
    TORCH_WARN("torch_tpu: ignoring compile cache entry ", path.string(), " (", problem,
               "); recompiling");
  }
  auto executable = compile(module, label);
  try {
    if (const size_t written = write_entry(path, key, executable->serialize())) {
      metrics().disk_cache_writes++;
      note_written(directory, static_cast<int64_t>(written));
    }
  } catch (const pjrt::Error&) {
    // A plugin that cannot serialize just does not persist.
  }
  return executable;
}

}  // namespace torch_tpu
