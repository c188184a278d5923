// Sparse ops without a device kernel: run through PyTorch's CPU fallback, warning once per op.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/DispatchKey.h>

namespace torch_tpu::aten {

// Runs `op` on host copies under `cpu_key` (SparseCPU, SparseCsrCPU) and copies the results
// back. Ops whose results are views fail instead: a view cannot share storage across devices.
void sparse_op_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                       c10::DispatchKey cpu_key);

}  // namespace torch_tpu::aten
