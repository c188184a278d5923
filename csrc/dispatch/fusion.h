// DeferAndFuse: ops accumulate in a pending graph and run as one fused executable at the next
// materialization point (a host read, an op that cannot be deferred, the size limit, a mode
// change, synchronize). Intermediate values that no live tensor holds never reach memory.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/ivalue.h>

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "csrc/device/storage.h"
#include "csrc/dispatch/cache_entry.h"

namespace torch_tpu {

// Where a fused graph's external input came from while a compiled graph was recorded: enough
// to gather the same inputs again for a replay (see csrc/dispatch/graph_replay.h).
struct ExternalSource {
  ParamSource::Kind kind = ParamSource::Kind::Storage;
  hlo::ElementType type = hlo::ElementType::F32;
  // Storage: whose buffer was read.
  DeviceStorage* storage = nullptr;
  c10::weak_intrusive_ptr<c10::StorageImpl> storage_ref{c10::intrusive_ptr<c10::StorageImpl>()};
  // CpuScalarTensor: the tensor read.
  c10::weak_intrusive_ptr<c10::TensorImpl> tensor{c10::intrusive_ptr<c10::TensorImpl>()};
  at::Generator generator;  // RngState: the generator it drew from
  uint64_t rng_blocks = 0;
};

// One fused graph run as it happened: its executable, inputs and results.
struct FusedRun {
  int flushes = 0;  // graphs run while capturing: a replayable recording runs exactly one
  std::shared_ptr<pjrt::Executable> executable;
  int device = 0;
  std::vector<std::shared_ptr<pjrt::Buffer>> externals;
  std::vector<ExternalSource> sources;
  std::vector<DeviceStorage*> results;  // the storages that received the results, in order
  std::vector<hlo::ElementType> result_types;
  std::vector<std::string> op_names;
  std::vector<CheckedOp> check_ops;
  // (external, result) pairs: the executable may write that result into that external's buffer
  // (tf.aliasing_output) when the caller donates it.
  std::vector<std::pair<int, int>> aliases;
  // The graph as one op that a later pending graph can call (see defer_graph).
  std::shared_ptr<CacheEntry> as_op;
};

// While `run` is set, this thread's fused graphs describe themselves there (nullptr: stop).
void capture_fused_runs(FusedRun* run);

// False under TORCH_TPU_DONATE=0 (read at each call): no executable writes into its inputs.
bool donation_enabled();

// Enqueues a fused executable on `externals`; returns its first `result_count` results (the
// runtime checks' flag, if `check_ops` is not empty, follows them and is watched). `donated`
// externals' buffers may become results' memory (see Executable::execute).
std::vector<std::shared_ptr<pjrt::Buffer>> run_fused(
    const pjrt::Executable& executable, std::vector<std::shared_ptr<pjrt::Buffer>> externals,
    int device, const std::vector<std::string>& op_names, std::vector<CheckedOp> check_ops,
    size_t result_count, std::span<const int64_t> donated = {});

// Records one op; returns its outputs as execution would, their storages pending.
std::vector<c10::IValue> defer(const std::shared_ptr<CacheEntry>& entry,
                               const std::vector<c10::IValue>& args, int device);

// What a compiled graph's parameter reads when it joins the pending graph: a storage's contents
// (`tensor`, flat over the whole storage, in the parameter's dtype), or else `buffer`.
struct GraphInput {
  at::Tensor tensor;
  std::shared_ptr<pjrt::Buffer> buffer;
};

// Where a compiled graph's result goes: the storage it becomes, as `type`.
struct GraphResult {
  DeviceStorage* storage;
  hlo::ElementType type;
};

// Records a replay of a compiled graph (`graph.compiled_graph`) as one op of the pending graph,
// so that the graphs a step calls one after another (forward, backward, optimizer) and eager
// ops deferred between them run as one executable. `results` become pending values.
void defer_graph(const std::shared_ptr<CacheEntry>& graph, const std::vector<GraphInput>& inputs,
                 const std::vector<GraphResult>& results, int device);

// Makes `to` receive the pending value `from` will (as its bucket of `bucket` elements, where
// given: see dispatch/growing_buckets.h). False where `from` is not pending in the graph.
bool share_pending(const DeviceStorage& from, DeviceStorage& to, int64_t bucket = 0);

// Whether the pending graph holds a compiled graph's replay: Strict's ops that read no storage
// (a fill, a factory: autograd's seed for backward, say) join it rather than run alone.
bool compiled_graph_pending();

// Runs the pending graph, if any, and gives every live pending storage its buffer.
void materialize_pending();

// Drops every fused executable (the per-op cache is cleared by clear_cache()).
void clear_fused_cache();

// Ops in the pending graph (0 when nothing is deferred).
int64_t pending_op_count();

}  // namespace torch_tpu
