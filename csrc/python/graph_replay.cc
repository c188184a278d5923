// A compiled graph's call replays its fused executable. The first call with a given input
// signature runs the FX graph in record mode (every op dispatched and deferred into one fused
// graph) and notes what that graph read and wrote; later calls with the same signature gather
// the same inputs, run the executable once and build the outputs, without dispatching the ops
// again. Anything the plan cannot reproduce (a host read inside the graph, a CPU tensor
// argument, an op run outside the fused graph, an output the graph did not make) keeps that
// signature on the recording path.
#include "csrc/python/graph_replay.h"

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdio>
#include <cstdlib>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "csrc/device/allocator.h"
#include "csrc/device/storage.h"
#include "csrc/device/types.h"
#include "csrc/dispatch/cache_entry.h"
#include "csrc/dispatch/dispatcher.h"
#include "csrc/dispatch/fusion.h"
#include "csrc/dispatch/host_timers.h"
#include "csrc/dispatch/metrics.h"
#include "csrc/dispatch/mode.h"
#include "csrc/python/call_signature.h"

namespace py = pybind11;

namespace torch_tpu {
namespace {

constexpr size_t kMaxPlans = 8;  // signatures kept per graph, least recently used out

struct Geometry {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;

  static Geometry of(const at::Tensor& tensor) {
    return {tensor.scalar_type(), tensor.sizes().vec(), tensor.strides().vec(),
            tensor.storage_offset()};
  }
};

// Where a storage the graph touches lives on each call.
struct StorageRef {
  enum class Kind { Arg, Held, Fresh } kind = Kind::Arg;
  int index = -1;     // the argument (Arg) or the new storage (Fresh)
  c10::Storage held;  // Held: a storage that outlives calls (a constant or buffer the graph holds)
};

struct Plan {
  std::shared_ptr<pjrt::Executable> executable;
  std::shared_ptr<CacheEntry> as_op;  // the graph as one op of a pending graph (defer_graph)
  int device = 0;
  std::vector<std::string> op_names;
  std::vector<CheckedOp> check_ops;

  struct Input {
    enum class Kind { Storage, CpuConstant, Fixed, Rng } kind = Kind::Fixed;
    StorageRef storage;                    // Storage: read as `type`
    at::Tensor tensor;                     // CpuConstant
    std::shared_ptr<pjrt::Buffer> buffer;  // Fixed
    hlo::ElementType type = hlo::ElementType::F32;
    at::Generator generator;  // Rng
    uint64_t rng_blocks = 0;
  };
  std::vector<Input> inputs;

  struct Result {
    StorageRef storage;  // receives it
    hlo::ElementType type = hlo::ElementType::F32;
  };
  std::vector<Result> results;
  std::vector<size_t> fresh_nbytes;
  // Inputs whose buffer the result written back into the same storage may take over (an
  // in-place update: an optimizer step), when nothing but that storage holds it at the call.
  std::vector<int64_t> donatable;

  struct Output {
    enum class Kind { Constant, Arg, View } kind = Kind::Constant;
    int arg = -1;        // Arg
    StorageRef storage;  // View: a tensor over this storage
    py::object constant;
    Geometry geometry;
  };
  std::vector<Output> outputs;
  bool tuple = true;
};

bool same_type(const at::Tensor& tensor, hlo::ElementType type) {
  return to_element_type(tensor.scalar_type()) == type;
}

// Sorts the storages a recording touched into arguments', ones that outlive calls (made before
// the call, held by the graph or a module) and ones the call made.
class StorageTable {
 public:
  StorageTable(const std::vector<at::Tensor>& tensors, uint64_t first_new_serial)
      : first_new_serial_(first_new_serial) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].defined()) args_.emplace(&device_storage(tensors[i]), static_cast<int>(i));
    }
  }

  std::optional<int> arg(const DeviceStorage* storage) const {
    auto found = args_.find(storage);
    if (found == args_.end()) return std::nullopt;
    return found->second;
  }
  bool made_by_the_call(const DeviceStorage& storage) const {
    return storage.serial() >= first_new_serial_;
  }
  // The fresh storage index of `storage` (a result the call made), numbering it on first use.
  int fresh(const DeviceStorage* storage, size_t nbytes) {
    auto [found, inserted] = fresh_.emplace(storage, static_cast<int>(fresh_nbytes_.size()));
    if (inserted) fresh_nbytes_.push_back(nbytes);
    return found->second;
  }
  std::optional<int> known_fresh(const DeviceStorage* storage) const {
    auto found = fresh_.find(storage);
    if (found == fresh_.end()) return std::nullopt;
    return found->second;
  }
  std::vector<size_t> fresh_nbytes() const { return fresh_nbytes_; }

 private:
  uint64_t first_new_serial_;
  std::unordered_map<const DeviceStorage*, int> args_;
  std::unordered_map<const DeviceStorage*, int> fresh_;
  std::vector<size_t> fresh_nbytes_;
};

// The plan for replaying `run`, or nullopt when the recording did something it cannot repeat.
std::optional<Plan> make_plan(const FusedRun& run, const std::vector<at::Tensor>& tensors,
                              const py::object& out, uint64_t first_new_serial, std::string& why) {
  if (run.flushes != 1 || !run.executable || run.sources.size() != run.externals.size()) {
    why = "the recording ran " + std::to_string(run.flushes) + " fused graphs, not one";
    return std::nullopt;
  }
  StorageTable table(tensors, first_new_serial);
  Plan plan;
  plan.executable = run.executable;
  plan.as_op = run.as_op;
  plan.device = run.device;
  plan.op_names = run.op_names;
  plan.check_ops = run.check_ops;

  // Storages that outlive calls, by the DeviceStorage they own.
  std::unordered_map<const DeviceStorage*, c10::Storage> held;
  auto hold = [&](const c10::Storage& storage) {
    held.emplace(&device_storage(storage), storage);
    return StorageRef{StorageRef::Kind::Held, -1, storage};
  };

  // Outputs first: they name the storages the call made and hands back.
  py::sequence items = py::reinterpret_borrow<py::sequence>(out);
  plan.tuple = py::isinstance<py::tuple>(out);
  std::unordered_set<const DeviceStorage*> results(run.results.begin(), run.results.end());
  for (const py::handle item : items) {
    Plan::Output output;
    PyObject* object = item.ptr();
    if (object == Py_None || PyBool_Check(object) || PyLong_Check(object) ||
        PyFloat_Check(object)) {
      output.constant = py::reinterpret_borrow<py::object>(item);
      plan.outputs.push_back(std::move(output));
      continue;
    }
    if (!THPVariable_Check(object)) {
      why = "an output is neither a tensor nor a constant";
      return std::nullopt;
    }
    const at::Tensor& tensor = THPVariable_Unpack(object);
    if (tensor.device().type() != c10::DeviceType::PrivateUse1 || !tensor.has_storage() ||
        tensor.is_conj() || tensor.is_neg()) {
      why = "an output is not a plain tpu tensor";
      return std::nullopt;
    }
    const DeviceStorage* storage = &device_storage(tensor);
    output.kind = Plan::Output::Kind::View;
    output.geometry = Geometry::of(tensor);
    if (auto arg = table.arg(storage)) {
      bool same = tensor.unsafeGetTensorImpl() == tensors[*arg].unsafeGetTensorImpl();
      output.kind = same ? Plan::Output::Kind::Arg : Plan::Output::Kind::View;
      output.arg = *arg;
      output.storage = {StorageRef::Kind::Arg, *arg, {}};
    } else if (!table.made_by_the_call(*storage)) {
      output.storage = hold(tensor.storage());
    } else if (results.contains(storage)) {
      output.storage = {
          StorageRef::Kind::Fresh, table.fresh(storage, tensor.storage().nbytes()), {}};
    } else {
      why = "an output was made on the side of the fused graph (an empty, an upload)";
      return std::nullopt;
    }
    plan.outputs.push_back(std::move(output));
  }

  for (size_t i = 0; i < run.sources.size(); ++i) {
    const ExternalSource& source = run.sources[i];
    Plan::Input input;
    input.type = source.type;
    switch (source.kind) {
      case ParamSource::Kind::Storage: {
        input.kind = Plan::Input::Kind::Storage;
        if (auto arg = table.arg(source.storage)) {
          if (!same_type(tensors[*arg], source.type)) {
            why = "an argument is read through another dtype";
            return std::nullopt;
          }
          input.storage = {StorageRef::Kind::Arg, *arg, {}};
          break;
        }
        c10::intrusive_ptr<c10::StorageImpl> impl = source.storage_ref.lock();
        if (impl && !table.made_by_the_call(*source.storage)) {
          input.storage = hold(c10::Storage(std::move(impl)));
          break;
        }
        // Made by the call and read before the graph wrote it (an out= target from an empty)
        // or filled from a constant: the recorded buffer holds what every call would read.
        input.kind = Plan::Input::Kind::Fixed;
        input.buffer = run.externals[i];
        break;
      }
      case ParamSource::Kind::CpuScalarTensor: {
        // A Python number wrapped for the op (gone with it), or a 0-d CPU constant the graph
        // holds, read again at each call. Arguments are never CPU tensors here, and a value
        // read back from the device would have been a host sync: neither changes between calls.
        auto impl = source.tensor.lock();
        if (!impl) {
          input.buffer = run.externals[i];
          break;
        }
        input.kind = Plan::Input::Kind::CpuConstant;
        input.tensor = at::Tensor(std::move(impl));
        break;
      }
      case ParamSource::Kind::Scalar:
      case ParamSource::Kind::ViewOffset:
        // Values of the graph's own constants and layouts: the same on every call with this
        // signature.
        input.buffer = run.externals[i];
        break;
      case ParamSource::Kind::RngState:
        input.kind = Plan::Input::Kind::Rng;
        input.generator = source.generator;
        input.rng_blocks = source.rng_blocks;
        break;
    }
    plan.inputs.push_back(std::move(input));
  }

  for (size_t i = 0; i < run.results.size(); ++i) {
    const DeviceStorage* owner = run.results[i];
    Plan::Result result;
    result.type = run.result_types[i];
    if (auto arg = table.arg(owner)) {
      result.storage = {StorageRef::Kind::Arg, *arg, {}};
    } else if (auto found = held.find(owner); found != held.end()) {
      result.storage = {StorageRef::Kind::Held, -1, found->second};
    } else if (auto fresh = table.known_fresh(owner)) {
      result.storage = {StorageRef::Kind::Fresh, *fresh, {}};
    } else {
      why = "a result is a storage the call neither got nor made (kept by another holder)";
      return std::nullopt;
    }
    plan.results.push_back(std::move(result));
  }
  plan.fresh_nbytes = table.fresh_nbytes();
  for (const auto& [external, result] : run.aliases) {
    const StorageRef& read = plan.inputs[external].storage;
    const StorageRef& written = plan.results[result].storage;
    const bool same_storage =
        read.kind == written.kind &&
        (read.kind == StorageRef::Kind::Arg
             ? read.index == written.index
             : read.held.unsafeGetStorageImpl() == written.held.unsafeGetStorageImpl());
    if (plan.inputs[external].kind == Plan::Input::Kind::Storage && same_storage) {
      plan.donatable.push_back(external);
    }
  }
  return plan;
}

at::Tensor tensor_over(c10::Storage storage, const Geometry& geometry) {
  at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(geometry.dtype));
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(geometry.sizes, geometry.strides,
                                                      geometry.offset);
  return tensor;
}

c10::Storage storage_of(const StorageRef& ref, const std::vector<at::Tensor>& tensors,
                        const std::vector<c10::Storage>& fresh) {
  switch (ref.kind) {
    case StorageRef::Kind::Arg:
      return tensors[ref.index].storage();
    case StorageRef::Kind::Held:
      return ref.held;
    case StorageRef::Kind::Fresh:
      break;
  }
  return fresh[ref.index];
}

// The whole storage as a flat tensor of `type`, for reading its buffer.
at::Tensor flat_tensor(const c10::Storage& storage, hlo::ElementType type) {
  c10::ScalarType dtype = to_scalar_type(type);
  auto elements = static_cast<int64_t>(storage.nbytes() / c10::elementSize(dtype));
  return tensor_over(storage, Geometry{dtype, {elements}, {1}, 0});
}

// Whether replays join the pending graph (TORCH_TPU_JOIN_GRAPHS=0: each runs on its own, read
// at each call). Debug mode runs each graph at once and waits.
bool joining_graphs() {
  const char* join = std::getenv("TORCH_TPU_JOIN_GRAPHS");
  return eager_mode() != EagerMode::Debug && (join == nullptr || std::string_view(join) != "0");
}

// What the plan's input reads on this call, as a storage (a tensor over it) or a buffer.
GraphInput gather(const Plan& plan, const Plan::Input& input,
                  const std::vector<at::Tensor>& tensors) {
  switch (input.kind) {
    case Plan::Input::Kind::Storage:
      return {input.storage.kind == StorageRef::Kind::Arg
                  ? tensors[input.storage.index]
                  : flat_tensor(input.storage.held, input.type),
              nullptr};
    case Plan::Input::Kind::CpuConstant:
      return {{}, scalar_buffer(input.tensor.item(), input.type, plan.device)};
    case Plan::Input::Kind::Fixed:
      return {{}, input.buffer};
    case Plan::Input::Kind::Rng:
      break;
  }
  return {{}, rng_state_buffer(input.generator, input.rng_blocks, plan.device)};
}

// Enqueues the plan's executable on this call's inputs; its results become the storages'.
void run_now(const Plan& plan, const std::vector<at::Tensor>& tensors,
             const std::vector<c10::Storage>& fresh, HostLaps& laps) {
  materialize_pending();  // arguments may still be values of a pending DeferAndFuse graph
  std::vector<std::shared_ptr<pjrt::Buffer>> externals;
  externals.reserve(plan.inputs.size());
  for (const Plan::Input& input : plan.inputs) {
    GraphInput gathered = gather(plan, input, tensors);
    externals.push_back(gathered.tensor.defined() ? storage_buffer(gathered.tensor)
                                                  : std::move(gathered.buffer));
  }
  // Held by its storage and this call only, besides executions in flight (no other storage
  // shares it), and the storage takes the result that replaces it.
  std::vector<int64_t> donated;
  for (int64_t input : plan.donatable) {
    if (pjrt::held_only_by(externals[input], 2)) donated.push_back(input);
  }
  metrics().cache_hits++;
  laps.lap(HostPhase::ReplayInputs);
  std::vector<std::shared_ptr<pjrt::Buffer>> results =
      run_fused(*plan.executable, std::move(externals), plan.device, plan.op_names, plan.check_ops,
                plan.results.size(), donated);
  for (size_t i = 0; i < plan.results.size(); ++i) {
    const Plan::Result& result = plan.results[i];
    device_storage(storage_of(result.storage, tensors, fresh))
        .assign(std::move(results[i]), result.type);
  }
  laps.lap(HostPhase::ReplayLaunch);
}

// Records the plan's graph as one op of the pending graph, to run with what comes next.
void join_pending(const Plan& plan, const std::vector<at::Tensor>& tensors,
                  const std::vector<c10::Storage>& fresh, HostLaps& laps) {
  std::vector<GraphInput> inputs;
  inputs.reserve(plan.inputs.size());
  for (const Plan::Input& input : plan.inputs) inputs.push_back(gather(plan, input, tensors));
  std::vector<GraphResult> results;
  results.reserve(plan.results.size());
  for (const Plan::Result& result : plan.results) {
    results.push_back({&device_storage(storage_of(result.storage, tensors, fresh)), result.type});
  }
  metrics().joined_graphs++;
  laps.lap(HostPhase::ReplayInputs);
  defer_graph(plan.as_op, inputs, results, plan.device);
  laps.lap(HostPhase::ReplayLaunch);
}

py::object replay(const Plan& plan, const std::vector<at::Tensor>& tensors, HostLaps& laps) {
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, plan.device));
  std::vector<c10::Storage> fresh;
  fresh.reserve(plan.fresh_nbytes.size());
  for (size_t nbytes : plan.fresh_nbytes) {
    fresh.emplace_back(c10::Storage::use_byte_size_t(), nbytes, device_allocator(), true);
  }
  if (plan.as_op && joining_graphs()) {
    join_pending(plan, tensors, fresh, laps);
  } else {
    run_now(plan, tensors, fresh, laps);
  }
  // Arguments written in place: their versions move on, as the in-place ops' did.
  for (const Plan::Result& result : plan.results) {
    if (result.storage.kind == StorageRef::Kind::Arg) {
      tensors[result.storage.index].unsafeGetTensorImpl()->bump_version();
    }
  }
  py::list outputs;
  for (const Plan::Output& output : plan.outputs) {
    switch (output.kind) {
      case Plan::Output::Kind::Constant:
        outputs.append(output.constant);
        break;
      case Plan::Output::Kind::Arg:
        outputs.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(tensors[output.arg])));
        break;
      case Plan::Output::Kind::View:
        outputs.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(
            tensor_over(storage_of(output.storage, tensors, fresh), output.geometry))));
        break;
    }
  }
  py::object result = plan.tuple ? py::object(py::tuple(outputs)) : py::object(std::move(outputs));
  laps.lap(HostPhase::ReplayOutputs);
  return result;
}

std::vector<const pjrt::Buffer*> arg_buffers(const std::vector<at::Tensor>& tensors) {
  std::vector<const pjrt::Buffer*> buffers;
  for (const at::Tensor& tensor : tensors) {
    buffers.push_back(tensor.defined() ? device_storage(tensor).contents().buffer.get() : nullptr);
  }
  return buffers;
}

// Whether the only arguments whose storage changed during the recording are those the fused
// graph wrote.
bool only_results_changed(const Plan& plan, const std::vector<at::Tensor>& tensors,
                          const std::vector<const pjrt::Buffer*>& before) {
  std::vector<const pjrt::Buffer*> after = arg_buffers(tensors);
  std::unordered_set<const DeviceStorage*> written;
  for (const Plan::Result& result : plan.results) {
    if (result.storage.kind == StorageRef::Kind::Arg) {
      written.insert(&device_storage(tensors[result.storage.index]));
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (after[i] != before[i] && !written.contains(&device_storage(tensors[i]))) return false;
  }
  return true;
}

bool replay_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TORCH_TPU_GRAPH_REPLAY");
    return value == nullptr || std::string(value) != "0";
  }();
  return enabled;
}

// Clears the capture target however the recording ends.
struct CaptureScope {
  explicit CaptureScope(FusedRun* run) { capture_fused_runs(run); }
  ~CaptureScope() { capture_fused_runs(nullptr); }
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;
};

class GraphReplay {
 public:
  explicit GraphReplay(py::function fn) : fn_(std::move(fn)) {}

  py::object call(const py::args& args) {
    HostPhaseTimer total(HostPhase::ReplayTotal);
    HostLaps laps;
    std::vector<at::Tensor> tensors;
    // Built in a signature the thread reuses, so that a replay allocates no key; a recording
    // copies it first (the graph it runs may call other compiled graphs).
    thread_local CallSignature signature;
    bool keyed = false;
    // Inside another recording, the graph is part of that one's fused graph.
    if (replay_enabled() && !recording()) {
      std::string why;
      keyed = call_signature(args, tensors, why, signature);
      if (!keyed) note_unreplayable({}, why);
    }
    if (keyed) {
      if (auto found = plans_.find(signature); found != plans_.end()) {
        ages_.splice(ages_.begin(), ages_, found->second.age);
        ++replays_;
        laps.lap(HostPhase::ReplaySignature);
        return replay(found->second.plan, tensors, laps);
      }
    }
    if (!keyed || unreplayable_.contains(signature)) return record(args);
    const CallSignature key = signature;

    materialize_pending();  // a graph pending from eager code is not part of this one
    // Anything that happens outside the fused graph makes the recording unrepeatable: a host
    // read, an op run on its own, an argument's storage swapped (a copy_ sharing a buffer).
    const int64_t downloads = metrics().downloads.load(), syncs = metrics().host_syncs.load(),
                  executions = metrics().executions.load();
    const uint64_t first_new_serial = DeviceStorage::next_serial();
    std::vector<const pjrt::Buffer*> buffers_before = arg_buffers(tensors);
    FusedRun run;
    py::object out;
    {
      CaptureScope capture(&run);
      RecordScope scope;
      out = fn_(*args);
    }
    std::optional<Plan> plan;
    std::string why;
    if (metrics().downloads.load() != downloads || metrics().host_syncs.load() != syncs) {
      why = "the graph reads a value back to the host";
    } else if (metrics().executions.load() != executions + 1) {
      why = "the graph ran " + std::to_string(metrics().executions.load() - executions) +
            " executions, not one";
    } else if (!py::isinstance<py::tuple>(out) && !py::isinstance<py::list>(out)) {
      why = "the graph's result is not a tuple or list";
    } else {
      plan = make_plan(run, tensors, out, first_new_serial, why);
    }
    if (plan && !only_results_changed(*plan, tensors, buffers_before)) {
      plan.reset();
      why = "an argument's storage was swapped outside the graph's results";
    }
    if (!plan) {
      note_unreplayable(key, why);
      return out;
    }
    ages_.push_front(key);
    plans_.emplace(key, Slot{std::move(*plan), ages_.begin()});
    if (plans_.size() > kMaxPlans) {
      plans_.erase(ages_.back());
      ages_.pop_back();
    }
    return out;
  }

  int64_t replays() const { return replays_; }

  std::vector<std::string> unreplayable_reasons() const {
    std::vector<std::string> reasons;
    for (const auto& [key, why] : unreplayable_) reasons.push_back(why);
    return reasons;
  }

 private:
  // Records why calls with this signature (an empty one for calls that have none) are not
  // replayed, and says so once under TORCH_TPU_DEBUG_REPLAY.
  void note_unreplayable(const CallSignature& key, const std::string& why) {
    if (!unreplayable_.emplace(key, why).second) return;
    if (std::getenv("TORCH_TPU_DEBUG_REPLAY") != nullptr) {
      std::fprintf(stderr, "torch_tpu: a compiled graph is recorded on every call: %s\n",
                   why.c_str());
    }
  }

  py::object record(const py::args& args) {
    RecordScope scope;
    return fn_(*args);
  }

  struct Slot {
    Plan plan;
    std::list<CallSignature>::iterator age;
  };
  py::function fn_;
  std::unordered_map<CallSignature, Slot, CallSignatureHash> plans_;
  std::list<CallSignature> ages_;  // most recently used first
  std::unordered_map<CallSignature, std::string, CallSignatureHash> unreplayable_;  // -> why
  int64_t replays_ = 0;
};

}  // namespace

void bind_graph_replay(py::module& m) {
  py::class_<GraphReplay>(m, "_GraphReplay",
                          "fn(*args) run as one fused executable: recorded on the first call "
                          "with an input signature, replayed on later ones")
      .def(py::init<py::function>())
      .def("__call__", &GraphReplay::call)
      .def_property_readonly("replays", &GraphReplay::replays)
      .def_property_readonly("unreplayable_reasons", &GraphReplay::unreplayable_reasons,
                             "why each signature recorded on every call is not replayed");
}

}  // namespace torch_tpu
