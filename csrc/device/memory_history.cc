#include "csrc/device/memory_history.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

namespace torch_tpu::memory_history {
namespace {

std::atomic<bool> recording{false};
std::mutex mutex;
size_t max_events = 0;
bool python_frames = true, cpp_frames = false;
auto& events = *new std::deque<Event>();                    // leaked, like the caches
auto& alive = *new std::unordered_map<uintptr_t, Event>();  // under mutex
// Whether `alive` holds anything: frees after recording stopped check it without the lock.
std::atomic<bool> any_alive{false};

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void add(Event event) {
  std::lock_guard<std::mutex> lock(mutex);
  if (event.alloc) {
    alive[event.address] = event;
  } else {
    alive.erase(event.address);
  }
  any_alive = !alive.empty();
  events.push_back(std::move(event));
  while (events.size() > max_events) events.pop_front();
}

Event make(bool alloc, const void* address, int64_t size, int device) {
  Event event{alloc, reinterpret_cast<uintptr_t>(address), size, device, now_us(), nullptr};
  if (python_frames || cpp_frames) {
    event.stack = torch::CapturedTraceback::gather(python_frames, /*script=*/false, cpp_frames);
  }
  return event;
}

}  // namespace

void record(bool enabled, size_t max_entries, bool python_stacks, bool cpp_stacks) {
  std::lock_guard<std::mutex> lock(mutex);
  if (enabled) {
    max_events = max_entries;
    python_frames = python_stacks;
    cpp_frames = cpp_stacks;
  }
  recording = enabled;
}

void on_alloc(const void* address, int64_t size, int device) {
  if (recording.load(std::memory_order_relaxed)) add(make(true, address, size, device));
}

void on_free(const void* address, int64_t size, int device) {
  if (!recording.load(std::memory_order_relaxed)) {
    // A storage recorded as allocated and freed after recording stopped is no longer alive.
    if (!any_alive.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lock(mutex);
    alive.erase(reinterpret_cast<uintptr_t>(address));
    any_alive = !alive.empty();
    return;
  }
  add(make(false, address, size, device));
}

std::pair<std::vector<Event>, std::vector<Event>> snapshot() {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<Event> live;
  for (const auto& [address, event] : alive) live.push_back(event);
  return {std::vector<Event>(events.begin(), events.end()), std::move(live)};
}

}  // namespace torch_tpu::memory_history
