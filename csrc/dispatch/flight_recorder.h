// The flight recorder: the last N ops and executions torch_tpu dispatched, kept so that a failure
// far from its cause (a fatal signal, a device fault reported at a later sync, a failed index
// check, a collective that timed out, a compile that failed) can say what ran last. The error
// then names a file under the cache folder holding the record.
//
// TORCH_TPU_FLIGHT_RECORDER=N keeps the last N (default 256; 0: off, nothing is recorded).
// TORCH_TPU_FLIGHT_RECORDER_LINES=1 also records the Python line that called each op.
// Entries are fixed-size slots of a ring allocated once: recording copies a name and the
// tensors' sizes and allocates nothing.
#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "csrc/dispatch/mode.h"

namespace torch_tpu::flight {

enum class Kind : uint8_t { Op, Execution, Collective };

inline constexpr size_t kNameChars = 96;
inline constexpr size_t kMaxTensors = 8;
inline constexpr size_t kMaxDims = 32;  // over all of an entry's tensors
inline constexpr size_t kLocationChars = 128;
inline constexpr uint8_t kRankUnknown = 0xff;  // a tensor whose sizes did not fit

struct Entry {
  uint64_t sequence = 0;  // 1, 2, ... in the order things were dispatched
  int64_t time_ns = 0;    // system clock, since the epoch
  uint64_t key_hash = 0;  // the executable's cache key, hashed; 0 for none
  Kind kind = Kind::Op;
  EagerMode mode = EagerMode::Strict;
  int16_t device = 0;
  uint8_t tensor_count = 0;   // tensors recorded, at most kMaxTensors
  bool more_tensors = false;  // the op had more tensors than were recorded
  int8_t dtypes[kMaxTensors] = {};
  uint8_t ranks[kMaxTensors] = {};
  int64_t dims[kMaxDims] = {};
  char name[kNameChars] = {};          // truncated, NUL-terminated
  char location[kLocationChars] = {};  // "file.py:12", or empty
};

namespace detail {
extern std::atomic<bool> recording;  // a ring exists and recording is on
}  // namespace detail

// Inline, so that with the recorder off an op pays one load and one branch.
inline bool enabled() { return detail::recording.load(std::memory_order_relaxed); }

// Reads TORCH_TPU_FLIGHT_RECORDER(_LINES) and allocates the ring (once; raises for a malformed
// setting). Nothing is recorded before.
void start();
// The ring's size, fixed by start(); 0 when off.
size_t capacity();
// Turns recording on or off (for measuring its cost side by side); no-op when capacity() is 0.
void set_enabled(bool on);

// Records one op with the shapes and dtypes of its tensor arguments.
void record_op(std::string_view name, const std::vector<c10::IValue>& args, EagerMode mode,
               int device, uint64_t key_hash);
// Records an execution or a collective that has no tensor list at hand.
void record(Kind kind, std::string_view name, EagerMode mode, int device, uint64_t key_hash);

// The entries still held, oldest first.
std::vector<Entry> snapshot();
// Forgets every entry (the sequence keeps counting).
void clear();

// A cache key's 64-bit FNV-1a hash, as entries show it.
uint64_t hash_key(std::string_view key);

// Writes the record, headed by `reason`, to a new file under the cache folder's
// flight_records/ (the temporary folder where the cache is off), which keeps the newest 64;
// returns its path, or "" when the recorder is off or the file could not be written.
std::string dump(std::string_view reason);
// For error messages: " (the last ops dispatched are in PATH)", or "" where nothing was written.
std::string dump_note(std::string_view reason);

// The folder dumps go to; created on the first dump.
std::string dump_directory();
// Writes the record to `fd` without allocating, as a signal handler must (see fatal_signals.h).
void write_record(int fd, std::string_view reason);

// Fills `out` (of `size` bytes) with the calling Python line, "file.py:12"; set by the Python
// bindings, called for each op only under TORCH_TPU_FLIGHT_RECORDER_LINES=1.
using Locator = void (*)(char* out, size_t size);
void set_locator(Locator locator);

std::string_view kind_name(Kind kind);

}  // namespace torch_tpu::flight
