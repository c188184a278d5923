// The fused "fast path" ops that nn.TransformerEncoderLayer (eval, no grad, batch_first) and
// torch._native_multi_head_attention call on cpu, cuda and the PrivateUse1 device. ATen has
// kernels for CPU and CUDA only, so these compose them from ops the device has. The math follows
// ATen's CPU kernels (aten/src/ATen/native/transformers/{attention,transformer}.cpp): q is
// scaled before q k^T, a float mask counts as "masked" where it is nonzero. A row whose keys are
// all masked attends to nothing and gives zeros (what the non-fast path gives; ATen's CPU kernel
// leaves it undefined).
#include <ATen/core/Tensor.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

namespace torch_tpu::aten {
namespace {

// A [B, H, L, S] boolean "masked" tensor from a fast-path mask, by ATen's mask types:
// 0: [L, S] for every batch and head; 1: [B, S] key padding; 2: [B, H or 1, L, S].
at::Tensor masked_positions(const at::Tensor& mask, std::optional<int64_t> mask_type, int64_t batch,
                            int64_t keys) {
  at::Tensor masked = mask.scalar_type() == at::kBool ? mask : mask.ne(0);
  if (mask_type == 1) return masked.view({batch, 1, 1, keys});
  if (masked.dim() == 2) return masked.view({1, 1, masked.size(0), keys});
  if (masked.dim() == 3) return masked.view({batch, -1, masked.size(1), keys});
  TORCH_CHECK(masked.dim() == 4,
              "_native_multi_head_attention: expected a 2-D, 3-D or 4-D mask, got ",
              masked.sizes());
  return masked;
}

std::tuple<at::Tensor, at::Tensor> multi_head_attention(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t embed_dim,
    int64_t heads, const at::Tensor& qkv_weight, const at::Tensor& qkv_bias,
    const at::Tensor& proj_weight, const at::Tensor& proj_bias,
    const std::optional<at::Tensor>& mask, bool need_weights, bool average_weights,
    std::optional<int64_t> mask_type) {
  TORCH_CHECK(!query.is_nested(),
              "_native_multi_head_attention: nested tensors are not supported on tpu");
  TORCH_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3,
              "_native_multi_head_attention: expected 3-D query, key and value, got ",
              query.sizes(), ", ", key.sizes(), " and ", value.sizes());
  TORCH_CHECK(query.sizes() == key.sizes() && key.sizes() == value.sizes(),
              "expected `query`/`key`/`value` shapes to match");
  TORCH_CHECK(query.size(2) == embed_dim && embed_dim % heads == 0,
              "_native_multi_head_attention: embed_dim ", embed_dim,
              " must be the query's last size (", query.size(2), ") and divisible by num_head ",
              heads);
  TORCH_CHECK(
      qkv_weight.dim() == 2 && qkv_weight.size(0) == 3 * embed_dim,
      "_native_multi_head_attention: expected qkv_weight of shape [3 * embed_dim, embed_dim], got ",
      qkv_weight.sizes());
  const int64_t batch = query.size(0), length = query.size(1), keys = key.size(1);
  const int64_t head_dim = embed_dim / heads;
  const std::vector<at::Tensor> weights = qkv_weight.chunk(3, 0);
  const std::vector<at::Tensor> biases = qkv_bias.chunk(3, 0);
  // [B, T, E] -> [B, H, T, D]
  auto split_heads = [&](const at::Tensor& x) {
    return x.view({batch, x.size(1), heads, head_dim}).transpose(1, 2);
  };
  at::Tensor q =
      split_heads(at::linear(query, weights[0], biases[0]).mul(1.0 / std::sqrt(double(head_dim))));
  at::Tensor k = split_heads(at::linear(key, weights[1], biases[1]));
  at::Tensor v = split_heads(at::linear(value, weights[2], biases[2]));
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1));  // [B, H, L, S]
  at::Tensor probs;
  if (mask.has_value() && mask->defined()) {
    at::Tensor masked = masked_positions(*mask, mask_type, batch, keys);
    const at::Tensor minus_inf = at::full_like(scores, -std::numeric_limits<double>::infinity());
    probs = at::softmax(at::where(masked, minus_inf, scores), -1);
    // All keys masked: softmax of -inf is NaN; such a row attends to nothing.
    probs =
        at::where(masked.expand_as(scores).all(-1, true), at::zeros({}, probs.options()), probs);
  } else {
    probs = at::softmax(scores, -1);
  }
  at::Tensor context = at::matmul(probs, v).transpose(1, 2).reshape({batch, length, embed_dim});
  at::Tensor out = at::linear(context, proj_weight, proj_bias);
  if (!need_weights) return {out, at::Tensor()};
  return {out, average_weights ? probs.sum(1).div(heads) : probs};
}

at::Tensor encoder_layer(const at::Tensor& src, int64_t embed_dim, int64_t heads,
                         const at::Tensor& qkv_weight, const at::Tensor& qkv_bias,
                         const at::Tensor& proj_weight, const at::Tensor& proj_bias, bool use_gelu,
                         bool norm_first, double eps, const at::Tensor& norm_weight_1,
                         const at::Tensor& norm_bias_1, const at::Tensor& norm_weight_2,
                         const at::Tensor& norm_bias_2, const at::Tensor& ffn_weight_1,
                         const at::Tensor& ffn_bias_1, const at::Tensor& ffn_weight_2,
                         const at::Tensor& ffn_bias_2, const std::optional<at::Tensor>& mask,
                         std::optional<int64_t> mask_type) {
  TORCH_CHECK(!src.is_nested(),
              "_transformer_encoder_layer_fwd: nested tensors are not supported on tpu");
  if (src.numel() == 0) return src.clone();
  auto norm = [&](const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
    return at::layer_norm(x, {embed_dim}, weight, bias, eps);
  };
  at::Tensor x = norm_first ? norm(src, norm_weight_1, norm_bias_1) : src;
  x = std::get<0>(multi_head_attention(x, x, x, embed_dim, heads, qkv_weight, qkv_bias, proj_weight,
                                       proj_bias, mask, false, true, mask_type))
          .add(src);
  if (!norm_first) x = norm(x, norm_weight_1, norm_bias_1);
  const at::Tensor residual = x;
  if (norm_first) x = norm(x, norm_weight_2, norm_bias_2);
  x = at::linear(x, ffn_weight_1, ffn_bias_1);
  x = use_gelu ? at::gelu(x) : at::relu(x);
  x = at::linear(x, ffn_weight_2, ffn_bias_2).add(residual);
  return norm_first ? x : norm(x, norm_weight_2, norm_bias_2);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_native_multi_head_attention", TORCH_FN(multi_head_attention));
  m.impl("_transformer_encoder_layer_fwd", TORCH_FN(encoder_layer));
}

}  // namespace
}  // namespace torch_tpu::aten
