#include "csrc/dispatch/registration.h"

#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "csrc/device/runtime.h"
#include "csrc/dispatch/dispatcher.h"
#include "csrc/dispatch/fusion.h"
#include "csrc/dispatch/meta_checks.h"

namespace torch_tpu {
namespace {

bool cpu_fallback_enabled() {
  const char* value = std::getenv("TORCH_TPU_CPU_FALLBACK");
  return value != nullptr && std::string(value) == "1";
}

// Every op without a tpu kernel lands here: NotImplementedError naming the op, or (opt-in)
// the CPU fallback with a warning once per op.
void unimplemented_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name =
      op.schema().operator_name().name +
      (op.schema().overload_name().empty() ? "" : "." + op.schema().overload_name());
  if (!cpu_fallback_enabled()) {
    // A bad call gets CPU's error even where tpu has no kernel: only the Meta kernel runs, and
    // CPU's checks only where it refuses.
    check_written_overlap(op.schema(), *stack);
    (void)run_meta_checks(op.schema(), *stack);
    TORCH_CHECK_NOT_IMPLEMENTED(
        false, "The operator '", name,
        "' is not implemented for the tpu device yet. Set "
        "TORCH_TPU_CPU_FALLBACK=1 to run it on the CPU instead (slower; warns once per op).");
  }
  static std::mutex mutex;
  static std::set<std::string> warned;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (warned.insert(name).second) {
      TORCH_WARN("torch_tpu: '", name,
                 "' has no tpu kernel and runs on the CPU "
                 "(TORCH_TPU_CPU_FALLBACK=1); this copies its tensors to the host and back.");
    }
  }
  at::native::cpu_fallback(op, stack);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&unimplemented_fallback>());
}

}  // namespace

void register_lowered_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    set_materialize_hook(&materialize_pending);
    // One library per namespace: aten's ops, and our own (torch_tpu::attention, ...), whose
    // lowerings are registered under their qualified names.
    static std::map<std::string, std::unique_ptr<torch::Library>> libraries;
    for (const std::string& name : lowered_op_names()) {
      size_t qualified = name.find("::");
      std::string ns = qualified == std::string::npos ? "aten" : name.substr(0, qualified);
      std::string op = qualified == std::string::npos ? name : name.substr(qualified + 2);
      auto& library = libraries[ns];
      if (!library) {
        library = std::make_unique<torch::Library>(
            torch::Library::IMPL, ns, c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
      }
      library->impl(op.c_str(), torch::CppFunction::makeFromBoxedFunction<&lowered_kernel>());
    }
    register_foreach_kernels();
  });
}

}  // namespace torch_tpu
