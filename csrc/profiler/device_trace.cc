#include "csrc/profiler/device_trace.h"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <unordered_map>

#include "csrc/device/runtime.h"
#include "csrc/pjrt/profiler.h"
#include "csrc/profiler/xspace.h"

namespace torch_tpu::profiler {
namespace {

std::atomic<bool> active{false};
std::mutex spans_mutex;
auto& spans = *new std::vector<Span>();                          // leaked, like the caches
auto& device_free_at = *new std::unordered_map<int, int64_t>();  // under spans_mutex
thread_local std::vector<uint64_t> correlations;
// The plugin's own profiler, for the length of a profile, and what it traced in the last one.
std::mutex plugin_mutex;
auto& plugin_profiler = *new std::unique_ptr<pjrt::PluginProfiler>();
auto& plugin_trace_bytes = *new std::string();
auto& plugin_profiler_outcome = *new std::string("no profile yet");

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

// A plugin profiler that fails leaves the profile with torch_tpu's own timings: say so, go on.
void start_plugin_profiler() {
  std::lock_guard<std::mutex> lock(plugin_mutex);
  plugin_trace_bytes.clear();
  plugin_profiler_outcome = "no device runtime";
  if (!Runtime::initialized()) return;
  try {
    plugin_profiler = pjrt::PluginProfiler::create(Runtime::get().client().plugin());
    if (plugin_profiler) plugin_profiler->start();
    plugin_profiler_outcome = plugin_profiler ? "running" : "the plugin has no profiler extension";
  } catch (const std::exception& error) {
    plugin_profiler.reset();
    plugin_profiler_outcome = std::string("did not start: ") + error.what();
    TORCH_WARN("torch_tpu: the PJRT plugin's profiler did not start: ", error.what());
  }
}

void stop_plugin_profiler() {
  std::lock_guard<std::mutex> lock(plugin_mutex);
  if (!plugin_profiler) return;
  try {
    plugin_profiler->stop();
    const std::string collected = plugin_profiler->collect();
    plugin_trace_bytes = without_padding(collected);
    plugin_profiler_outcome = "collected " + std::to_string(collected.size()) + " bytes, " +
                              std::to_string(plugin_trace_bytes.size()) + " of them whole fields";
  } catch (const std::exception& error) {
    plugin_profiler_outcome = std::string("trace lost: ") + error.what();
    TORCH_WARN("torch_tpu: the PJRT plugin's trace was lost: ", error.what());
  }
  plugin_profiler.reset();
}

void start_collecting() {
  start_plugin_profiler();
  std::lock_guard<std::mutex> lock(spans_mutex);
  spans.clear();
  device_free_at.clear();
  active = true;
}

std::vector<Span> stop_collecting() {
  await_pending();  // every launched run completes, and so records its span
  active = false;
  stop_plugin_profiler();
  std::vector<Span> collected;
  {
    std::lock_guard<std::mutex> lock(spans_mutex);
    collected.swap(spans);
  }
  // Every Kineto session (torch.profiler, and the autograd profiler with use_kineto=True) gets the
  // device's own timestamps where the plugin traced its runs.
  use_device_times(collected, plugin_trace());
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

const char* timing_name(Span::Timing timing) {
  switch (timing) {
    case Span::Timing::HostEstimate:
      return "host estimate (the plugin has no device trace)";
    case Span::Timing::Plugin:
      return "plugin";
    case Span::Timing::PluginByWindow:
      return "plugin (its events between launch and completion)";
    case Span::Timing::Unmatched:
      return "host estimate (not found in the plugin's device trace)";
  }
  return "?";
}

std::string plugin_profiler_status() {
  std::lock_guard<std::mutex> lock(plugin_mutex);
  return plugin_profiler_outcome;
}

std::string plugin_trace() {
  std::lock_guard<std::mutex> lock(plugin_mutex);
  return plugin_trace_bytes;
}

}  // namespace torch_tpu::profiler
