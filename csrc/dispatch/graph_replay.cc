// The runtime of compiled graphs' replays (see graph_replay.h).
#include "csrc/dispatch/graph_replay.h"

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>

#include <cstdlib>
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
#include "csrc/dispatch/metrics.h"
#include "csrc/dispatch/mode.h"

namespace torch_tpu {
namespace {

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

}  // namespace

struct ReplayPlan {
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
    // Constant: an undefined tensor (the caller keeps the value the recording returned).
    enum class Kind { Constant, Arg, View } kind = Kind::Constant;
    int arg = -1;        // Arg
    StorageRef storage;  // View: a tensor over this storage
    Geometry geometry;
  };
  std::vector<Output> outputs;
};

namespace {

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
std::optional<ReplayPlan> make_plan(const FusedRun& run, const std::vector<at::Tensor>& tensors,
                                    const std::vector<at::Tensor>& outputs,
                                    uint64_t first_new_serial, std::string& why) {
  if (run.flushes != 1 || !run.executable || run.sources.size() != run.externals.size()) {
    why = "the recording ran " + std::to_string(run.flushes) + " fused graphs, not one";
    return std::nullopt;
  }
  StorageTable table(tensors, first_new_serial);
  ReplayPlan plan;
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
  std::unordered_set<const DeviceStorage*> results(run.results.begin(), run.results.end());
  for (const at::Tensor& tensor : outputs) {
    ReplayPlan::Output output;
    if (!tensor.defined()) {  // a constant: the caller keeps its value
      plan.outputs.push_back(std::move(output));
      continue;
    }
    if (tensor.device().type() != c10::DeviceType::PrivateUse1 || !tensor.has_storage() ||
        tensor.is_conj() || tensor.is_neg()) {
      why = "an output is not a plain tpu tensor";
      return std::nullopt;
    }
    const DeviceStorage* storage = &device_storage(tensor);
    output.kind = ReplayPlan::Output::Kind::View;
    output.geometry = Geometry::of(tensor);
    if (auto arg = table.arg(storage)) {
      bool same = tensor.unsafeGetTensorImpl() == tensors[*arg].unsafeGetTensorImpl();
      output.kind = same ? ReplayPlan::Output::Kind::Arg : ReplayPlan::Output::Kind::View;
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
    ReplayPlan::Input input;
    input.type = source.type;
    switch (source.kind) {
      case ParamSource::Kind::Storage: {
        input.kind = ReplayPlan::Input::Kind::Storage;
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
        input.kind = ReplayPlan::Input::Kind::Fixed;
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
        input.kind = ReplayPlan::Input::Kind::CpuConstant;
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
        input.kind = ReplayPlan::Input::Kind::Rng;
        input.generator = source.generator;
        input.rng_blocks = source.rng_blocks;
        break;
    }
    plan.inputs.push_back(std::move(input));
  }

  for (size_t i = 0; i < run.results.size(); ++i) {
    const DeviceStorage* owner = run.results[i];
    ReplayPlan::Result result;
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
    if (plan.inputs[external].kind == ReplayPlan::Input::Kind::Storage && same_storage) {
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
GraphInput gather(const ReplayPlan& plan, const ReplayPlan::Input& input,
                  const std::vector<at::Tensor>& tensors) {
  switch (input.kind) {
    case ReplayPlan::Input::Kind::Storage:
      return {input.storage.kind == StorageRef::Kind::Arg
                  ? tensors[input.storage.index]
                  : flat_tensor(input.storage.held, input.type),
              nullptr};
    case ReplayPlan::Input::Kind::CpuConstant:
      return {{}, scalar_buffer(input.tensor.item(), input.type, plan.device)};
    case ReplayPlan::Input::Kind::Fixed:
      return {{}, input.buffer};
    case ReplayPlan::Input::Kind::Rng:
      break;
  }
  return {{}, rng_state_buffer(input.generator, input.rng_blocks, plan.device)};
}

// Enqueues the plan's executable on this call's inputs; its results become the storages'.
void run_now(const ReplayPlan& plan, const std::vector<at::Tensor>& tensors,
             const std::vector<c10::Storage>& fresh, HostLaps& laps) {
  materialize_pending();  // arguments may still be values of a pending DeferAndFuse graph
  std::vector<std::shared_ptr<pjrt::Buffer>> externals;
  externals.reserve(plan.inputs.size());
  for (const ReplayPlan::Input& input : plan.inputs) {
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
    const ReplayPlan::Result& result = plan.results[i];
    device_storage(storage_of(result.storage, tensors, fresh))
        .assign(std::move(results[i]), result.type);
  }
  laps.lap(HostPhase::ReplayLaunch);
}

// Records the plan's graph as one op of the pending graph, to run with what comes next.
void join_pending(const ReplayPlan& plan, const std::vector<at::Tensor>& tensors,
                  const std::vector<c10::Storage>& fresh, HostLaps& laps) {
  std::vector<GraphInput> inputs;
  inputs.reserve(plan.inputs.size());
  for (const ReplayPlan::Input& input : plan.inputs) inputs.push_back(gather(plan, input, tensors));
  std::vector<GraphResult> results;
  results.reserve(plan.results.size());
  for (const ReplayPlan::Result& result : plan.results) {
    results.push_back({&device_storage(storage_of(result.storage, tensors, fresh)), result.type});
  }
  metrics().joined_graphs++;
  laps.lap(HostPhase::ReplayInputs);
  defer_graph(plan.as_op, inputs, results, plan.device);
  laps.lap(HostPhase::ReplayLaunch);
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
bool only_results_changed(const ReplayPlan& plan, const std::vector<at::Tensor>& tensors,
                          const std::vector<const pjrt::Buffer*>& before) {
  std::vector<const pjrt::Buffer*> after = arg_buffers(tensors);
  std::unordered_set<const DeviceStorage*> written;
  for (const ReplayPlan::Result& result : plan.results) {
    if (result.storage.kind == StorageRef::Kind::Arg) {
      written.insert(&device_storage(tensors[result.storage.index]));
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (after[i] != before[i] && !written.contains(&device_storage(tensors[i]))) return false;
  }
  return true;
}

}  // namespace

bool replay_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("TORCH_TPU_GRAPH_REPLAY");
    return value == nullptr || std::string(value) != "0";
  }();
  return enabled;
}

std::vector<at::Tensor> replay(const ReplayPlan& plan, const std::vector<at::Tensor>& tensors,
                               HostLaps& laps) {
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
  for (const ReplayPlan::Result& result : plan.results) {
    if (result.storage.kind == StorageRef::Kind::Arg) {
      tensors[result.storage.index].unsafeGetTensorImpl()->bump_version();
    }
  }
  std::vector<at::Tensor> outputs;
  outputs.reserve(plan.outputs.size());
  for (const ReplayPlan::Output& output : plan.outputs) {
    switch (output.kind) {
      case ReplayPlan::Output::Kind::Constant:
        outputs.emplace_back();
        break;
      case ReplayPlan::Output::Kind::Arg:
        outputs.push_back(tensors[output.arg]);
        break;
      case ReplayPlan::Output::Kind::View:
        outputs.push_back(tensor_over(storage_of(output.storage, tensors, fresh), output.geometry));
        break;
    }
  }
  return outputs;
}

ReplayRecording::ReplayRecording(const std::vector<at::Tensor>& args) : args_(args) {
  materialize_pending();
  downloads_ = metrics().downloads.load();
  syncs_ = metrics().host_syncs.load();
  executions_ = metrics().executions.load();
  first_new_serial_ = DeviceStorage::next_serial();
  buffers_before_ = arg_buffers(args);
  capture_fused_runs(&run_);
}

ReplayRecording::~ReplayRecording() {
  if (capturing_) capture_fused_runs(nullptr);
}

std::shared_ptr<const ReplayPlan> ReplayRecording::finish(
    const std::optional<std::vector<at::Tensor>>& outputs, std::string& why) {
  capture_fused_runs(nullptr);
  capturing_ = false;
  if (metrics().downloads.load() != downloads_ || metrics().host_syncs.load() != syncs_) {
    why = "the graph reads a value back to the host";
    return nullptr;
  }
  if (metrics().executions.load() != executions_ + 1) {
    why = "the graph ran " + std::to_string(metrics().executions.load() - executions_) +
          " executions, not one";
    return nullptr;
  }
  if (!outputs) return nullptr;  // the caller's `why`
  std::optional<ReplayPlan> plan = make_plan(run_, args_, *outputs, first_new_serial_, why);
  if (!plan) return nullptr;
  if (!only_results_changed(*plan, args_, buffers_before_)) {
    why = "an argument's storage was swapped outside the graph's results";
    return nullptr;
  }
  return std::make_shared<const ReplayPlan>(std::move(*plan));
}

}  // namespace torch_tpu
