// rrelu_with_noise (F.rrelu): in training, each element at or below zero is scaled by a slope
// drawn uniformly from [lower, upper] on the device, and `noise` records the slope used (1 for
// positive elements) for the backward, rrelu_with_noise_backward, which multiplies by it. In
// evaluation it is leaky_relu with the mean slope, as on CPU.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/where.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <optional>

namespace torch_tpu::aten {
namespace {

at::Tensor rrelu_result(const at::Tensor& self, const at::Tensor& noise, const at::Scalar& lower,
                        const at::Scalar& upper, bool training,
                        std::optional<at::Generator> generator) {
  TORCH_CHECK(lower.toDouble() <= upper.toDouble(),
              "Lower bound should be less than or equal to the upper bound");
  if (!training) return at::leaky_relu(self, (lower.toDouble() + upper.toDouble()) / 2);
  TORCH_CHECK(noise.sizes() == self.sizes(),
              "noise tensor shape must match self tensor shape. Got self.shape = ", self.sizes(),
              " noise.shape = ", noise.sizes());
  at::Tensor slope =
      at::empty_like(self).uniform_(lower.toDouble(), upper.toDouble(), std::move(generator));
  at::Tensor used = at::where(self <= 0, slope, at::ones_like(self));
  noise.copy_(used);
  return self * used;
}

at::Tensor rrelu_with_noise(const at::Tensor& self, at::Tensor& noise, const at::Scalar& lower,
                            const at::Scalar& upper, bool training,
                            std::optional<at::Generator> generator) {
  return rrelu_result(self, noise, lower, upper, training, std::move(generator));
}

at::Tensor& rrelu_with_noise_(at::Tensor& self, at::Tensor& noise, const at::Scalar& lower,
                              const at::Scalar& upper, bool training,
                              std::optional<at::Generator> generator) {
  return self.copy_(rrelu_result(self, noise, lower, upper, training, std::move(generator)));
}

at::Tensor& rrelu_with_noise_out(const at::Tensor& self, at::Tensor& noise, const at::Scalar& lower,
                                 const at::Scalar& upper, bool training,
                                 std::optional<at::Generator> generator, at::Tensor& out) {
  at::Tensor result = rrelu_result(self, noise, lower, upper, training, std::move(generator));
  out.resize_(result.sizes());
  return out.copy_(result);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("rrelu_with_noise", TORCH_FN(rrelu_with_noise));
  m.impl("rrelu_with_noise_", TORCH_FN(rrelu_with_noise_));
  m.impl("rrelu_with_noise.out", TORCH_FN(rrelu_with_noise_out));
}

}  // namespace
}  // namespace torch_tpu::aten
