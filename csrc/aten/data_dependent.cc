// Ops whose output shape depends on tensor values (nonzero, boolean-mask indexing,
// masked_select): an explicit host round trip finds the positions, then the device gathers or
// scatters with integer indices. The round trip is a sync point, as on CUDA.
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/argsort.h>
#include <ATen/ops/clone.h>
#include <ATen/ops/index.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/rand.h>
#include <torch/library.h>

#include "csrc/dispatch/dispatcher.h"

namespace torch_tpu::aten {
namespace {

using IndexList = c10::List<std::optional<at::Tensor>>;

at::Tensor nonzero_kernel(const at::Tensor& self) {
  return at::nonzero(self.cpu()).to(self.device());
}

at::Tensor& nonzero_out_kernel(const at::Tensor& self, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kLong, "nonzero: Expected out tensor to have scalar type ",
              at::kLong, " but got ", out.scalar_type());
  TORCH_CHECK(out.device() == self.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              self.device(), " and ", out.device(), "!");
  at::Tensor result = nonzero_kernel(self);
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}

// A permutation drawn on the device: the order of random float64 keys (a stable sort, so the
// rare tie keeps index order).
at::Tensor& randperm_out_kernel(int64_t n, std::optional<at::Generator> generator,
                                at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  at::native::resize_output(out, {n});
  if (n == 0) return out;
  at::Tensor keys = at::rand({n}, generator, out.options().dtype(at::kDouble));
  return out.copy_(at::argsort(keys, /*stable=*/true, 0, false));
}

bool is_mask(const std::optional<at::Tensor>& index) {
  return index.has_value() && index->defined() &&
         (index->scalar_type() == at::kBool || index->scalar_type() == at::kByte);
}

// CPU's warning, once per uint8 mask an indexing call uses.
void warn_if_byte_mask(const at::Tensor& mask) {
  if (mask.scalar_type() != at::kByte) return;
  TORCH_WARN(
      "indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool "
      "instead.");
}

// An index tensor still on the host is checked there, at once and with CPU's message; one on
// the device is checked inside the executable and reported at the next sync point.
void check_host_index(const at::Tensor& index, int64_t dim, int64_t size) {
  if (index.numel() == 0 || !c10::isIntegralType(index.scalar_type(), /*includeBool=*/false)) {
    return;
  }
  TORCH_CHECK_INDEX(size > 0, "index is out of bounds for dimension with size 0");
  const auto [low, high] = at::aminmax(index);
  for (int64_t value : {low.item<int64_t>(), high.item<int64_t>()}) {
    TORCH_CHECK_INDEX(value >= -size && value < size, "index ", value,
                      " is out of bounds for dimension ", dim, " with size ", size);
  }
}

// Each mask becomes one long index per dimension it covers, as torch's expandTensors does.
// Index tensors and masks may live on the CPU, as CUDA allows: they move to self's device.
IndexList expand_masks(const at::Tensor& self, const IndexList& indices) {
  IndexList expanded;
  int64_t dim = 0;
  for (const std::optional<at::Tensor>& index : indices) {
    if (!is_mask(index)) {
      const bool on_host = index.has_value() && index->defined() && index->is_cpu();
      if (on_host && dim < self.dim()) check_host_index(*index, dim, self.size(dim));
      expanded.push_back(on_host ? std::optional<at::Tensor>(index->to(self.device())) : index);
      ++dim;
      continue;
    }
    const at::Tensor& mask = *index;
    warn_if_byte_mask(mask);
    for (int64_t j = 0; j < mask.dim(); ++j) {
      TORCH_CHECK_INDEX(dim + j < self.dim() && mask.size(j) == self.size(dim + j),
                        "The shape of the mask ", mask.sizes(), " at index ", j,
                        " does not match the shape of the indexed tensor ", self.sizes(),
                        " at index ", dim + j);
    }
    at::Tensor coordinates = at::nonzero(mask.cpu()).to(self.device());
    for (int64_t j = 0; j < mask.dim(); ++j) expanded.push_back(coordinates.select(1, j));
    dim += mask.dim();
  }
  return expanded;
}

const c10::FunctionSchema& schema(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).schema();
}

at::Tensor index_kernel(const at::Tensor& self, const IndexList& indices) {
  static const auto& index_schema = schema("aten::index", "Tensor");
  auto results = run_lowering("aten::index.Tensor", find_lowering("@index"), index_schema,
                              {self, expand_masks(self, indices)});
  return results[0].toTensor();
}

at::Tensor& index_put_impl_kernel(at::Tensor& self, const IndexList& indices,
                                  const at::Tensor& values, bool accumulate, bool unsafe) {
  // CPU's checks: an expanded self is deprecated; values and indices may not share its memory.
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) {
    TORCH_WARN(
        "Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor before "
        "performing this operation. This also applies to advanced indexing e.g. tensor[indices] "
        "= tensor");
  }
  at::assert_no_overlap(self, values);
  for (size_t i = 0; i < indices.size(); ++i) {
    const std::optional<at::Tensor> index = indices.get(i);
    if (index && index->defined()) at::assert_no_overlap(self, *index);
  }
  // self[mask] = scalar over the whole tensor needs no round trip: it is a select.
  if (indices.size() == 1 && is_mask(indices.get(0)) && !accumulate && values.numel() == 1 &&
      indices.get(0)->sizes() == self.sizes()) {
    // As on CPU, a uint8 mask reaches masked_fill_ unconverted (which refuses it).
    return self.masked_fill_(indices.get(0)->to(self.device()), values.reshape({}));
  }
  static const auto& put_schema = schema("aten::_index_put_impl_", "");
  run_lowering("aten::_index_put_impl_", find_lowering("@index_put"), put_schema,
               {self, expand_masks(self, indices), values, accumulate, unsafe});
  return self;
}

at::Tensor index_put_kernel(const at::Tensor& self, const IndexList& indices,
                            const at::Tensor& values, bool accumulate) {
  at::Tensor out = at::clone(self);
  return index_put_impl_kernel(out, indices, values, accumulate, false);
}

at::Tensor masked_select_kernel(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  auto [values, expanded_mask] = at::expand_outplace(self, mask);
  IndexList indices;
  // A 0-d mask selects from the value as a one-element vector.
  if (values->dim() == 0) {
    indices.push_back(expanded_mask->reshape({1}));
    return index_kernel(values->reshape({1}), indices);
  }
  indices.push_back(*expanded_mask);
  return index_kernel(*values, indices);
}

// CPU's checks, then the selection copied into the resized out.
at::Tensor& masked_select_out_kernel(const at::Tensor& self, const at::Tensor& mask,
                                     at::Tensor& out) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(),
              "masked_select(): self and result must have the same scalar type");
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, mask);
  at::Tensor result = masked_select_kernel(self, mask);
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}

// self[mask] = the first mask.sum() elements of source, in order.
at::Tensor& masked_scatter_kernel(at::Tensor& self, const at::Tensor& mask,
                                  const at::Tensor& source) {
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "masked_scatter: expected self and source to have same dtypes but got ",
              self.scalar_type(), " and ", source.scalar_type());
  at::assert_no_internal_overlap(self);  // an expanded self: CPU refuses it too
  at::Tensor expanded = mask.expand(self.sizes());
  at::Tensor coordinates = nonzero_kernel(expanded);
  int64_t count = coordinates.size(0);
  TORCH_CHECK(source.numel() >= count,
              "masked_scatter: Number of elements of source < number "
              "of ones in mask");
  if (count == 0) return self;
  at::Tensor values = source.reshape({-1}).narrow(0, 0, count);
  if (self.dim() == 0) return self.copy_(values.reshape({}));
  IndexList indices;
  for (int64_t j = 0; j < self.dim(); ++j) indices.push_back(coordinates.select(1, j));
  static const auto& put_schema = schema("aten::_index_put_impl_", "");
  run_lowering("aten::_index_put_impl_", find_lowering("@index_put"), put_schema,
               {self, indices, values, false, false});
  return self;
}

at::Tensor masked_scatter_functional(const at::Tensor& self, const at::Tensor& mask,
                                     const at::Tensor& source) {
  // The result has the broadcast shape of self and mask, as on CPU.
  at::Tensor out = at::clone(self.expand(at::infer_size(self.sizes(), mask.sizes())),
                             at::MemoryFormat::Contiguous);
  return masked_scatter_kernel(out, mask, source);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("masked_scatter_", TORCH_FN(masked_scatter_kernel));
  m.impl("masked_scatter", TORCH_FN(masked_scatter_functional));
  m.impl("nonzero", TORCH_FN(nonzero_kernel));
  m.impl("nonzero.out", TORCH_FN(nonzero_out_kernel));
  m.impl("randperm.generator_out", TORCH_FN(randperm_out_kernel));
  m.impl("index.Tensor", TORCH_FN(index_kernel));
  m.impl("_index_put_impl_", TORCH_FN(index_put_impl_kernel));
  m.impl("index_put", TORCH_FN(index_put_kernel));
  m.impl("masked_select", TORCH_FN(masked_select_kernel));
  m.impl("masked_select.out", TORCH_FN(masked_select_out_kernel));
}

}  // namespace
}  // namespace torch_tpu::aten
