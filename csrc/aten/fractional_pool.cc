// fractional_max_pool2d/3d and their backward, composed from device tensor ops. Each plane's
// random samples (one per spatial axis, drawn by the caller) place the pooling windows with
// CPU's interval rule, start_i = int((i + u) * alpha) - int(u * alpha) with the last window
// flush with the end; every window is gathered and its maximum taken (the first maximum, or
// the last NaN, as CPU's scan keeps). The backward adds each output's gradient at its index.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/trunc.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

namespace torch_tpu::aten {
namespace {

// Window starts [N, C, out] along an axis of size `in`, from the samples u [N, C].
at::Tensor window_starts(const at::Tensor& u, int64_t in, int64_t out, int64_t pool) {
  at::Tensor last = at::full({u.size(0), u.size(1), 1}, in - pool, u.options().dtype(at::kLong));
  if (out <= 1) return last.narrow(2, 0, out);
  const float alpha = static_cast<float>(in - pool) / static_cast<float>(out - 1);
  at::Tensor i = at::arange(out - 1, u.options());
  at::Tensor s = u.unsqueeze(2);
  at::Tensor starts = at::trunc((i + s) * alpha) - at::trunc(s * alpha);
  return at::cat({starts.to(at::kLong), last}, 2);
}

struct Pooled {
  at::Tensor output, indices;
};

// `sample_of[d]`: which of a plane's samples places spatial axis d (CPU's order differs between
// 2-D, where the first sample is the width's, and 3-D).
Pooled fractional_max_pool(const at::Tensor& self, at::IntArrayRef kernel,
                           at::IntArrayRef output_size, const at::Tensor& samples,
                           const std::vector<int64_t>& sample_of, const std::string& name) {
  const auto dims = static_cast<int64_t>(sample_of.size());
  TORCH_CHECK(self.dim() == dims + 1 || self.dim() == dims + 2, name, "(): Expected ", dims + 1,
              "D or ", dims + 2, "D tensor, but got: ", self.sizes());
  TORCH_CHECK(static_cast<int64_t>(kernel.size()) == dims &&
                  static_cast<int64_t>(output_size.size()) == dims,
              name, "(): kernel_size and output_size must have ", dims, " elements each");
  const bool batched = self.dim() == dims + 2;
  at::Tensor x = batched ? self : self.unsqueeze(0);
  const int64_t n = x.size(0);
  const int64_t c = x.size(1);
  TORCH_CHECK(
      samples.dim() == 3 && samples.size(0) == n && samples.size(1) == c && samples.size(2) == dims,
      name, "(): expected random samples of shape [", n, ", ", c, ", ", dims, "], got ",
      samples.sizes());
  static const char* axis_names[3] = {"time", "height", "width"};
  at::Tensor u = samples.to(at::kFloat);
  // Flat input positions of every window element: [N, C, out..., kernel...].
  std::vector<int64_t> full_shape{n, c};
  int64_t windows = 1;
  int64_t window_size = 1;
  for (int64_t d = 0; d < dims; ++d) {
    full_shape.push_back(output_size[d]);
    windows *= output_size[d];
  }
  for (int64_t d = 0; d < dims; ++d) {
    full_shape.push_back(kernel[d]);
    window_size *= kernel[d];
  }
  at::Tensor flat = at::zeros(full_shape, x.options().dtype(at::kLong));
  int64_t stride = 1;
  for (int64_t d = dims - 1; d >= 0; --d) {
    const int64_t in = x.size(2 + d);
    const char* axis = axis_names[3 - dims + d];
    // CPU's 3-D kernel also refuses windows that would exactly tile the axis.
    const bool fits =
        dims == 3 ? output_size[d] + kernel[d] - 1 < in : output_size[d] + kernel[d] - 1 <= in;
    TORCH_CHECK(fits, name, "(): pool ", axis, " ", kernel[d], " too large relative to input ",
                axis, " ", in);
    at::Tensor starts = window_starts(u.select(2, sample_of[d]), in, output_size[d], kernel[d]);
    at::Tensor coords = starts.unsqueeze(3) + at::arange(kernel[d], starts.options());
    std::vector<int64_t> shape(static_cast<size_t>(2 + 2 * dims), 1);
    shape[0] = n;
    shape[1] = c;
    shape[2 + d] = output_size[d];
    shape[2 + dims + d] = kernel[d];
    flat = flat + (coords * stride).reshape(shape);
    stride *= in;
  }
  at::Tensor positions = flat.reshape({n, c, windows, window_size});
  const int64_t plane = c10::multiply_integers(x.sizes().slice(2));
  at::Tensor values = x.reshape({n, c, plane})
                          .gather(2, positions.reshape({n, c, windows * window_size}))
                          .view({n, c, windows, window_size});
  // First maximum; a window holding NaN reports its last NaN.
  at::Tensor choice = values.argmax(3, true);
  at::Tensor nan = at::isnan(values);
  at::Tensor last_nan = (window_size - 1) - nan.flip(3).to(at::kInt).argmax(3, true);
  choice = at::where(nan.any(3, true), last_nan, choice);
  std::vector<int64_t> out_shape{n, c};
  for (int64_t d = 0; d < dims; ++d) out_shape.push_back(output_size[d]);
  at::Tensor output = values.gather(3, choice).view(out_shape);
  at::Tensor indices = positions.gather(3, choice).view(out_shape);
  if (!batched) {
    output = output.squeeze(0);
    indices = indices.squeeze(0);
  }
  return {output, indices};
}

at::Tensor fractional_max_pool_backward(const at::Tensor& grad, const at::Tensor& self,
                                        const at::Tensor& indices, int64_t dims) {
  const bool batched = self.dim() == dims + 2;
  at::Tensor x = batched ? self : self.unsqueeze(0);
  at::Tensor g = batched ? grad : grad.unsqueeze(0);
  at::Tensor where = batched ? indices : indices.unsqueeze(0);
  const int64_t n = x.size(0);
  const int64_t c = x.size(1);
  const int64_t plane = c10::multiply_integers(x.sizes().slice(2));
  const int64_t outputs = c10::multiply_integers(g.sizes().slice(2));
  at::Tensor result =
      at::zeros({n, c, plane}, g.options())
          .scatter_add(2, where.reshape({n, c, outputs}), g.reshape({n, c, outputs}))
          .view(x.sizes());
  return batched ? result : result.squeeze(0);
}

std::tuple<at::Tensor, at::Tensor> pool2d(const at::Tensor& self, at::IntArrayRef kernel,
                                          at::IntArrayRef output_size, const at::Tensor& samples) {
  Pooled p =
      fractional_max_pool(self, kernel, output_size, samples, {1, 0}, "fractional_max_pool2d");
  return {p.output, p.indices};
}

std::tuple<at::Tensor, at::Tensor> pool3d(const at::Tensor& self, at::IntArrayRef kernel,
                                          at::IntArrayRef output_size, const at::Tensor& samples) {
  Pooled p =
      fractional_max_pool(self, kernel, output_size, samples, {0, 1, 2}, "fractional_max_pool3d");
  return {p.output, p.indices};
}

std::tuple<at::Tensor&, at::Tensor&> pool2d_out(const at::Tensor& self, at::IntArrayRef kernel,
                                                at::IntArrayRef output_size,
                                                const at::Tensor& samples, at::Tensor& output,
                                                at::Tensor& indices) {
  auto [o, i] = pool2d(self, kernel, output_size, samples);
  output.resize_(o.sizes()).copy_(o);
  indices.resize_(i.sizes()).copy_(i);
  return {output, indices};
}

std::tuple<at::Tensor&, at::Tensor&> pool3d_out(const at::Tensor& self, at::IntArrayRef kernel,
                                                at::IntArrayRef output_size,
                                                const at::Tensor& samples, at::Tensor& output,
                                                at::Tensor& indices) {
  auto [o, i] = pool3d(self, kernel, output_size, samples);
  output.resize_(o.sizes()).copy_(o);
  indices.resize_(i.sizes()).copy_(i);
  return {output, indices};
}

at::Tensor pool2d_backward(const at::Tensor& grad, const at::Tensor& self, at::IntArrayRef,
                           at::IntArrayRef, const at::Tensor& indices) {
  return fractional_max_pool_backward(grad, self, indices, 2);
}

at::Tensor pool3d_backward(const at::Tensor& grad, const at::Tensor& self, at::IntArrayRef,
                           at::IntArrayRef, const at::Tensor& indices) {
  return fractional_max_pool_backward(grad, self, indices, 3);
}

at::Tensor& pool2d_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                at::IntArrayRef kernel, at::IntArrayRef output_size,
                                const at::Tensor& indices, at::Tensor& grad_input) {
  at::Tensor r = pool2d_backward(grad, self, kernel, output_size, indices);
  return grad_input.resize_(r.sizes()).copy_(r);
}

at::Tensor& pool3d_backward_out(const at::Tensor& grad, const at::Tensor& self,
                                at::IntArrayRef kernel, at::IntArrayRef output_size,
                                const at::Tensor& indices, at::Tensor& grad_input) {
  at::Tensor r = pool3d_backward(grad, self, kernel, output_size, indices);
  return grad_input.resize_(r.sizes()).copy_(r);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("fractional_max_pool2d", TORCH_FN(pool2d));
  m.impl("fractional_max_pool2d.output", TORCH_FN(pool2d_out));
  m.impl("fractional_max_pool3d", TORCH_FN(pool3d));
  m.impl("fractional_max_pool3d.output", TORCH_FN(pool3d_out));
  m.impl("fractional_max_pool2d_backward", TORCH_FN(pool2d_backward));
  m.impl("fractional_max_pool2d_backward.grad_input", TORCH_FN(pool2d_backward_out));
  m.impl("fractional_max_pool3d_backward", TORCH_FN(pool3d_backward));
  m.impl("fractional_max_pool3d_backward.grad_input", TORCH_FN(pool3d_backward_out));
}

}  // namespace
}  // namespace torch_tpu::aten
