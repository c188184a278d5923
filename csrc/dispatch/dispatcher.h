// The dispatcher: runs a lowered op. It keys the op on (name, non-tensor arguments, tensor
// shapes/dtypes/layouts) — scalar values are runtime inputs, never part of the key — compiles
// on a miss, keeps executables in memory, and enqueues them without waiting.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <memory>
#include <string>

#include "csrc/dispatch/lowering.h"
#include "csrc/pjrt/buffer.h"

namespace torch_tpu {

// The boxed kernel registered for every op that has a lowering.
void lowered_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Runs `lowering` as if it were the kernel of `op` on `args` (used by kernels that need a
// device computation as one step, e.g. copy_ between tpu tensors).
std::vector<c10::IValue> run_lowering(const std::string& key_prefix, const Lowering& lowering,
                                      const c10::FunctionSchema& schema,
                                      std::vector<c10::IValue> args);

// A registered lowering by name; names starting with '@' are internal lowerings that kernels
// call through run_lowering and that are not installed as op kernels themselves.
const Lowering& find_lowering(const std::string& name);

// A new CacheEntry's id: unique in the process, it names the entry inside fused graphs.
uint64_t next_entry_id();

// The storage's current buffer, created as zeros if the storage was never written.
std::shared_ptr<pjrt::Buffer> storage_buffer(const at::Tensor& tensor);

// Blocks until every enqueued execution has finished (torch.tpu.synchronize).
void await_all_pending();

// Test hook: the next asynchronous execution reports a failure, as a device fault would.
void inject_async_fault();
bool consume_injected_fault();

// Number of executables in the in-memory cache.
int64_t cache_size();
void clear_cache();

}  // namespace torch_tpu
