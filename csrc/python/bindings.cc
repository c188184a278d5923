// torch_tpu._C: the Python face of the runtime (device queries, sync, memory, metrics).
#include <ATen/core/Tensor.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <tuple>

#include "csrc/device/allocator.h"
#include "csrc/device/generator.h"
#include "csrc/device/pinned_memory.h"
#include "csrc/device/runtime.h"
#include "csrc/device/storage.h"
#include "csrc/dispatch/complex_support.h"
#include "csrc/dispatch/dispatcher.h"
#include "csrc/dispatch/fusion.h"
#include "csrc/dispatch/metrics.h"
#include "csrc/dispatch/mode.h"
#include "csrc/dispatch/registration.h"
#include "csrc/dispatch/run_ahead.h"
#include "csrc/distributed/pjrt_key_value.h"
#include "csrc/hlo/builder.h"
#include "csrc/pjrt/compile_options.h"
#include "csrc/pjrt/executable.h"
#include "csrc/profiler/device_trace.h"
#include "csrc/profiler/xspace.h"
#include "csrc/python/buckets.h"
#include "csrc/python/distributed.h"
#include "csrc/python/flight_recorder.h"
#include "csrc/python/graph_replay.h"
#include "csrc/python/kernels.h"
#include "csrc/python/memory_history.h"
#include "torch_tpu_build_info.h"

namespace py = pybind11;

namespace torch_tpu {
namespace {

pjrt::ClientOption to_client_option(const std::string& name, const py::handle& value) {
  if (py::isinstance<py::bool_>(value)) return {name, value.cast<bool>()};
  if (py::isinstance<py::int_>(value)) return {name, value.cast<int64_t>()};
  if (py::isinstance<py::float_>(value)) return {name, value.cast<float>()};
  if (py::isinstance<py::str>(value)) return {name, value.cast<std::string>()};
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value))
    return {name, value.cast<std::vector<int64_t>>()};
  throw py::type_error("torch_tpu: PJRT client option '" + name +
                       "' must be a bool, int, float, str or list of ints");
}

// `options` go to PJRT_Client_Create as they are (a multi-process client's node id and node
// count, say); `key_value` serves such a client's start-up exchange and lives as long as it.
void initialize(const std::string& plugin_path, int64_t cpu_device_count, const py::dict& options,
                std::shared_ptr<distributed::PjrtKeyValueStore> key_value, int local_rank,
                int local_world_size) {
  std::vector<pjrt::ClientOption> client_options;
  if (cpu_device_count > 0) client_options.push_back({"cpu_device_count", cpu_device_count});
  for (const auto& [name, value] : options)
    client_options.push_back(to_client_option(name.cast<std::string>(), value));
  static std::shared_ptr<distributed::PjrtKeyValueStore> kept;  // the client is never destroyed
  std::optional<pjrt::KeyValueCallbacks> callbacks;
  if (key_value) {
    kept = key_value;
    callbacks = key_value->callbacks();
  }
  try {
    py::gil_scoped_release release;  // the plugin may wait on the other processes
    Runtime::initialize(plugin_path, client_options, callbacks ? &*callbacks : nullptr,
                        LocalPlace{local_rank, local_world_size});
  } catch (const pjrt::Error& error) {
    throw std::runtime_error(std::string("torch_tpu: cannot start the PJRT plugin '") +
                             plugin_path + "': " + error.what());
  }
  register_lowered_kernels();
}

// Waits for every pending computation on `device` by waiting on the storages' buffers that
// are still being produced. PJRT has no device-wide fence, so we track live buffers.
void synchronize(const at::Tensor* only) {
  metrics().host_syncs++;
  if (only != nullptr) {
    auto buffer = device_storage(*only).contents().buffer;
    if (buffer) buffer->ready_event().await("tpu synchronize");
    return;
  }
  await_all_pending();
}

// The plugin's own view of the device's memory, where it reports one (keys "device.*").
py::dict plugin_memory_stats(int device) {
  py::dict stats;
  auto& runtime = Runtime::get();
  if (auto plugin_stats = runtime.client().memory_stats(runtime.device(device))) {
    stats["device.bytes_in_use"] = plugin_stats->bytes_in_use;
    if (plugin_stats->peak_bytes_in_use)
      stats["device.peak_bytes_in_use"] = *plugin_stats->peak_bytes_in_use;
    if (plugin_stats->bytes_limit) stats["device.bytes_limit"] = *plugin_stats->bytes_limit;
  }
  // XLA's temporaries, which no tensor holds: the largest of one run since the last reset.
  stats["executable_temp_bytes.peak"] = pjrt::largest_temp_run();
  // What the device holds, counted on the buffers themselves (all of this process's devices).
  stats["device_buffer_bytes.current"] = pjrt::device_bytes_in_use();
  stats["device_buffer_bytes.peak"] = pjrt::peak_device_bytes();
  // Of those, what tensors let go of but executions in flight still read.
  stats["retired_buffer_bytes.current"] = pjrt::retired_device_bytes();
  return stats;
}

// For bench/: µs per PJRT execute of a 4x4 f32 `op` (add or matmul) with no torch in the way,
// (enqueue only, then enqueue + wait), averaged over `iterations`.
std::pair<double, double> bench_bare_execute(const std::string& op, int iterations) {
  auto& runtime = Runtime::get();
  hlo::Builder b;
  hlo::Value x = b.parameter({4, 4}, hlo::ElementType::F32);
  hlo::Value y = b.parameter({4, 4}, hlo::ElementType::F32);
  hlo::Value out =
      op == "matmul" ? b.dot_general(x, y, {}, {}, {1}, {0}, hlo::ElementType::F32) : b.add(x, y);
  auto executable =
      runtime.client().compile(b.module({out}), pjrt::single_device_compile_options());
  std::vector<float> host(16, 1.0f);
  std::vector<int64_t> dims{4, 4};
  PJRT_Device* device = runtime.device(current_device());
  pjrt::Buffer a = runtime.client().upload(host.data(), PJRT_Buffer_Type_F32, dims, device);
  std::vector<PJRT_Buffer*> args{a.raw(), a.raw()};
  auto time = [&](bool wait) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) {
      auto result = executable->execute(args, device);
      if (wait) result.done.await();
    }
    auto stop = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::micro>(stop - start).count() / iterations;
  };
  time(true);  // warm-up
  double enqueue = time(false);
  double with_wait = time(true);
  return {enqueue, with_wait};
}

}  // namespace
}  // namespace torch_tpu

PYBIND11_MODULE(_C, m) {
  using namespace torch_tpu;
  m.doc() = "torch_tpu native runtime";
  bind_distributed(m);
  bind_flight_recorder(m);
  bind_graph_replay(m);
  bind_buckets(m);
  bind_kernels(m);
  bind_memory_history(m);
  m.def("_initialize", &initialize, py::arg("plugin_path"), py::arg("cpu_device_count") = 1,
        py::arg("options") = py::dict(), py::arg("key_value") = nullptr, py::arg("local_rank") = -1,
        py::arg("local_world_size") = 0);
  m.def("_is_initialized", &Runtime::initialized);
  // No plugin: the kernels are registered all the same, so that an op on the device raises
  // `reason` (from Runtime::get) instead of "not implemented for the tpu device".
  m.def("_set_unavailable_reason", [](std::string reason) {
    Runtime::set_unavailable_reason(std::move(reason));
    register_lowered_kernels();
  });
  m.def("_plugin_trace", [] { return py::bytes(profiler::plugin_trace()); });
  m.def("_plugin_profiler_status", &profiler::plugin_profiler_status);
  // The profiler's collection without torch.profiler (whose device lane needs torch's
  // PrivateUse1 profiler registry): for checking a plugin's own trace against our runs.
  m.def("_collect_device_spans", [] { profiler::start_collecting(); });
  m.def("_collected_device_spans", [] {
    py::gil_scoped_release release;
    auto spans = profiler::stop_collecting();
    py::gil_scoped_acquire acquire;
    py::list out;
    for (const auto& span : spans)
      out.append(py::make_tuple(span.name, span.device, span.start_ns, span.end_ns, span.on_device,
                                profiler::timing_name(span.timing)));
    return out;
  });
  m.def("_xspace_program_runs", [](const py::bytes& xspace) {
    py::list out;
    for (const auto& run : profiler::program_runs(std::string_view(xspace)))
      out.append(py::make_tuple(run.program, run.device, run.start_ns, run.end_ns, run.events));
    return out;
  });
  // The matching of runs to a plugin trace's device events on its own (tests, device_check):
  // runs (name, device, launch_start_ns, end_ns) in, (start_ns, end_ns, timing) out.
  m.def("_match_device_times",
        [](const std::vector<std::tuple<std::string, int, int64_t, int64_t>>& runs,
           const py::bytes& xspace) {
          std::vector<profiler::Span> spans;
          for (const auto& [name, device, launch_start, end] : runs)
            spans.push_back({.name = name,
                             .device = device,
                             .start_ns = launch_start,
                             .end_ns = end,
                             .launch_start_ns = launch_start,
                             .launch_end_ns = launch_start});
          profiler::use_device_times(spans, std::string_view(xspace));
          py::list out;
          for (const auto& span : spans)
            out.append(
                py::make_tuple(span.start_ns, span.end_ns, profiler::timing_name(span.timing)));
          return out;
        });
  m.def("_built_against_torch", [] { return std::string(TORCH_TPU_BUILT_AGAINST_TORCH); });
  m.def("_pjrt_header_version",
        [] { return std::to_string(PJRT_API_MAJOR) + "." + std::to_string(PJRT_API_MINOR); });
  m.def("_device_count", [] { return Runtime::initialized() ? Runtime::get().device_count() : 0; });
  // The indices of the devices this process drives (under torchrun, LOCAL_RANK's alone).
  m.def("_local_device_indices", [] {
    return Runtime::initialized() ? Runtime::get().local_indices() : std::vector<int>{};
  });
  m.def("_current_device", &current_device);
  m.def("_set_device", &set_current_device);
  m.def("_synchronize", [](int) {
    py::gil_scoped_release release;
    synchronize(nullptr);
  });
  m.def("_device_name", [](int device) { return Runtime::get().device_info(device).kind; });
  m.def("_device_properties", [](int device) {
    auto& runtime = Runtime::get();
    const auto& info = runtime.device_info(device);
    py::dict properties;
    properties["name"] = info.kind;
    properties["description"] = info.description;
    properties["platform_name"] = runtime.client().platform_name();
    properties["platform_version"] = runtime.client().platform_version();
    properties["pjrt_api_version"] = std::to_string(runtime.client().plugin().major_version()) +
                                     "." +
                                     std::to_string(runtime.client().plugin().minor_version());
    properties["plugin_path"] = runtime.plugin_path();
    properties["ffi_custom_calls"] =
        runtime.client().plugin().has_extension(PJRT_Extension_Type_FFI);
    properties["total_memory"] = device_memory_info(device).second;
    return properties;
  });
  // Where the device sits: its process and integer attributes (coords, slice_index, ...).
  m.def("_device_topology", [](int device) {
    const auto& info = Runtime::get().device_info(device);
    py::dict attributes;
    for (const auto& [name, values] : info.int_attributes) attributes[py::str(name)] = values;
    attributes["process_index"] = std::vector<int64_t>{info.process_index};
    attributes["id"] = std::vector<int64_t>{info.id};
    return attributes;
  });
  m.def("_plugin_memory_stats", &plugin_memory_stats);
  m.def("_reset_device_memory_peaks", [] {
    pjrt::reset_largest_temp_run();
    pjrt::reset_peak_device_bytes();
  });
  m.def("_empty_host_cache", &empty_pinned_memory_cache);
  m.def("_host_cache_bytes", &pinned_memory_cached_bytes);
  m.def("_metrics", [] { return metrics().snapshot(); });
  m.def("_retired_percent", &retired_percent);
  m.def("_set_retired_percent", &set_retired_percent);
  m.def("_reset_metrics", [] { metrics().reset(); });
  m.def("_in_flight", &in_flight);
  m.def("_cache_size", &cache_size);
  m.def("_clear_cache", &clear_cache);
  m.def("_lowered_ops", &lowered_op_names);
  m.def("_set_complex_survey", &set_complex_survey);
  m.def("_take_complex_survey", &take_complex_survey);
  m.def(
      "_compile",
      [](const std::string& mlir_text) {
        py::gil_scoped_release release;
        // Raises RuntimeError carrying the compiler's message on failure.
        Runtime::get().client().compile(mlir_text, pjrt::single_device_compile_options());
      },
      "Compiles a StableHLO module on the current plugin (a diagnostic; nothing is cached).");
  // Enqueues the ops DeferAndFuse holds as one executable now, without waiting for it: where a
  // program's shapes split (vLLM: a forward by token bucket, sampling by request count), each
  // part then compiles per its own shapes.
  m.def("_materialize_pending", &materialize_pending);
  m.def("_set_eager_mode", [](const std::string& name) {
    EagerMode mode = parse_eager_mode(name);
    py::gil_scoped_release release;
    set_eager_mode(mode);
  });
  m.def(
      "_run_recorded",
      [](py::function fn, py::args args) {
        RecordScope scope;
        return fn(*args);
      },
      "Calls fn(*args) recording its tpu ops into one fused executable, run on return.");
  m.def("_get_eager_mode", [] { return eager_mode_name(eager_mode()); });
  m.def("_pending_op_count", &pending_op_count);
  m.def("_inject_async_fault", &inject_async_fault,
        "Test hook: the next asynchronous execution reports a device failure.");
  m.def("_is_ready", [](const at::Tensor& tensor) {
    auto contents = device_storage(tensor).raw_contents();  // a bucket's view would wait
    if (contents.pending) return false;
    const auto& buffer = contents.buffer ? contents.buffer : contents.bucket;
    return !buffer || buffer->ready_event().is_ready();
  });
  m.def("_bench_bare_execute", [](const std::string& op, int iterations) {
    py::gil_scoped_release release;
    return bench_bare_execute(op, iterations);
  });
  m.def("_default_generator", [](int device) {
    (void)Runtime::get().device(device);
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(
        default_generator(static_cast<c10::DeviceIndex>(device))));
  });
}
