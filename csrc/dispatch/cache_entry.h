// One compiled op: its executable, where its parameters come from and where its outputs go.
// Shared by the Strict/Debug path (run it now) and DeferAndFuse (call it from a fused graph).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "csrc/dispatch/lowering.h"
#include "csrc/dispatch/runtime_checks.h"
#include "csrc/pjrt/buffer.h"
#include "csrc/pjrt/executable.h"

namespace torch_tpu {

// Where each executable output goes.
struct OutputPlan {
  bool new_tensor = true;  // else: replaces the storage of a mutated argument
  int arg = -1;
  hlo::Shape shape;
  // A new tensor's strides where ATen lays it out other than contiguously (the executable
  // writes its values in that memory order); empty for contiguous.
  std::vector<int64_t> strides;
  c10::ScalarType dtype = c10::ScalarType::Float;
  hlo::ElementType buffer_type = hlo::ElementType::F32;
};

struct CacheEntry {
  uint64_t id = 0;        // unique per entry; names it inside fused graphs
  std::string op_name;    // "aten::add.Tensor", for messages
  uint64_t key_hash = 0;  // its cache key, hashed, for the flight recorder
  // Compiled on first standalone use (see standalone_executable in dispatcher.cc).
  mutable std::once_flag compiled;
  mutable std::shared_ptr<pjrt::Executable> executable;
  // (parameter, result) pairs where an in-place result replaces the storage that parameter
  // reads, with the same type: a second executable, compiled when first needed, writes those
  // results into the donated parameters' buffers instead of new ones.
  std::vector<std::pair<int, int>> aliases;
  mutable std::once_flag compiled_in_place;
  mutable std::shared_ptr<pjrt::Executable> in_place_executable;
  std::string function;  // the op as `func.func public @main(...)`, for fusion
  // Functions that @main calls (a jax kernel's), by name; a fused module defines each once.
  std::map<std::string, std::string> helpers;
  std::vector<std::string> param_types, result_types;
  std::vector<ParamSource> params;
  std::vector<OutputPlan> outputs;
  // For each schema return: index into outputs (new tensor) or -(arg + 1) (a mutated argument).
  std::vector<int> returns;
  uint64_t rng_blocks = 0;
  // Set for a call whose out= arguments have the wrong shape: it only resizes them (argument,
  // new sizes, the strides ATen gives them where not contiguous), as torch does, and is keyed
  // again. No executable.
  struct Resize {
    int arg;
    hlo::Shape shape;
    std::vector<int64_t> strides;
  };
  std::vector<Resize> resizes;
  // Set when the executable has one more result after `outputs`: a scalar i1, true when every
  // runtime check of the op held (see runtime_checks.h).
  std::optional<CheckedOp> runtime_check;
  // A compiled graph called as one op of a pending graph (see defer_graph): the ops it stands
  // for, and its runtime checks, whose first failure its last result names (s32; -1: all held).
  // `executable` is the graph's own, run when nothing joined it; `aliases` are its donations.
  bool compiled_graph = false;
  size_t op_count = 1;
  std::vector<CheckedOp> graph_checks;
};

// The tensor a parameter reads: argument `arg`, or element `list_index` of a list argument.
at::Tensor tensor_of(const std::vector<c10::IValue>& args, int arg, int list_index);
// The device buffer of a non-storage parameter: a scalar, a 0-dim CPU tensor, or RNG state
// (drawing advances the generator).
std::shared_ptr<pjrt::Buffer> value_param_buffer(const ParamSource& param, const CacheEntry& entry,
                                                 const std::vector<c10::IValue>& args, int device);
// The generator an op draws from: its Generator argument, else the device's default one.
at::Generator param_generator(const std::vector<c10::IValue>& args, int device);
// The next `blocks` 128-bit blocks' generator state on the device (advances the generator).
std::shared_ptr<pjrt::Buffer> rng_state_buffer(at::Generator generator, uint64_t blocks,
                                               int device);
// A scalar's device copy as `type` (recently used values are kept).
std::shared_ptr<pjrt::Buffer> scalar_buffer(const c10::Scalar& scalar, hlo::ElementType type,
                                            int device);
// An empty tpu tensor for a fresh output.
at::Tensor new_output_tensor(const OutputPlan& plan, int device);

// An error from asynchronous device work, remembered until the next sync point.
void record_async_error(const std::string& op_name, const std::string& message);
// Raises (RuntimeError naming the op) the first asynchronous error since the last check.
void raise_async_error();

}  // namespace torch_tpu
