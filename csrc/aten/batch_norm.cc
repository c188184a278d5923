// Batch normalisation, composed of tpu ops. native_batch_norm updates the running statistics
// in place without declaring it in its schema, so it is written as a kernel over other ops
// rather than as one lowering.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/var.h>
#include <torch/library.h>

#include <tuple>

#include "csrc/aten/common.h"

namespace torch_tpu::aten {
namespace {

std::vector<int64_t> reduce_axes(const at::Tensor& input) {
  std::vector<int64_t> axes{0};
  for (int64_t d = 2; d < input.dim(); ++d) axes.push_back(d);
  return axes;
}

// [C] -> [1, C, 1, ...] for broadcasting against the input.
at::Tensor per_channel(const at::Tensor& t, const at::Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = input.size(1);
  return t.reshape(shape);
}

// CPU's checks of the input, made before it computes (the statistics below would otherwise
// raise var's error, or divide by an empty count).
void check_input(const at::Tensor& input) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(input.scalar_type()),
                              "\"batch_norm\" not implemented for '",
                              c10::toString(input.scalar_type()), "'");
  TORCH_CHECK(input.numel() > 0,
              "input tensor must have at least one element, but got input_sizes = ", input.sizes());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_forward(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  check_input(input);
  check_parameter_dtypes(input, {weight, bias, running_mean, running_var});
  auto axes = reduce_axes(input);
  at::Tensor compute = input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16
                           ? input.to(at::kFloat)
                           : input;
  at::Tensor mean, invstd;
  if (training) {
    at::Tensor var = at::var(compute, axes, /*correction=*/0, /*keepdim=*/false);
    mean = at::mean(compute, axes);
    invstd = at::rsqrt(var + eps);
    int64_t count = input.numel() / input.size(1);
    if (running_mean && running_mean->defined()) {
      running_mean->mul_(1 - momentum).add_(mean.to(running_mean->scalar_type()), momentum);
    }
    if (running_var && running_var->defined()) {
      at::Tensor unbiased = var * (static_cast<double>(count) / std::max<int64_t>(count - 1, 1));
      running_var->mul_(1 - momentum).add_(unbiased.to(running_var->scalar_type()), momentum);
    }
  } else {
    TORCH_CHECK(running_mean && running_mean->defined() && running_var && running_var->defined(),
                "running_mean and running_var must be defined in evaluation mode");
    mean = running_mean->to(compute.scalar_type());
    invstd = at::rsqrt(running_var->to(compute.scalar_type()) + eps);
  }
  at::Tensor out = (compute - per_channel(mean, input)) * per_channel(invstd, input);
  if (weight && weight->defined()) out = out * per_channel(weight->to(out.scalar_type()), input);
  if (bias && bias->defined()) out = out + per_channel(bias->to(out.scalar_type()), input);
  if (!training) {
    // As on CPU: evaluation saves no statistics.
    at::Tensor none = at::empty({0}, input.options());
    return {out.to(input.scalar_type()), none, none.clone()};
  }
  return {out.to(input.scalar_type()), mean.to(input.scalar_type()),
          invstd.to(input.scalar_type())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd,
    bool train, double eps, std::array<bool, 3> output_mask) {
  auto axes = reduce_axes(input);
  // float32 for the half types, as the forward; float64 stays float64 (CPU's precision).
  const at::ScalarType acc = input.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor x = input.to(acc), g = grad_out.to(acc);
  at::Tensor mean = train ? save_mean->to(acc) : running_mean->to(acc);
  at::Tensor invstd = train ? save_invstd->to(acc) : at::rsqrt(running_var->to(acc) + eps);
  at::Tensor xhat = (x - per_channel(mean, input)) * per_channel(invstd, input);
  at::Tensor grad_bias = at::sum(g, axes);
  at::Tensor grad_weight = at::sum(g * xhat, axes);
  at::Tensor w = weight && weight->defined() ? weight->to(acc) : at::ones_like(mean);
  at::Tensor grad_input;
  if (output_mask[0]) {
    if (train) {
      int64_t count = input.numel() / input.size(1);
      at::Tensor mean_g = per_channel(grad_bias / count, input);
      at::Tensor mean_gx = per_channel(grad_weight / count, input);
      grad_input = (g - mean_g - xhat * mean_gx) * per_channel(invstd * w, input);
    } else {
      grad_input = g * per_channel(invstd * w, input);
    }
    grad_input = grad_input.to(input.scalar_type());
  }
  at::Tensor param_type = weight && weight->defined() ? *weight : input;
  return {grad_input, output_mask[1] ? grad_weight.to(param_type.scalar_type()) : at::Tensor(),
          output_mask[2] ? grad_bias.to(param_type.scalar_type()) : at::Tensor()};
}

// The forms AOTAutograd traces to (torch.compile): running statistics are annotated as
// mutated, which native_batch_norm already does in place.
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& running_mean, at::Tensor& running_var,
    bool training, double momentum, double eps) {
  return batch_norm_forward(input, weight, bias, running_mean, running_var, training, momentum,
                            eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit_no_stats(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, bool training, double momentum, double eps) {
  return batch_norm_forward(input, weight, bias, std::nullopt, std::nullopt, training, momentum,
                            eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit_no_training(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const at::Tensor& running_mean,
    const at::Tensor& running_var, double momentum, double eps) {
  return batch_norm_forward(input, weight, bias, running_mean, running_var, false, momentum, eps);
}

// The training forms torch's batch_norm calls since 2.4: statistics updated in place, and a
// reserve (cuDNN's workspace) that is empty here.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> batch_norm_with_update(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& running_mean, at::Tensor& running_var,
    double momentum, double eps) {
  auto [out, mean, invstd] =
      batch_norm_forward(input, weight, bias, running_mean, running_var, true, momentum, eps);
  return {out, mean, invstd, at::empty({0}, input.options().dtype(at::kByte))};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_with_update(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_var,
    bool update, double eps, std::array<bool, 3> output_mask, const at::Tensor& /*reserve*/) {
  std::optional<at::Tensor> w;
  if (weight.defined()) w = weight;
  return batch_norm_backward(grad_out, input, w, running_mean, running_var, save_mean, save_var,
                             update, eps, output_mask);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_batch_norm_with_update", TORCH_FN(batch_norm_with_update));
  m.impl("batch_norm_backward", TORCH_FN(batch_norm_backward_with_update));
  m.impl("native_batch_norm", TORCH_FN(batch_norm_forward));
  m.impl("_native_batch_norm_legit", TORCH_FN(batch_norm_legit));
  m.impl("_native_batch_norm_legit.no_stats", TORCH_FN(batch_norm_legit_no_stats));
  m.impl("_native_batch_norm_legit_no_training", TORCH_FN(batch_norm_legit_no_training));
  m.impl("native_batch_norm_backward", TORCH_FN(batch_norm_backward));
}

}  // namespace
}  // namespace torch_tpu::aten
