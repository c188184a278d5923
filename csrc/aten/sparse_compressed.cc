// Compressed sparse tensors (CSR, CSC, BSR, BSC) on tpu. As with COO (sparse.cc), ATen's
// SparseCsrTensorImpl holds ordinary tpu tensors for the compressed indices, plain indices and
// values, so creating one and handing out its parts is ATen's own device-generic code. The
// indices' invariants are checked on the host (they are small, and the check reads every
// index); every other op on a compressed tensor runs on the host through PyTorch's CPU fallback
// and warns once per op.
#include <ATen/ATen.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_validate_compressed_sparse_indices_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/values_native.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "csrc/aten/sparse_on_host.h"

namespace torch_tpu::aten {
namespace {

void compressed_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  sparse_op_on_host(op, stack, c10::DispatchKey::SparseCsrCPU);
}

// Runs when a compressed tensor is made with invariant checks on: CPU's checks, on host copies.
void validate_compressed_indices_on_host(bool is_crow, const at::Tensor& compressed_indices,
                                         const at::Tensor& plain_indices, int64_t compressed_dim,
                                         int64_t dim, int64_t nnz) {
  at::native::_validate_compressed_sparse_indices_cpu(
      is_crow, compressed_indices.cpu(), plain_indices.cpu(), compressed_dim, dim, nnz);
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&compressed_on_host>());
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse_compressed_symint));
  m.impl("resize_as_sparse_", TORCH_FN(at::native::resize_as_sparse_compressed_));
  // Its parts (views of the tensors it holds) and facts about it.
  m.impl("crow_indices", TORCH_FN(at::native::crow_indices_sparse_csr));
  m.impl("col_indices", TORCH_FN(at::native::col_indices_sparse_csr));
  m.impl("ccol_indices", TORCH_FN(at::native::ccol_indices_sparse_csr));
  m.impl("row_indices", TORCH_FN(at::native::row_indices_sparse_csr));
  m.impl("values", TORCH_FN(at::native::values_sparse_csr));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse_csr));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse_csr));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse_csr));
  // Copies: part by part, on the device.
  m.impl("clone", TORCH_FN(at::native::clone_sparse_compressed));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_compressed_));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_validate_compressed_sparse_indices", TORCH_FN(validate_compressed_indices_on_host));
}

}  // namespace
}  // namespace torch_tpu::aten
