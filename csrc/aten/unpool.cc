// max_unpool2d/3d: each value is written at its flat position (from max_pool's indices) in a
// zero plane of the output size. Composed of the device's scatter kernel.
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

namespace torch_tpu::aten {
namespace {

at::Tensor unpool(const at::Tensor& self, const at::Tensor& indices, c10::IntArrayRef size,
                  const char* name) {
  const int64_t spatial = static_cast<int64_t>(size.size());
  // Integers are computed, as on CUDA; neither CPU nor CUDA has a bool kernel.
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool, "\"", name,
                              "\" not implemented for 'Bool'");
  TORCH_CHECK(self.dim() == spatial + 1 || self.dim() == spatial + 2, name, ": expected ",
              spatial + 1, "D or ", spatial + 2, "D input, got ", self.dim(), "D");
  TORCH_CHECK(indices.scalar_type() == at::kLong, name,
              ": elements in indices should be type "
              "int64 but got: ",
              indices.scalar_type());
  TORCH_CHECK(self.sizes() == indices.sizes(), name,
              ": Shape of input must match shape of "
              "indices");
  // Repeated indices leave which value lands unspecified (XLA's scatter, as CPU's loop and
  // CUDA's threads): deterministic algorithms refuse it, with CPU's kernel name.
  at::globalContext().alertNotDeterministic(spatial == 2 ? "max_unpooling2d_forward_out"
                                                         : "max_unpooling3d_forward_out");
  int64_t plane = 1;
  for (int64_t s : size) plane *= s;
  std::vector<int64_t> lead(self.sizes().begin(), self.sizes().end() - spatial);
  std::vector<int64_t> flat_shape = lead;
  flat_shape.push_back(plane);
  at::Tensor out = at::zeros(flat_shape, self.options());
  at::Tensor values = self.flatten(self.dim() - spatial);
  at::Tensor positions = indices.flatten(self.dim() - spatial);
  out.scatter_(-1, positions, values);
  std::vector<int64_t> out_shape = lead;
  out_shape.insert(out_shape.end(), size.begin(), size.end());
  return out.view(out_shape);
}

at::Tensor max_unpool2d(const at::Tensor& self, const at::Tensor& indices,
                        c10::IntArrayRef output_size) {
  TORCH_CHECK(output_size.size() == 2,
              "max_unpool2d: There should be exactly two elements "
              "(height, width) in output_size, but got ",
              output_size.size(), " elements.");
  return unpool(self, indices, output_size, "max_unpool2d");
}

at::Tensor max_unpool3d(const at::Tensor& self, const at::Tensor& indices,
                        c10::IntArrayRef output_size, c10::IntArrayRef stride,
                        c10::IntArrayRef padding) {
  TORCH_CHECK(output_size.size() == 3,
              "max_unpool3d: There should be exactly three elements "
              "(depth, height, width) in output_size, but got ",
              output_size.size(), " elements.");
  (void)stride;
  (void)padding;
  return unpool(self, indices, output_size, "max_unpool3d");
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("max_unpool2d", TORCH_FN(max_unpool2d));
  m.impl("max_unpool3d", TORCH_FN(max_unpool3d));
}

}  // namespace
}  // namespace torch_tpu::aten
