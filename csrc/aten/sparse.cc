// Sparse COO tensors on tpu. A sparse tensor's indices and values are ordinary tpu tensors held
// by ATen's SparseTensorImpl, so its bookkeeping (creating it, resizing it, handing out its
// parts, copying between devices, dense <-> sparse conversion) is ATen's own device-generic
// code, registered here for the SparsePrivateUse1 key. Adding a sparse tensor into a dense one
// of its dtype (to_dense, and an optimizer applying an embedding's sparse gradient) runs on the
// device as one accumulating index_put. Every other sparse op runs on the host through
// PyTorch's CPU fallback, with CPU's results and errors, and warns once per op: XLA has no
// sparse layout to lower them to.
#include <ATen/ATen.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_dimI_native.h>
#include <ATen/ops/_dimV_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_to_dense_native.h>
#include <ATen/ops/_to_sparse_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/zero_native.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <mutex>
#include <set>
#include <string>

#include "csrc/aten/sparse_on_host.h"

namespace torch_tpu::aten {

void sparse_op_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                       c10::DispatchKey cpu_key) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  const auto& name = op.schema().operator_name();
  const std::string layout =
      cpu_key == c10::DispatchKey::SparseCPU ? "sparse" : "compressed sparse";
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (warned.insert(toString(name) + " " + layout).second) {
      TORCH_WARN("torch_tpu: '", name.name, "' on ", layout,
                 " tensors runs on the host (the device has no sparse layout); its tensors are "
                 "copied to the host and back.");
    }
  }
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true, cpu_key);
}

namespace {

void sparse_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  sparse_op_on_host(op, stack, c10::DispatchKey::SparseCPU);
}

// dense + alpha * sparse, written into `out` (dense itself for add_): every stored entry is
// accumulated at its index, so uncoalesced duplicates add up as on CPU.
void accumulate_sparse(at::Tensor& out, const at::Tensor& sparse, const c10::Scalar& alpha) {
  if (sparse._nnz() == 0) return;
  at::Tensor indices = sparse._indices();
  std::vector<std::optional<at::Tensor>> index;
  index.reserve(indices.size(0));
  for (int64_t d = 0; d < indices.size(0); ++d) index.emplace_back(indices.select(0, d));
  at::Tensor values = sparse._values();
  if (!(alpha.isIntegral(true) && alpha.toLong() == 1)) values = values.mul(alpha);
  out.index_put_(c10::List<std::optional<at::Tensor>>(index), values, /*accumulate=*/true);
}

// Whether add(self, other, alpha[, out]) is dense + sparse of one dtype on one device, which
// the device computes; anything else (sparse + sparse, promotion) goes to the host.
bool dense_plus_sparse_on_device(const at::Tensor& self, const at::Tensor& other,
                                 const at::Tensor* out) {
  return self.layout() == c10::kStrided && other.is_sparse() && self.device() == other.device() &&
         self.scalar_type() == other.scalar_type() &&
         (out == nullptr || (out->layout() == c10::kStrided && out->device() == self.device() &&
                             out->scalar_type() == self.scalar_type()));
}

void check_same_size(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.sizes().equals(other.sizes()),
              "add: expected 'self' and 'other' to have same size, but self has size ",
              self.sizes(), " while other has size ", other.sizes(),
              " (FYI: op2-sparse addition does not currently support broadcasting)");
}

// add.Tensor, add_.Tensor and add.out on a sparse operand.
void sparse_add(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string& overload = op.schema().overload_name();
  const bool inplace = op.schema().name() == "aten::add_";
  const bool has_out = overload == "out";
  const size_t num_args = op.schema().arguments().size();
  auto args = torch::jit::last(*stack, num_args);
  const at::Tensor self = args[0].toTensor();
  const at::Tensor other = args[1].toTensor();
  const c10::Scalar alpha = args[2].toScalar();
  at::Tensor out = has_out ? args[3].toTensor() : at::Tensor();
  if (!dense_plus_sparse_on_device(self, other, has_out ? &out : nullptr)) {
    sparse_on_host(op, stack);
    return;
  }
  check_same_size(self, other);
  at::Tensor result;
  if (inplace) {
    result = self;
  } else if (has_out) {
    at::native::resize_output(out, self.sizes());
    if (!out.is_same(self)) out.copy_(self);
    result = out;
  } else {
    result = self.clone(at::MemoryFormat::Contiguous);
  }
  accumulate_sparse(result, other, alpha);
  torch::jit::drop(*stack, num_args);
  stack->emplace_back(result);
}

// _copy_from(self, dst) and _copy_from_and_resize(self, dst) with a sparse side: how the CPU
// fallback hands a sparse result back into the tpu tensor it computed in place.
at::Tensor copy_sparse_into(const at::Tensor& self, const at::Tensor& dst) {
  TORCH_CHECK(self.is_sparse() && dst.is_sparse(),
              "copy_() between dense and sparse Tensors is not implemented! Found self type = ",
              dst.toString(), " and src type = ", self.toString());
  at::Tensor target = dst;
  return at::native::copy_sparse_(target, self);
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_on_host>());
}

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  // Creation and shape: ATen's generic sparse bookkeeping.
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(at::native::new_with_dims_sparse));
  m.impl("_sparse_coo_tensor_with_dims_and_tensors",
         TORCH_FN(at::native::new_with_dims_and_tensor_sparse_symint));
  m.impl("empty.memory_format", TORCH_FN(at::native::empty_sparse_symint));
  m.impl("sparse_resize_", TORCH_FN(at::native::sparse_resize_));
  m.impl("sparse_resize_and_clear_", TORCH_FN(at::native::sparse_resize_and_clear_));
  m.impl("resize_as_sparse_", TORCH_FN(at::native::resize_as_sparse_));
  // Its parts (views of the indices and values it holds) and facts about it.
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_dimI", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("_dimV", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  // Complex <-> real views: a sparse tensor sharing the indices, over a view of the values.
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real_sparse));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex_sparse));
  // Copies (across devices too: the parts are moved with .to).
  m.impl("clone", TORCH_FN(at::native::clone_sparse));
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_wrapper_));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(at::native::copy_sparse_));
  m.impl("_copy_from", [](const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
    return copy_sparse_into(self, dst);
  });
  m.impl("_copy_from_and_resize",
         [](const at::Tensor& self, const at::Tensor& dst) { return copy_sparse_into(self, dst); });
  m.impl("zero_", TORCH_FN(at::native::zero_sparse_));
  // Conversions: zeros plus the sparse tensor (on the device, below), and sparse -> sparse.
  m.impl("_to_dense", TORCH_FN(at::native::sparse_to_dense));
  m.impl("_to_sparse.sparse_dim", static_cast<at::Tensor (*)(const at::Tensor&, int64_t)>(
                                      &at::native::sparse_coo_to_sparse));
  m.impl("_to_sparse", static_cast<at::Tensor (*)(const at::Tensor&, std::optional<at::Layout>,
                                                  at::OptionalIntArrayRef, std::optional<int64_t>)>(
                           &at::native::sparse_coo_to_sparse));
  // dense + sparse on the device.
  m.impl("add.Tensor", torch::CppFunction::makeFromBoxedFunction<&sparse_add>());
  m.impl("add_.Tensor", torch::CppFunction::makeFromBoxedFunction<&sparse_add>());
  m.impl("add.out", torch::CppFunction::makeFromBoxedFunction<&sparse_add>());
}

// Dense -> sparse: ATen's generic conversion (nonzero, then a gather of the values), on the
// device; nonzero's count is read back to size the result, as on CUDA.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_to_sparse.sparse_dim",
         static_cast<at::Tensor (*)(const at::Tensor&, int64_t)>(&at::native::dense_to_sparse));
  m.impl("_to_sparse", static_cast<at::Tensor (*)(const at::Tensor&, std::optional<at::Layout>,
                                                  at::OptionalIntArrayRef, std::optional<int64_t>)>(
                           &at::native::dense_to_sparse));
}

}  // namespace
}  // namespace torch_tpu::aten
