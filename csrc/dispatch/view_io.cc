#include "csrc/dispatch/view_io.h"

#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <vector>

namespace torch_tpu {
namespace {

hlo::Shape sizes_of(const at::TensorBase& tensor) {
  auto sizes = tensor.sizes();
  return hlo::Shape(sizes.begin(), sizes.end());
}

// Linear storage index of every element: offset + sum_k iota_k * stride_k, shape sizes + [1].
hlo::Value linear_indices(hlo::Builder& b, const hlo::Value& offset, const at::TensorBase& tensor) {
  hlo::Shape shape = sizes_of(tensor);
  const auto type = hlo::ElementType::S64;
  hlo::Value index = b.broadcast_in_dim(offset, shape, {});
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t stride = tensor.stride(static_cast<int64_t>(d));
    if (stride == 0 || shape[d] == 1) continue;
    hlo::Value term = b.multiply(b.iota(shape, type, static_cast<int64_t>(d)),
                                 b.constant_int(stride, type, shape));
    index = b.add(index, term);
  }
  hlo::Shape with_vector = shape;
  with_vector.push_back(1);
  return b.reshape(index, with_vector);
}

bool is_dense_range(const at::TensorBase& tensor) { return tensor.is_contiguous(); }

// The dimensions from outermost to innermost in memory when the view holds every element of
// [offset, offset + numel) exactly once (a transpose or permute of a dense block): it then
// reads as a slice, a reshape and a transpose, which the compiler handles far better than a
// gather (a Linear's weight.t() is one).
std::optional<std::vector<int64_t>> dense_block_order(const at::TensorBase& tensor) {
  const int64_t rank = tensor.dim();
  std::vector<int64_t> order(rank);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return tensor.stride(a) > tensor.stride(b); });
  int64_t expected = 1;
  for (int64_t k = rank - 1; k >= 0; --k) {
    const int64_t dim = order[k];
    if (tensor.size(dim) == 1) continue;
    if (tensor.stride(dim) != expected) return std::nullopt;
    expected *= tensor.size(dim);
  }
  return order;
}

hlo::Shape sizes_in(const at::TensorBase& tensor, const std::vector<int64_t>& order) {
  hlo::Shape shape;
  for (int64_t dim : order) shape.push_back(tensor.size(dim));
  return shape;
}

std::vector<int64_t> inverse(const std::vector<int64_t>& permutation) {
  std::vector<int64_t> result(permutation.size());
  for (size_t i = 0; i < permutation.size(); ++i) result[permutation[i]] = static_cast<int64_t>(i);
  return result;
}

const hlo::Value& offset_of(const std::optional<hlo::Value>& offset) {
  TORCH_INTERNAL_ASSERT(offset.has_value(), "torch_tpu: a view read or written without its offset");
  return *offset;
}

}  // namespace

int64_t storage_elements(const at::TensorBase& tensor) {
  return static_cast<int64_t>(tensor.storage().nbytes() / tensor.element_size());
}

bool has_default_strides(const at::TensorBase& tensor) {
  int64_t expected = 1;
  for (int64_t d = tensor.dim() - 1; d >= 0; --d) {
    if (tensor.stride(d) != expected) return false;
    expected *= std::max<int64_t>(tensor.size(d), 1);
  }
  return true;
}

bool covers_whole_storage(const at::TensorBase& tensor) {
  return tensor.storage_offset() == 0 && tensor.is_contiguous() &&
         tensor.numel() == storage_elements(tensor);
}

bool needs_view_offset(const at::TensorBase& tensor) {
  return tensor.numel() != 0 && !covers_whole_storage(tensor);
}

hlo::Value read_view(hlo::Builder& b, const hlo::Value& flat,
                     const std::optional<hlo::Value>& offset, const at::TensorBase& tensor) {
  hlo::Shape shape = sizes_of(tensor);
  if (covers_whole_storage(tensor)) return b.reshape(flat, shape);
  // An empty view reads nothing, wherever its offset points.
  if (tensor.numel() == 0) return b.constant(0, flat.type, shape);
  if (is_dense_range(tensor)) {
    hlo::Value range = b.dynamic_slice(flat, {offset_of(offset)}, {tensor.numel()});
    return b.reshape(range, shape);
  }
  if (auto order = dense_block_order(tensor)) {
    hlo::Value range = b.dynamic_slice(flat, {offset_of(offset)}, {tensor.numel()});
    return b.transpose(b.reshape(range, sizes_in(tensor, *order)), inverse(*order));
  }
  hlo::GatherDims dims;
  dims.collapsed_slice_dims = {0};
  dims.start_index_map = {0};
  dims.index_vector_dim = static_cast<int64_t>(shape.size());
  return b.gather(flat, linear_indices(b, offset_of(offset), tensor), dims, {1});
}

hlo::Value write_view(hlo::Builder& b, const hlo::Value& flat, const hlo::Value& values,
                      const std::optional<hlo::Value>& offset, const at::TensorBase& tensor) {
  if (covers_whole_storage(tensor)) return b.reshape(values, flat.shape);
  if (tensor.numel() == 0) return flat;
  if (is_dense_range(tensor)) {
    return b.dynamic_update_slice(flat, b.reshape(values, {tensor.numel()}), {offset_of(offset)});
  }
  if (auto order = dense_block_order(tensor)) {
    hlo::Value in_memory_order = b.reshape(b.transpose(values, *order), {tensor.numel()});
    return b.dynamic_update_slice(flat, in_memory_order, {offset_of(offset)});
  }
  hlo::ScatterDims dims;
  dims.inserted_window_dims = {0};
  dims.scatter_dims_to_operand_dims = {0};
  dims.index_vector_dim = tensor.dim();
  // Overlapping views (stride 0) write one of the candidate values, as CPU does.
  return b.scatter(flat, linear_indices(b, offset_of(offset), tensor), values, dims,
                   [](hlo::Builder&, const std::vector<hlo::Value>& args) {
                     return std::vector<hlo::Value>{args[1]};
                   });
}

}  // namespace torch_tpu
