#include "csrc/dispatch/flight_recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <utility>

#include "csrc/dispatch/disk_cache.h"
#include "csrc/dispatch/env_setting.h"

namespace torch_tpu::flight {

namespace detail {
std::atomic<bool> recording{false};
}  // namespace detail

namespace {

// A slot's stamp is the sequence number of the entry it holds, 0 while it is being written: a
// reader that sees the same stamp before and after copying the entry copied a whole one. Readers
// take no lock, so that a signal handler can read too.
struct Slot {
  std::atomic<uint64_t> stamp{0};
  Entry entry;
};

struct Ring {
  size_t capacity = 0;
  Slot* slots = nullptr;          // leaked on purpose: a crash late in teardown still dumps
  std::atomic<uint64_t> last{0};  // the sequence number of the newest entry
  bool lines = false;             // TORCH_TPU_FLIGHT_RECORDER_LINES=1
};

Ring ring;
std::once_flag started;
std::atomic<Locator> locator{nullptr};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void copy_text(char* out, size_t size, std::string_view text) {
  const size_t n = std::min(text.size(), size - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

// Claims the next slot and fills it through `fill`, stamping it when whole.
template <typename Fill>
void write_slot(Fill&& fill) {
  const uint64_t sequence = ring.last.fetch_add(1, std::memory_order_relaxed) + 1;
  Slot& slot = ring.slots[(sequence - 1) % ring.capacity];
  slot.stamp.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  Entry& entry = slot.entry;
  entry.sequence = sequence;
  entry.time_ns = now_ns();
  entry.tensor_count = 0;
  entry.more_tensors = false;
  entry.location[0] = '\0';
  fill(entry);
  slot.stamp.store(sequence, std::memory_order_release);
}

void fill_common(Entry& entry, Kind kind, std::string_view name, EagerMode mode, int device,
                 uint64_t key_hash) {
  entry.kind = kind;
  entry.mode = mode;
  entry.device = static_cast<int16_t>(device);
  entry.key_hash = key_hash;
  if (name.ends_with('.')) name.remove_suffix(1);  // "aten::mm." is the default overload
  copy_text(entry.name, kNameChars, name);
}

// Adds a tensor's dtype and sizes; `used` counts the dims taken so far.
void add_tensor(Entry& entry, const at::Tensor& tensor, size_t& used) {
  if (!tensor.defined()) return;
  if (entry.tensor_count == kMaxTensors) {
    entry.more_tensors = true;
    return;
  }
  const uint8_t slot = entry.tensor_count++;
  entry.dtypes[slot] = static_cast<int8_t>(tensor.scalar_type());
  const c10::IntArrayRef sizes = tensor.sizes();
  if (used + sizes.size() > kMaxDims) {
    entry.ranks[slot] = kRankUnknown;
    return;
  }
  entry.ranks[slot] = static_cast<uint8_t>(sizes.size());
  std::copy(sizes.begin(), sizes.end(), entry.dims + used);
  used += sizes.size();
}

// Calls `visit` with a copy of each whole entry still held, oldest first; allocates nothing.
template <typename Visit>
void for_each_entry(Visit&& visit) {
  if (ring.capacity == 0) return;
  const uint64_t last = ring.last.load(std::memory_order_acquire);
  const uint64_t first = last > ring.capacity ? last - ring.capacity + 1 : 1;
  Entry copy;
  for (uint64_t sequence = first; sequence <= last; ++sequence) {
    const Slot& slot = ring.slots[(sequence - 1) % ring.capacity];
    if (slot.stamp.load(std::memory_order_acquire) != sequence) continue;
    std::memcpy(static_cast<void*>(&copy), &slot.entry, sizeof(Entry));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.stamp.load(std::memory_order_relaxed) != sequence) continue;  // overwritten meanwhile
    visit(copy);
  }
}

// Buffered writes to a file descriptor with no allocation (usable in a signal handler).
class Writer {
 public:
  explicit Writer(int fd) : fd_(fd) {}
  ~Writer() { flush(); }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  Writer& operator<<(std::string_view text) {
    while (!text.empty()) {
      if (used_ == sizeof(buffer_)) flush();
      const size_t n = std::min(text.size(), sizeof(buffer_) - used_);
      std::memcpy(buffer_ + used_, text.data(), n);
      used_ += n;
      text.remove_prefix(n);
    }
    return *this;
  }
  Writer& operator<<(int64_t value) { return number(value, 10); }
  Writer& hex(uint64_t value) { return number(value, 16); }

 private:
  template <typename T>
  Writer& number(T value, int base) {
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof(digits), value, base).ptr;
    return *this << std::string_view(digits, static_cast<size_t>(end - digits));
  }
  void flush() {
    for (size_t at = 0; at < used_;) {
      const ssize_t wrote = ::write(fd_, buffer_ + at, used_ - at);
      if (wrote <= 0) break;
      at += static_cast<size_t>(wrote);
    }
    used_ = 0;
  }

  int fd_;
  char buffer_[2048];
  size_t used_ = 0;
};

// torch's name for a dtype (c10's own for the rare ones); static strings, no allocation.
std::string_view dtype_name(int8_t dtype) {
  const auto type = static_cast<c10::ScalarType>(dtype);
  switch (type) {
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Double:
      return "float64";
    case c10::ScalarType::Half:
      return "float16";
    case c10::ScalarType::BFloat16:
      return "bfloat16";
    case c10::ScalarType::Long:
      return "int64";
    case c10::ScalarType::Int:
      return "int32";
    case c10::ScalarType::Short:
      return "int16";
    case c10::ScalarType::Char:
      return "int8";
    case c10::ScalarType::Byte:
      return "uint8";
    case c10::ScalarType::Bool:
      return "bool";
    case c10::ScalarType::ComplexFloat:
      return "complex64";
    case c10::ScalarType::ComplexDouble:
      return "complex128";
    default:
      return c10::toString(type);
  }
}

void write_entry(Writer& out, const Entry& entry, int64_t now) {
  out << "#" << static_cast<int64_t>(entry.sequence) << " " << kind_name(entry.kind) << " "
      << eager_mode_name(entry.mode) << " tpu:" << static_cast<int64_t>(entry.device) << " "
      << (now - entry.time_ns) / 1000 << "us-ago ";
  if (entry.key_hash != 0) out.hex(entry.key_hash) << " ";
  out << std::string_view(entry.name) << "(";
  size_t used = 0;
  for (uint8_t t = 0; t < entry.tensor_count; ++t) {
    if (t > 0) out << ", ";
    out << dtype_name(entry.dtypes[t]) << "[";
    if (entry.ranks[t] == kRankUnknown) {
      out << "...";
    } else {
      for (uint8_t d = 0; d < entry.ranks[t]; ++d)
        out << (d > 0 ? ", " : "") << entry.dims[used + d];
      used += entry.ranks[t];
    }
    out << "]";
  }
  if (entry.more_tensors) out << ", ...";
  out << ")";
  if (entry.location[0] != '\0') out << " at " << std::string_view(entry.location);
  out << "\n";
}

// Keeps the newest `keep` dumps of the folder: a loop that catches its errors must not fill the
// disk with records.
void prune_dumps(const std::string& directory, size_t keep) {
  std::error_code error;
  std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> dumps;
  for (const auto& item : std::filesystem::directory_iterator(directory, error)) {
    if (item.path().filename().string().starts_with("flight-record-"))
      dumps.emplace_back(item.last_write_time(error), item.path());
  }
  if (dumps.size() <= keep) return;
  std::sort(dumps.begin(), dumps.end());
  for (size_t i = 0; i + keep < dumps.size(); ++i) std::filesystem::remove(dumps[i].second, error);
}

}  // namespace

void start() {
  std::call_once(started, [] {
    ring.capacity = count_setting("TORCH_TPU_FLIGHT_RECORDER", 256, 0);
    const char* lines = std::getenv("TORCH_TPU_FLIGHT_RECORDER_LINES");
    ring.lines = lines != nullptr && std::string_view(lines) == "1";
    if (ring.capacity == 0) return;
    ring.slots = new Slot[ring.capacity];
    detail::recording.store(true, std::memory_order_relaxed);
  });
}

size_t capacity() { return ring.capacity; }

void set_enabled(bool on) {
  detail::recording.store(on && ring.capacity > 0, std::memory_order_relaxed);
}

void record_op(std::string_view name, const std::vector<c10::IValue>& args, EagerMode mode,
               int device, uint64_t key_hash) {
  write_slot([&](Entry& entry) {
    fill_common(entry, Kind::Op, name, mode, device, key_hash);
    // Only for ops, which hold none of our locks: the locator may wait for the GIL.
    if (ring.lines) {
      if (Locator find = locator.load(std::memory_order_relaxed))
        find(entry.location, kLocationChars);
    }
    size_t used = 0;
    for (const c10::IValue& value : args) {
      if (value.isTensor()) {
        add_tensor(entry, value.toTensor(), used);
      } else if (value.isList()) {
        for (const c10::IValue& item : value.toListRef())
          if (item.isTensor()) add_tensor(entry, item.toTensor(), used);
      }
    }
  });
}

void record(Kind kind, std::string_view name, EagerMode mode, int device, uint64_t key_hash) {
  write_slot([&](Entry& entry) { fill_common(entry, kind, name, mode, device, key_hash); });
}

std::vector<Entry> snapshot() {
  std::vector<Entry> entries;
  for_each_entry([&](const Entry& entry) { entries.push_back(entry); });
  return entries;
}

void clear() {
  if (ring.capacity == 0) return;
  for (size_t i = 0; i < ring.capacity; ++i)
    ring.slots[i].stamp.store(0, std::memory_order_relaxed);
}

uint64_t hash_key(std::string_view key) {
  uint64_t hash = 14695981039346656037ull;
  for (const char c : key) hash = (hash ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return hash == 0 ? 1 : hash;  // 0 means "no key"
}

void write_record(int fd, std::string_view reason) {
  Writer out(fd);
  const int64_t now = now_ns();
  const auto last = static_cast<int64_t>(ring.last.load(std::memory_order_acquire));
  out << "torch_tpu flight record: " << reason << "\n"
      << "process " << static_cast<int64_t>(::getpid()) << "; " << last
      << " entries dispatched, the ring keeps the last " << static_cast<int64_t>(ring.capacity)
      << "; oldest first, the newest last:\n"
      << "#sequence kind mode device age key name(dtype[sizes], ...) [at python-line]\n";
  for_each_entry([&](const Entry& entry) { write_entry(out, entry, now); });
}

std::string dump_directory() {
  std::string cache = cache_directory();
  if (!cache.empty()) return cache + "/flight_records";
  std::error_code error;
  return (std::filesystem::temp_directory_path(error) / "torch_tpu_flight_records").string();
}

std::string dump(std::string_view reason) {
  if (ring.capacity == 0) return "";
  static std::atomic<int> dumps{0};
  const std::string directory = dump_directory();
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  // Numbered with leading zeros, so that dumps of one second sort in the order written.
  char number[16];
  std::snprintf(number, sizeof(number), "%06d", ++dumps);
  const std::string path =
      directory + "/flight-record-" + std::to_string(::getpid()) + "-" + number + ".txt";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "";
  write_record(fd, reason);
  ::close(fd);
  prune_dumps(directory, 64);
  return path;
}

std::string dump_note(std::string_view reason) {
  const std::string path = dump(reason);
  return path.empty() ? "" : " (the last ops dispatched are in " + path + ")";
}

void set_locator(Locator find) { locator.store(find, std::memory_order_relaxed); }

std::string_view kind_name(Kind kind) {
  switch (kind) {
    case Kind::Op:
      return "op";
    case Kind::Execution:
      return "execution";
    case Kind::Collective:
      return "collective";
  }
  return "?";
}

}  // namespace torch_tpu::flight
