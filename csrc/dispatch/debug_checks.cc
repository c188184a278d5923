#include "csrc/dispatch/debug_checks.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <c10/util/Exception.h>

#include <string>
#include <unordered_map>

namespace torch_tpu {
namespace {

// Raises IndexError (RuntimeError where CPU does: gather, scatter, and index_add of a tensor
// with several dimensions) naming the op, the first offending index and the bound.
void check_range(const std::string& op, const at::Tensor& index, int64_t dim, int64_t size,
                 int64_t self_rank = 1) {
  const bool runtime_error = op.starts_with("gather") || op.starts_with("scatter") ||
                             (op.starts_with("index_add") && self_rank > 1);
  if (!index.defined() || index.numel() == 0) return;
  if (index.scalar_type() == at::kBool || index.scalar_type() == at::kByte) return;  // masks
  at::Tensor host = index.cpu().to(at::kLong).reshape({-1});
  const int64_t* values = host.data_ptr<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (values[i] >= -size && values[i] < size) continue;
    const std::string message = op + "(): index " + std::to_string(values[i]) +
                                " is out of bounds for dimension " + std::to_string(dim) +
                                " with size " + std::to_string(size);
    TORCH_CHECK(!runtime_error, message);
    TORCH_CHECK_INDEX(false, message);
  }
}

int64_t size_at(const at::Tensor& self, int64_t dim) {
  if (self.dim() == 0) return 1;
  return self.size(dim < 0 ? dim + self.dim() : dim);
}

// Ops indexing `self` (argument 0) along `dim` (argument 1) with `index` (argument 2).
void along_dim(const std::string& op, const std::vector<c10::IValue>& args) {
  const at::Tensor& self = args[0].toTensor();
  int64_t dim = args[1].toInt();
  check_range(op, args[2].toTensor(), dim, size_at(self, dim), self.dim());
}

// index / index_put: one optional index tensor per leading dimension of `self`.
void per_dim(const std::string& op, const std::vector<c10::IValue>& args) {
  const at::Tensor& self = args[0].toTensor();
  const auto& indices = args[1].toListRef();
  for (size_t d = 0; d < indices.size(); ++d) {
    if (indices[d].isNone() || static_cast<int64_t>(d) >= self.dim()) continue;
    check_range(op, indices[d].toTensor(), static_cast<int64_t>(d), self.size(d));
  }
}

using Check = void (*)(const std::string&, const std::vector<c10::IValue>&);

const std::unordered_map<std::string, Check>& checks() {
  static const std::unordered_map<std::string, Check> table = {
      {"aten::index_select", along_dim},
      {"aten::gather", along_dim},
      {"aten::scatter", along_dim},
      {"aten::scatter_", along_dim},
      {"aten::scatter_add", along_dim},
      {"aten::scatter_add_", along_dim},
      {"aten::scatter_reduce", along_dim},
      {"aten::scatter_reduce_", along_dim},
      {"aten::index_add", along_dim},
      {"aten::index_add_", along_dim},
      {"aten::index_copy", along_dim},
      {"aten::index_copy_", along_dim},
      {"aten::index_fill", along_dim},
      {"aten::index_fill_", along_dim},
      {"aten::index", per_dim},
      {"aten::_index_put_impl_", per_dim},
      {"aten::_index_put_impl", per_dim},
      {"aten::index_put", per_dim},
      {"aten::embedding_dense_backward",
       [](const std::string& op, const std::vector<c10::IValue>& args) {
         check_range(op, args[1].toTensor(), 0, args[2].toInt());
       }},
  };
  return table;
}

}  // namespace

void check_indices(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  auto found = checks().find(schema.name());
  if (found == checks().end()) return;
  std::string op = schema.name().substr(6);  // "index_select", as torch names it
  found->second(op, args);
}

}  // namespace torch_tpu
