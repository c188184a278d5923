#include "csrc/dispatch/fusion.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <list>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "csrc/device/runtime.h"
#include "csrc/device/storage.h"
#include "csrc/device/types.h"
#include "csrc/dispatch/disk_cache.h"
#include "csrc/dispatch/dispatcher.h"
#include "csrc/dispatch/flight_recorder.h"
#include "csrc/dispatch/host_timers.h"
#include "csrc/dispatch/metrics.h"
#include "csrc/dispatch/mode.h"
#include "csrc/dispatch/reinterpret.h"
#include "csrc/dispatch/retire.h"
#include "csrc/dispatch/run_ahead.h"
#include "csrc/dispatch/runtime_checks.h"
#include "csrc/pjrt/compile_options.h"
#include "csrc/profiler/device_trace.h"

namespace torch_tpu {
namespace {

// Cut limits. A graph is cut when its first op recurs after kRepeatMinOps ops (a compiled
// graph called as one op counts as the ops it stands for), so that the cuts of a loop fall on
// iteration boundaries and every iteration reuses one executable.
constexpr size_t kMaxOps = 4096;
constexpr size_t kRepeatMinOps = 64;

struct Input {
  bool external;  // an external buffer (index into externals) or a graph value
  int index;
};

struct RecordedOp {
  std::shared_ptr<CacheEntry> entry;
  std::vector<Input> inputs;
  int first_value;  // the op's outputs are values first_value ...
};

// A runtime check's result in the graph: one op's scalar i1 (true: its checks held), or a
// compiled graph's scalar s32 over `count` checks (-1: all held; k: its k-th failed first).
struct CheckValue {
  int value;
  int count;  // 0 for an i1
};

struct Graph {
  std::recursive_mutex mutex;
  uint64_t epoch = 1;
  int device = 0;
  std::vector<RecordedOp> ops;
  size_t weight = 0;  // the ops recorded, a compiled graph's counted one by one
  std::vector<std::shared_ptr<pjrt::Buffer>> externals;
  std::vector<std::string> external_types;
  // Each external's indices by buffer: the lookups of add_external and of donation.
  std::unordered_multimap<const pjrt::Buffer*, int> external_index;
  std::vector<ExternalSource> sources;  // where each external came from, while recording
  std::vector<std::string> value_types;
  std::vector<std::weak_ptr<PendingSlot>> slots;
  // Runtime check results and the ops that made them (a graph's: `count` of them, in order).
  std::vector<CheckValue> checks;
  std::vector<CheckedOp> check_ops;
};

// Set while the pending graph holds a compiled graph (see compiled_graph_pending()).
std::atomic<bool> holds_compiled_graph{false};

Graph& graph() {
  static Graph* instance = new Graph();  // leaked: flushing at exit races plugin teardown
  return *instance;
}

std::mutex fused_mutex;
// Least recently used first out, past max_cached_graphs() (see retire.h). Leaked on purpose (see
// the per-op cache in dispatcher.cc).
struct FusedSlot {
  std::shared_ptr<pjrt::Executable> executable;
  std::list<std::string>::iterator age;
};
auto& fused_cache = *new std::unordered_map<std::string, FusedSlot>();
auto& fused_ages = *new std::list<std::string>();  // most recently used first

// Under fused_mutex.
std::shared_ptr<pjrt::Executable> fused_find(const std::string& key) {
  auto found = fused_cache.find(key);
  if (found == fused_cache.end()) return nullptr;
  fused_ages.splice(fused_ages.begin(), fused_ages, found->second.age);
  return found->second.executable;
}

// Under fused_mutex; returns the executable it evicts, if any, to retire.
std::shared_ptr<pjrt::Executable> fused_insert(const std::string& key,
                                               std::shared_ptr<pjrt::Executable> executable) {
  if (fused_cache.count(key) != 0) return nullptr;
  fused_ages.push_front(key);
  fused_cache.emplace(key, FusedSlot{std::move(executable), fused_ages.begin()});
  if (fused_cache.size() <= max_cached_graphs() &&
      !(fused_cache.size() > 1 && mappings_near_limit())) {
    return nullptr;
  }
  auto oldest = fused_cache.find(fused_ages.back());
  std::shared_ptr<pjrt::Executable> evicted = std::move(oldest->second.executable);
  fused_cache.erase(oldest);
  fused_ages.pop_back();
  return evicted;
}

// Not deduplicated: which buffers happen to coincide (an aliased argument, an equal scalar)
// must not change the graph's key, or a loop would recompile when values repeat.
int add_external(Graph& g, std::shared_ptr<pjrt::Buffer> buffer, const std::string& type,
                 ExternalSource source) {
  // A buffer read by several ops is one parameter, so that it can be donated (see flush_locked).
  // Not while recording: there each parameter keeps the source it was read from.
  if (!recording()) {
    auto [first, last] = g.external_index.equal_range(buffer.get());
    for (auto it = first; it != last; ++it) {
      if (g.external_types[it->second] == type) return it->second;
    }
  }
  int index = static_cast<int>(g.externals.size());
  g.external_index.emplace(buffer.get(), index);
  g.externals.push_back(std::move(buffer));
  g.external_types.push_back(type);
  if (recording()) g.sources.push_back(std::move(source));
  return index;
}

// What a parameter of `entry` reads, for replaying a recorded graph (csrc/dispatch/graph_replay.h).
ExternalSource source_of(const ParamSource& param, const CacheEntry& entry,
                         const std::vector<c10::IValue>& args, int device) {
  ExternalSource source;
  source.kind = param.kind;
  source.type = param.type;
  if (param.kind == ParamSource::Kind::Storage) {
    at::Tensor tensor = tensor_of(args, param.arg, param.list_index);
    source.storage = &device_storage(tensor);
    source.storage_ref = tensor.storage().getWeakStorageImpl();
  } else if (param.kind == ParamSource::Kind::CpuScalarTensor) {
    at::Tensor tensor = tensor_of(args, param.arg, param.list_index);
    source.tensor = c10::weak_intrusive_ptr<c10::TensorImpl>(tensor.getIntrusivePtr());
  } else if (param.kind == ParamSource::Kind::RngState) {
    source.generator = param_generator(args, device);
    source.rng_blocks = entry.rng_blocks;
  }
  return source;
}

thread_local FusedRun* capture = nullptr;

std::string value_name(const Graph& g, int value) {
  // The op that produced `value` and which of its results it is.
  for (size_t k = g.ops.size(); k-- > 0;) {
    const RecordedOp& op = g.ops[k];
    if (value >= op.first_value) {
      int result = value - op.first_value;
      std::string name = "%r" + std::to_string(k);
      return op.entry->result_types.size() == 1 ? name : name + "#" + std::to_string(result);
    }
  }
  TORCH_INTERNAL_ASSERT(false, "torch_tpu: fused value ", value, " has no producer");
}

std::string comma_separated(const std::vector<std::string>& types) {
  std::string text;
  for (size_t i = 0; i < types.size(); ++i) text += (i ? ", " : "") + types[i];
  return text;
}

// The fused graph's check result: which of its runtime checks failed first (an index into
// g.check_ops), or -1 when all held. A chain of selects from the last check back to the first.
std::string first_failed_check(const Graph& g) {
  std::vector<int> first;  // each check's first index into g.check_ops
  int next = 0;
  for (const CheckValue& check : g.checks) {
    first.push_back(next);
    next += std::max(check.count, 1);
  }
  std::ostringstream text;
  text << "    %failed = stablehlo.constant dense<-1> : tensor<i32>\n";
  std::string current = "%failed";
  for (size_t k = g.checks.size(); k-- > 0;) {
    const std::string value = value_name(g, g.checks[k].value);
    text << "    %check" << k << " = stablehlo.constant dense<" << first[k] << "> : tensor<i32>\n";
    if (g.checks[k].count == 0) {
      text << "    %failed" << k << " = stablehlo.select " << value << ", " << current << ", %check"
           << k << " : tensor<i1>, tensor<i32>\n";
    } else {
      // A graph's code k >= 0 names its own k-th check: offset it by where its checks start.
      text << "    %held" << k << " = stablehlo.compare EQ, " << value
           << ", %failed : (tensor<i32>, tensor<i32>) -> tensor<i1>\n";
      text << "    %at" << k << " = stablehlo.add " << value << ", %check" << k
           << " : tensor<i32>\n";
      text << "    %failed" << k << " = stablehlo.select %held" << k << ", " << current << ", %at"
           << k << " : tensor<i1>, tensor<i32>\n";
    }
    current = "%failed" + std::to_string(k);
  }
  return text.str();
}

// An external whose buffer the result at `result` may take over (tf.aliasing_output): the
// storage that result becomes held that buffer before the graph wrote it.
struct Alias {
  int external;
  int result;
};

// The functions the graph's ops call, by name, each defined once: every op's own (private
// @op<id>) and the helpers it calls (a jax kernel's functions, a compiled graph's ops).
std::map<std::string, std::string> called_functions(const Graph& g) {
  std::map<std::string, std::string> functions;
  for (const RecordedOp& op : g.ops) {
    const std::string name = "op" + std::to_string(op.entry->id);
    if (functions.contains(name)) continue;
    std::string function = op.entry->function;
    const std::string from = "func.func public @main(";
    function.replace(function.find(from), from.size(), "func.func private @" + name + "(");
    functions.emplace(name, std::move(function));
    functions.insert(op.entry->helpers.begin(), op.entry->helpers.end());
  }
  return functions;
}

// The graph as `func.func public @main`: returns the `returned` values, then the first failed
// check (s32) if the graph has checks.
std::string main_function(const Graph& g, const std::vector<int>& returned,
                          const std::vector<Alias>& aliases) {
  std::ostringstream text;
  text << "  func.func public @main(";
  for (size_t i = 0; i < g.externals.size(); ++i) {
    text << (i ? ", " : "") << "%e" << i << ": " << g.external_types[i];
    for (const Alias& alias : aliases) {
      if (alias.external == static_cast<int>(i)) {
        text << " {tf.aliasing_output = " << alias.result << " : i32}";
      }
    }
  }
  std::vector<std::string> result_types;
  std::vector<std::string> result_names;
  for (int value : returned) {
    result_types.push_back(g.value_types[value]);
    result_names.push_back(value_name(g, value));
  }
  if (!g.checks.empty()) {
    result_types.push_back("tensor<i32>");
    result_names.push_back("%failed0");
  }
  text << ") -> (" << comma_separated(result_types) << ") {\n";
  for (size_t k = 0; k < g.ops.size(); ++k) {
    const RecordedOp& op = g.ops[k];
    const auto& results = op.entry->result_types;
    text << "    %r" << k;
    if (results.size() > 1) text << ":" << results.size();
    text << " = func.call @op" << op.entry->id << "(";
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      const Input& input = op.inputs[i];
      text << (i ? ", " : "")
           << (input.external ? "%e" + std::to_string(input.index) : value_name(g, input.index));
    }
    text << ") : (" << comma_separated(op.entry->param_types) << ") -> ("
         << comma_separated(results) << ")\n";
  }
  if (!g.checks.empty()) text << first_failed_check(g);
  text << "    return " << comma_separated(result_names);
  if (!result_names.empty()) text << " : " << comma_separated(result_types);
  text << "\n  }\n";
  return text.str();
}

std::string fused_module(const Graph& g, const std::vector<int>& returned,
                         const std::vector<Alias>& aliases) {
  return hlo::wrap_module(main_function(g, returned, aliases), called_functions(g),
                          "fused_graph_of_" + std::to_string(g.weight) + "_ops");
}

// A fused graph as the profiler names it: its size and its ops in order (the first 16).
std::string graph_label(const std::vector<std::string>& op_names) {
  constexpr size_t kListed = 16;
  std::string label = "fused graph of " + std::to_string(op_names.size()) + " ops:";
  for (size_t i = 0; i < op_names.size() && i < kListed; ++i) label += " " + op_names[i];
  if (op_names.size() > kListed) label += " ...";
  return label;
}

void reset(Graph& g) {
  ++g.epoch;
  g.ops.clear();
  g.weight = 0;
  holds_compiled_graph.store(false, std::memory_order_relaxed);
  g.externals.clear();
  g.external_types.clear();
  g.external_index.clear();
  g.sources.clear();
  g.value_types.clear();
  g.slots.clear();
  g.checks.clear();
  g.check_ops.clear();
}

// The graph as one op that later graphs can call (see defer_graph): its main, private, without
// aliasing; the ops' functions as helpers; its checks' code as its last result.
std::shared_ptr<CacheEntry> graph_as_op(const Graph& g, const std::vector<int>& returned,
                                        const std::vector<Alias>& aliases) {
  auto op = std::make_shared<CacheEntry>();
  op->id = next_entry_id();
  op->compiled_graph = true;
  op->op_count = g.weight;
  op->function = main_function(g, returned, {});
  op->helpers = called_functions(g);
  op->param_types = g.external_types;
  for (int value : returned) op->result_types.push_back(g.value_types[value]);
  if (!g.checks.empty()) op->result_types.push_back("tensor<i32>");
  op->graph_checks = g.check_ops;
  for (const Alias& alias : aliases) op->aliases.emplace_back(alias.external, alias.result);
  const RecordedOp& first = g.ops.front();
  const RecordedOp& last = g.ops.back();
  op->op_name = "compiled graph of " + std::to_string(g.weight) + " ops (" + first.entry->op_name +
                " ... " + last.entry->op_name + ")";
  return op;
}

// Gives each live slot's storage its result, unless the storage was written since.
void assign_results(const std::vector<std::shared_ptr<PendingSlot>>& live,
                    std::vector<std::shared_ptr<pjrt::Buffer>> results) {
  std::lock_guard<std::mutex> lock(pending_slots_mutex());
  for (size_t i = 0; i < live.size(); ++i) {
    const auto& slot = live[i];
    if (slot->owner == nullptr || slot->owner->contents().pending != slot) continue;
    if (slot->bucket > 0) {
      slot->owner->assign_bucket(std::move(results[i]), slot->type);
    } else {
      slot->owner->assign(std::move(results[i]), slot->type);
    }
  }
}

// A pending graph that is one compiled graph and nothing else runs that graph's own
// executable: a graph that nothing joined costs no compile of its own.
void run_graph_alone(Graph& g, const std::vector<std::shared_ptr<PendingSlot>>& live) {
  const RecordedOp op = g.ops.front();
  const CacheEntry& entry = *op.entry;
  std::vector<std::shared_ptr<pjrt::Buffer>> inputs;
  inputs.reserve(op.inputs.size());
  for (const Input& input : op.inputs) inputs.push_back(g.externals[input.index]);
  // Donated where the parameter is passed once and nothing else holds its buffer (the graph's
  // externals and `inputs` aside).
  std::vector<int64_t> donated;
  for (const auto& [param, result] : entry.aliases) {
    const int external = op.inputs[param].index;
    auto same = [external](const Input& input) { return input.index == external; };
    if (std::count_if(op.inputs.begin(), op.inputs.end(), same) == 1 &&
        pjrt::held_only_by(inputs[param], 2)) {
      donated.push_back(param);
    }
  }
  const int device = g.device;
  reset(g);
  if (flight::enabled()) {
    flight::record(flight::Kind::Execution, entry.op_name, EagerMode::DeferAndFuse, device,
                   entry.key_hash);
  }
  metrics().cache_hits++;
  metrics().fused_ops += static_cast<int64_t>(entry.op_count) - 1;  // run_fused counts one
  const size_t result_count = entry.result_types.size() - (entry.graph_checks.empty() ? 0 : 1);
  std::vector<std::shared_ptr<pjrt::Buffer>> results =
      run_fused(*entry.executable, std::move(inputs), device, {entry.op_name}, entry.graph_checks,
                result_count, donated);
  std::vector<std::shared_ptr<pjrt::Buffer>> live_results;
  for (const auto& slot : live) live_results.push_back(results[slot->value - op.first_value]);
  assign_results(live, std::move(live_results));
}

// The slots of the storages that still hold the graph's values: the graph's results.
std::vector<std::shared_ptr<PendingSlot>> live_slots(const Graph& g) {
  std::vector<std::shared_ptr<PendingSlot>> live;
  std::lock_guard<std::mutex> lock(pending_slots_mutex());
  for (const auto& weak : g.slots) {
    auto slot = weak.lock();
    if (slot && slot->owner != nullptr && slot->epoch == g.epoch &&
        slot->owner->contents().pending == slot) {
      live.push_back(std::move(slot));
    }
  }
  return live;
}

void flush_locked(Graph& g) {
  if (g.ops.empty()) return;
  HostPhaseTimer timer(HostPhase::Flush);
  // Values some live storage still holds are the graph's results; the rest stay on chip.
  const std::vector<std::shared_ptr<PendingSlot>> live = live_slots(g);
  if (g.ops.size() == 1 && g.ops.front().entry->compiled_graph) {
    run_graph_alone(g, live);
    return;
  }
  std::vector<int> returned;
  std::string key = "dev" + std::to_string(g.device) + ";";
  for (const RecordedOp& op : g.ops) {
    key += std::to_string(op.entry->id) + "(";
    for (const Input& input : op.inputs) {
      key += (input.external ? "x" : "v") + std::to_string(input.index) + ",";
    }
    key += ")";
  }
  key += "->";
  for (const auto& slot : live) {
    returned.push_back(slot->value);
    key += std::to_string(slot->value) + ",";
  }
  // An in-place write (a KV cache update, an optimizer step) makes a storage's new value from
  // its old buffer: aliasing the two lets XLA update the buffer instead of copying all of it.
  std::vector<Alias> aliases;
  for (size_t i = 0; i < live.size(); ++i) {
    std::shared_ptr<pjrt::Buffer> old = live[i]->replaces.lock();
    if (!old) continue;
    // A buffer passed twice cannot be donated, nor taken over by two results (storages that
    // shared it); the types must match for the memory to be reused.
    if (g.external_index.count(old.get()) != 1) continue;
    const int found = g.external_index.find(old.get())->second;
    auto taken = [&](const Alias& alias) { return alias.external == found; };
    if (g.external_types[found] != g.value_types[live[i]->value] ||
        std::any_of(aliases.begin(), aliases.end(), taken)) {
      continue;
    }
    aliases.push_back({found, static_cast<int>(i)});
    key += "a" + std::to_string(found) + ":" + std::to_string(i);
  }

  std::shared_ptr<pjrt::Executable> executable;
  {
    std::lock_guard<std::mutex> lock(fused_mutex);
    executable = fused_find(key);
  }
  const size_t op_count = g.ops.size();
  std::string module;
  if (!executable) module = fused_module(g, returned, aliases);
  std::shared_ptr<CacheEntry> as_op;
  if (capture != nullptr) as_op = graph_as_op(g, returned, aliases);
  // The graph's device, not a live slot's owner's: another thread (autograd's, dropping its
  // last references) may destroy that storage once pending_slots_mutex is released.
  const int device = g.device;
  auto externals = std::move(g.externals);
  // Donated only where the graph holds the last reference besides executions in flight: no
  // storage and no recording of a compiled graph (which replays with its own inputs) reads it.
  std::vector<int64_t> donated;
  for (const Alias& alias : aliases) {
    if (capture == nullptr && pjrt::held_only_by(externals[alias.external], 1)) {
      donated.push_back(alias.external);
    }
  }
  std::vector<std::string> op_names;
  for (const RecordedOp& op : g.ops) op_names.push_back(op.entry->op_name);
  // run_fused counts one op per name; a compiled graph's name stands for all its ops.
  metrics().fused_ops += static_cast<int64_t>(g.weight - g.ops.size());
  std::vector<CheckedOp> check_ops = std::move(g.check_ops);
  std::vector<ExternalSource> sources = std::move(g.sources);
  reset(g);  // whatever happens next, the graph is spent
  if (flight::enabled()) {
    flight::record(flight::Kind::Execution, graph_label(op_names), EagerMode::DeferAndFuse, device,
                   flight::hash_key(key));
  }

  if (executable) {
    metrics().cache_hits++;
  } else {
    metrics().cache_misses++;
    if (std::getenv("TORCH_TPU_DUMP_HLO") != nullptr) {
      std::fprintf(stderr, "torch_tpu: fused module of %zu ops\n%s\n", op_count, module.c_str());
    }
    try {
      const std::string label = graph_label(op_names);
      profiler::HostSpan span("compile " + label);
      executable = std::shared_ptr<pjrt::Executable>(compile_with_cache(module, true, label));
    } catch (const pjrt::Error& error) {
      const std::string message = "torch_tpu: compiling a fused graph of " +
                                  std::to_string(op_count) + " ops (" + op_names.front() + " ... " +
                                  op_names.back() + ") failed: " + error.what();
      TORCH_CHECK(false, message, flight::dump_note(message));
    }
    std::shared_ptr<pjrt::Executable> evicted;
    {
      std::lock_guard<std::mutex> lock(fused_mutex);
      evicted = fused_insert(key, executable);
    }
    retire(std::move(evicted));
  }
  if (capture != nullptr) {
    ++capture->flushes;
    capture->executable = executable;
    capture->device = device;
    capture->externals = externals;
    capture->sources = std::move(sources);
    capture->results.clear();
    capture->result_types.clear();
    for (const auto& slot : live) {
      capture->results.push_back(slot->owner);
      capture->result_types.push_back(slot->type);
    }
    capture->op_names = op_names;
    capture->check_ops = check_ops;
    capture->aliases.clear();
    for (const Alias& alias : aliases) capture->aliases.emplace_back(alias.external, alias.result);
    as_op->executable = executable;
    capture->as_op = std::move(as_op);
  }
  assign_results(live, run_fused(*executable, std::move(externals), device, op_names,
                                 std::move(check_ops), live.size(), donated));
}

// Whether the pending graph must run before `entry` joins it.
bool must_cut(const Graph& g, const CacheEntry& entry, int device) {
  if (g.ops.empty()) return false;
  // A compiled graph (recording) is cut only by the size limit: it should be one executable.
  // A compiled graph that recurs starts the loop's next iteration (the next training step).
  return g.device != device || g.ops.size() >= kMaxOps ||
         (!recording() && g.ops[0].entry.get() == &entry &&
          (entry.compiled_graph || g.weight >= kRepeatMinOps));
}

// Makes `storage` receive graph value `value` when the graph runs (as its bucket, of `bucket`
// elements, where given).
void assign_pending(Graph& g, DeviceStorage& storage, int value, hlo::ElementType type,
                    int64_t bucket = 0) {
  auto slot = std::make_shared<PendingSlot>();
  slot->epoch = g.epoch;
  slot->value = value;
  slot->type = type;
  slot->owner = &storage;
  slot->bucket = bucket;
  DeviceStorage::Contents previous = storage.contents();
  slot->replaces = previous.pending && previous.pending->epoch == g.epoch
                       ? previous.pending->replaces
                       : std::weak_ptr<pjrt::Buffer>(previous.buffer);
  storage.assign_pending(slot);
  g.slots.push_back(slot);
}

// Makes `storage`, where it is pending in `g`, readable as `type`: read through another dtype,
// its value is rewritten in the graph by a reinterpret op (see reinterpret.h) and becomes the
// storage's pending value; pending as a bucket (a longer value than the storage, read through a
// view of its first elements), the graph is flushed. Returns whether it flushed.
bool flush_unless_readable_as(Graph& g, DeviceStorage& storage, hlo::ElementType type) {
  if (g.ops.empty()) return false;
  DeviceStorage::Contents contents = storage.contents();
  if (!contents.pending || contents.pending->epoch != g.epoch) return false;
  if (contents.pending->bucket > 0) {
    flush_locked(g);
    return true;
  }
  if (contents.type == type) return false;
  auto entry = std::const_pointer_cast<CacheEntry>(
      reinterpret_entry(contents.type, type, static_cast<int64_t>(storage.nbytes())));
  RecordedOp op{entry, {{false, contents.pending->value}}, static_cast<int>(g.value_types.size())};
  g.value_types.push_back(entry->result_types.front());
  g.ops.push_back(std::move(op));
  ++g.weight;
  assign_pending(g, storage, g.ops.back().first_value, type);
  return false;
}

}  // namespace

std::vector<c10::IValue> defer(const std::shared_ptr<CacheEntry>& entry,
                               const std::vector<c10::IValue>& args, int device) {
  HostPhaseTimer timer(HostPhase::Record);
  Graph& g = graph();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  if (must_cut(g, *entry, device)) flush_locked(g);
  // A storage pending in this graph but read through another dtype is realized first.
  for (const ParamSource& param : entry->params) {
    if (param.kind == ParamSource::Kind::Storage &&
        flush_unless_readable_as(g, device_storage(tensor_of(args, param.arg, param.list_index)),
                                 param.type)) {
      break;
    }
  }
  g.device = device;
  RecordedOp op{entry, {}, static_cast<int>(g.value_types.size())};
  for (size_t p = 0; p < entry->params.size(); ++p) {
    const ParamSource& param = entry->params[p];
    auto source = [&] {
      return recording() ? source_of(param, *entry, args, device) : ExternalSource{};
    };
    if (param.kind != ParamSource::Kind::Storage) {
      op.inputs.push_back({true, add_external(g, value_param_buffer(param, *entry, args, device),
                                              entry->param_types[p], source())});
      continue;
    }
    at::Tensor tensor = tensor_of(args, param.arg, param.list_index);
    DeviceStorage::Contents contents = device_storage(tensor).contents();
    if (contents.pending && contents.pending->epoch == g.epoch) {
      TORCH_INTERNAL_ASSERT(contents.type == param.type, "a pending storage read as another dtype");
      op.inputs.push_back({false, contents.pending->value});
    } else {
      op.inputs.push_back(
          {true, add_external(g, storage_buffer(tensor), entry->param_types[p], source())});
    }
  }
  for (const std::string& type : entry->result_types) g.value_types.push_back(type);
  if (entry->runtime_check) {
    g.checks.push_back({op.first_value + static_cast<int>(entry->outputs.size()), 0});
    g.check_ops.push_back(*entry->runtime_check);
  }
  g.ops.push_back(op);
  ++g.weight;

  std::vector<c10::IValue> outputs;
  for (size_t i = 0; i < entry->outputs.size(); ++i) {
    const OutputPlan& plan = entry->outputs[i];
    at::Tensor target =
        plan.new_tensor ? new_output_tensor(plan, device) : args[plan.arg].toTensor();
    assign_pending(g, device_storage(target), op.first_value + static_cast<int>(i),
                   plan.buffer_type);
    outputs.emplace_back(plan.new_tensor ? c10::IValue(target) : args[plan.arg]);
  }
  return outputs;
}

void defer_graph(const std::shared_ptr<CacheEntry>& graph_op, const std::vector<GraphInput>& inputs,
                 const std::vector<GraphResult>& results, int device) {
  Graph& g = graph();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  if (must_cut(g, *graph_op, device)) flush_locked(g);
  for (const GraphInput& input : inputs) {
    if (input.tensor.defined() &&
        flush_unless_readable_as(g, device_storage(input.tensor),
                                 to_element_type(input.tensor.scalar_type()))) {
      break;
    }
  }
  g.device = device;
  RecordedOp op{graph_op, {}, static_cast<int>(g.value_types.size())};
  op.inputs.reserve(inputs.size());
  for (size_t p = 0; p < inputs.size(); ++p) {
    const GraphInput& input = inputs[p];
    if (input.tensor.defined()) {
      DeviceStorage::Contents contents = device_storage(input.tensor).contents();
      if (contents.pending && contents.pending->epoch == g.epoch) {
        op.inputs.push_back({false, contents.pending->value});
        continue;
      }
    }
    op.inputs.push_back(
        {true, add_external(g, input.tensor.defined() ? storage_buffer(input.tensor) : input.buffer,
                            graph_op->param_types[p], {})});
  }
  for (const std::string& type : graph_op->result_types) g.value_types.push_back(type);
  if (!graph_op->graph_checks.empty()) {
    g.checks.push_back({static_cast<int>(g.value_types.size()) - 1,
                        static_cast<int>(graph_op->graph_checks.size())});
    g.check_ops.insert(g.check_ops.end(), graph_op->graph_checks.begin(),
                       graph_op->graph_checks.end());
  }
  g.ops.push_back(std::move(op));
  g.weight += graph_op->op_count;
  holds_compiled_graph.store(true, std::memory_order_relaxed);
  const int first_value = g.ops.back().first_value;
  for (size_t i = 0; i < results.size(); ++i) {
    assign_pending(g, *results[i].storage, first_value + static_cast<int>(i), results[i].type);
  }
}

bool donation_enabled() {
  // Read at each call, so that a measurement can compare both in one process.
  const char* donate = std::getenv("TORCH_TPU_DONATE");
  return donate == nullptr || std::string_view(donate) != "0";
}

std::vector<std::shared_ptr<pjrt::Buffer>> run_fused(
    const pjrt::Executable& executable, std::vector<std::shared_ptr<pjrt::Buffer>> externals,
    int device, const std::vector<std::string>& op_names, std::vector<CheckedOp> check_ops,
    size_t result_count, std::span<const int64_t> donated) {
  bound_run_ahead();
  metrics().fused_ops += static_cast<int64_t>(op_names.size());
  metrics().executions++;
  if (!donation_enabled()) donated = {};
  metrics().donated_buffers += static_cast<int64_t>(donated.size());
  std::vector<PJRT_Buffer*> raw;
  raw.reserve(externals.size());
  for (const auto& buffer : externals) raw.push_back(buffer->raw());
  for (int64_t input : donated) externals[input]->donate();
  auto timer = profiler::RunTimer::launch([&op_names] { return graph_label(op_names); }, device);
  pjrt::ExecuteResult result = executable.execute(raw, Runtime::get().device(device), donated);
  if (timer) timer->launched();
  pending_started();
  std::string label = "a fused graph (" + op_names.front() + " ... " + op_names.back() + ")";
  auto reads = std::make_shared<pjrt::InFlightReads>(std::move(externals));
  result.done.on_ready([reads = std::move(reads), label, timer](auto error) mutable {
    if (timer) timer->finished();
    reads.reset();
    if (error) record_async_error(label, error->what());
    pending_finished();
  });
  std::vector<std::shared_ptr<pjrt::Buffer>> results;
  results.reserve(result_count);
  for (size_t i = 0; i < result_count; ++i) {
    results.push_back(std::make_shared<pjrt::Buffer>(std::move(result.outputs[i])));
  }
  if (!check_ops.empty()) {
    watch_runtime_check(std::make_shared<pjrt::Buffer>(std::move(result.outputs[result_count])),
                        hlo::ElementType::S32, std::move(check_ops),
                        {results.begin(), results.end()});
  }
  return results;
}

void capture_fused_runs(FusedRun* run) { capture = run; }

bool share_pending(const DeviceStorage& from, DeviceStorage& to, int64_t bucket) {
  Graph& g = graph();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  DeviceStorage::Contents contents = from.raw_contents();
  if (!contents.pending || contents.pending->epoch != g.epoch) return false;
  assign_pending(g, to, contents.pending->value, contents.type, bucket);
  return true;
}

bool compiled_graph_pending() { return holds_compiled_graph.load(std::memory_order_relaxed); }

void materialize_pending() {
  Graph& g = graph();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  flush_locked(g);
}

void clear_fused_cache() {
  std::lock_guard<std::mutex> lock(fused_mutex);
  fused_cache.clear();
  fused_ages.clear();
}

int64_t pending_op_count() {
  Graph& g = graph();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  return static_cast<int64_t>(g.ops.size());
}

}  // namespace torch_tpu
