// Ops whose output length is the number of distinct values (unique and its variants), the
// largest value (bincount) or the sum of the values (repeat_interleave's repeats): the values
// make one explicit host round trip (a sync point, as on
// CUDA), ATen's CPU kernel finds the result, and the results return to the device.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_unique.h>
#include <ATen/ops/_unique2.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/unique_consecutive.h>
#include <ATen/ops/unique_dim.h>
#include <ATen/ops/unique_dim_consecutive.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <tuple>

namespace torch_tpu::aten {
namespace {

at::Tensor to_device(const at::Tensor& host, const at::Tensor& like) {
  return host.to(like.device());
}
std::tuple<at::Tensor, at::Tensor> to_device(const std::tuple<at::Tensor, at::Tensor>& host,
                                             const at::Tensor& like) {
  return {to_device(std::get<0>(host), like), to_device(std::get<1>(host), like)};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> to_device(
    const std::tuple<at::Tensor, at::Tensor, at::Tensor>& host, const at::Tensor& like) {
  return {to_device(std::get<0>(host), like), to_device(std::get<1>(host), like),
          to_device(std::get<2>(host), like)};
}

std::tuple<at::Tensor, at::Tensor> unique(const at::Tensor& self, bool sorted,
                                          bool return_inverse) {
  return to_device(at::_unique(self.cpu(), sorted, return_inverse), self);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool sorted,
                                                       bool return_inverse, bool return_counts) {
  return to_device(at::_unique2(self.cpu(), sorted, return_inverse, return_counts), self);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_consecutive(const at::Tensor& self,
                                                                  bool return_inverse,
                                                                  bool return_counts,
                                                                  std::optional<int64_t> dim) {
  return to_device(at::unique_consecutive(self.cpu(), return_inverse, return_counts, dim), self);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim(const at::Tensor& self, int64_t dim,
                                                          bool sorted, bool return_inverse,
                                                          bool return_counts) {
  return to_device(at::unique_dim(self.cpu(), dim, sorted, return_inverse, return_counts), self);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_dim_consecutive(const at::Tensor& self,
                                                                      int64_t dim,
                                                                      bool return_inverse,
                                                                      bool return_counts) {
  return to_device(at::unique_dim_consecutive(self.cpu(), dim, return_inverse, return_counts),
                   self);
}
at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights,
                    int64_t minlength) {
  std::optional<at::Tensor> host_weights;
  if (weights.has_value() && weights->defined()) host_weights = weights->cpu();
  return to_device(at::bincount(self.cpu(), host_weights, minlength), self);
}

// repeat_interleave.Tensor(repeats, output_size): the index of each output position, whose
// count is sum(repeats); the repeating itself (index_select) then runs on the device.
at::Tensor repeat_interleave_indices(const at::Tensor& repeats,
                                     std::optional<c10::SymInt> output_size) {
  return to_device(at::repeat_interleave_symint(repeats.cpu(), output_size), repeats);
}

// A gradient that is known to be zero: plain zeros on the device (autograd only reads it).
at::Tensor efficient_zero_tensor(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                                 std::optional<at::Layout> layout, std::optional<at::Device> device,
                                 std::optional<bool> pin_memory) {
  return at::zeros_symint(
      size,
      at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(pin_memory));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_unique", TORCH_FN(unique));
  m.impl("_unique2", TORCH_FN(unique2));
  m.impl("unique_consecutive", TORCH_FN(unique_consecutive));
  m.impl("unique_dim", TORCH_FN(unique_dim));
  m.impl("unique_dim_consecutive", TORCH_FN(unique_dim_consecutive));
  m.impl("bincount", TORCH_FN(bincount));
  m.impl("repeat_interleave.Tensor", TORCH_FN(repeat_interleave_indices));
  m.impl("_efficientzerotensor", TORCH_FN(efficient_zero_tensor));
}

}  // namespace
}  // namespace torch_tpu::aten
