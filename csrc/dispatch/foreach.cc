// torch's _foreach_* ops (optimizers' multi-tensor updates, gradient clipping's norms) have no
// device kernels of their own: their composite form runs one op per tensor, so a Strict-mode
// optimizer step ran one execution per parameter and op. Here every _foreach_ op records its
// composite form into one fused executable instead, run when the op returns.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <memory>

#include "csrc/dispatch/mode.h"
#include "csrc/dispatch/registration.h"

namespace torch_tpu {
namespace {

void foreach_in_one_executable(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // The CPU key's kernel is the same composite form as ours was (every _foreach_ op has only
  // that one): it runs the per-tensor ops, which dispatch to the device as usual. DeferAndFuse
  // fuses them with the ops around them anyway, and Debug runs ops one by one on purpose.
  const c10::DispatchKeySet composite(c10::DispatchKey::CPU);
  if (eager_mode() != EagerMode::Strict) {
    op.redispatchBoxed(composite, stack);
    return;
  }
  RecordScope scope;
  op.redispatchBoxed(composite, stack);
}

}  // namespace

void register_foreach_kernels() {
  static std::unique_ptr<torch::Library> library;
  if (library) return;
  library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                             c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (!name.name.starts_with("aten::_foreach_")) continue;
    std::string op = name.name.substr(6);
    if (!name.overload_name.empty()) op += "." + name.overload_name;
    auto handle = c10::Dispatcher::singleton().findOp(name);
    // Only the ops whose kernel for us is that composite form (all of them in torch 2.13/2.14).
    if (!handle || handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
    library->impl(op.c_str(),
                  torch::CppFunction::makeFromBoxedFunction<&foreach_in_one_executable>());
  }
}

}  // namespace torch_tpu
