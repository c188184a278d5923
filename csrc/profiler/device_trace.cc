#include "csrc/profiler/device_trace.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_map>

#include "csrc/device/runtime.h"

namespace torch_tpu::profiler {
namespace {

std::atomic<bool> active{false};
std::mutex spans_mutex;
auto& spans = *new std::vector<Span>();                          // leaked, like the caches
auto& device_free_at = *new std::unordered_map<int, int64_t>();  // under spans_mutex
thread_local std::vector<uint64_t> correlations;

int32_t this_thread() { return static_cast<int32_t>(::gettid()); }

void record(Span span) {
  std::lock_guard<std::mutex> lock(spans_mutex);
  spans.push_back(std::move(span));
}

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool collecting() { return active.load(std::memory_order_relaxed); }

void start_collecting() {
  std::lock_guard<std::mutex> lock(spans_mutex);
  spans.clear();
  device_free_at.clear();
  active = true;
}

std::vector<Span> stop_collecting() {
  await_pending();  // every launched run completes, and so records its span
  active = false;
  std::lock_guard<std::mutex> lock(spans_mutex);
  std::vector<Span> collected;
  collected.swap(spans);
  return collected;
}

void push_correlation(uint64_t id) { correlations.push_back(id); }

void pop_correlation() {
  if (!correlations.empty()) correlations.pop_back();
}

RunTimer::RunTimer(std::string name, int device) {
  span_.name = std::move(name);
  span_.device = device;
  span_.launch_start_ns = span_.start_ns = now_ns();
  span_.correlation = correlations.empty() ? 0 : correlations.back();
  span_.host_thread = this_thread();
}

void RunTimer::launched() { span_.launch_end_ns = now_ns(); }

void RunTimer::finished() {
  Span span = span_;
  span.end_ns = now_ns();
  std::lock_guard<std::mutex> lock(spans_mutex);
  // A device runs one executable at a time: this one began when the previous one ended, if
  // that was after its launch. Completions can be reported out of order (the plugin calls back
  // from its own threads): one reported after a later run's keeps its launch as its start
  // rather than collapsing to nothing.
  int64_t& free_at = device_free_at[span.device];
  if (free_at < span.end_ns) {
    span.start_ns = std::max(span.start_ns, free_at);
    free_at = span.end_ns;
  }
  spans.push_back(std::move(span));
}

HostSpan::HostSpan(std::string_view name) {
  if (!collecting()) return;
  span_ = Span{.name = std::string(name),
               .device = current_device(),
               .start_ns = now_ns(),
               .correlation = correlations.empty() ? 0 : correlations.back(),
               .on_device = false,
               .host_thread = this_thread()};
}

HostSpan::~HostSpan() {
  if (!span_) return;
  span_->end_ns = now_ns();
  record(std::move(*span_));
}

}  // namespace torch_tpu::profiler
