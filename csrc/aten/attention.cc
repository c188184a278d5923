// scaled_dot_product_attention as one lowering each way. torch picks a backend per call
// through `_fused_sdp_choice_stub`; we answer "overrideable", so sdpa calls
// _scaled_dot_product_fused_attention_overrideable (and autograd its _backward), which run our
// own ops torch_tpu::attention / attention_backward: scores, softmax and both products in one
// executable (fused further under DeferAndFuse), with grouped-query heads, boolean or additive
// masks, causal masking and dropout. Dropout draws its keep-mask from the device generator;
// the generator state it drew from comes back as the op's philox seed and offset, and the
// backward draws the same mask again from them rather than storing it.
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "csrc/aten/common.h"
#include "csrc/aten/grown_views.h"

namespace torch_tpu::aten {
namespace {

// The shapes of one call: query [B, Hq, Lq, D], key [B, Hkv, Lk, D], value [B, Hkv, Lk, Dv].
// Query heads come in groups of Hq / Hkv that share a key/value head, so the products run on
// [B, Hkv, G, L, .] views and need no copies of key and value.
struct AttentionShape {
  int64_t batch, kv_heads, group, q_len, k_len, head_dim, value_dim;

  Shape grouped_query() const { return {batch, kv_heads, group, q_len, head_dim}; }
  Shape scores() const { return {batch, kv_heads, group, q_len, k_len}; }
  Shape grouped_rows() const { return {batch, kv_heads, group, q_len}; }
  Shape query_heads(int64_t last) const { return {batch, kv_heads * group, q_len, last}; }
};

AttentionShape attention_shape(const Value& q, const Value& k, const Value& v) {
  TORCH_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4,
              "scaled_dot_product_attention: expected 4-D query, key and value, got ", q.rank(),
              "-D, ", k.rank(), "-D and ", v.rank(), "-D");
  TORCH_CHECK(q.shape[1] % k.shape[1] == 0 && k.shape[1] == v.shape[1],
              "scaled_dot_product_attention: ", q.shape[1], " query heads cannot share ",
              k.shape[1], " key/value heads");
  return {q.shape[0], k.shape[1], q.shape[1] / k.shape[1], q.shape[2], k.shape[2],
          q.shape[3], v.shape[3]};
}

ElementType accumulation_type(ElementType type) {
  return type == ElementType::F64 ? ElementType::F64 : ElementType::F32;
}

// scale * q k^T, masked: [B, Hkv, G, Lq, Lk] in the accumulation type `acc`.
Value masked_scores(Builder& b, const AttentionShape& s, const Value& q, const Value& k,
                    const std::optional<Value>& mask, bool causal, double scale, ElementType acc) {
  Value grouped_q = b.reshape(b.convert(q, acc), s.grouped_query());
  Value scores = b.dot_general(grouped_q, b.convert(k, acc), {0, 1}, {0, 1}, {4}, {3}, acc);
  scores = b.multiply(scores, splat(b, scale, acc, s.scores()));
  Value minus_inf = splat(b, -INFINITY, acc, s.scores());
  if (mask) {
    Value heads_mask = b.reshape(
        broadcast_to(b, *mask, {s.batch, s.kv_heads * s.group, s.q_len, s.k_len}), s.scores());
    scores = mask->type == ElementType::Pred ? b.select(heads_mask, scores, minus_inf)
                                             : b.add(scores, b.convert(heads_mask, acc));
  }
  if (causal) {  // query i sees keys 0..i (top-left aligned, as torch's is_causal)
    Value row = b.iota(s.scores(), ElementType::S64, 3);
    Value column = b.iota(s.scores(), ElementType::S64, 4);
    scores = b.select(b.ge(row, column), scores, minus_inf);
  }
  return scores;
}

// exp(scores - logsumexp), with rows that see no key at all (logsumexp -inf) giving zeros,
// as torch's math path does.
Value probabilities(Builder& b, const AttentionShape& s, const Value& scores,
                    const Value& logsumexp) {
  Value lse = b.broadcast_in_dim(logsumexp, s.scores(), {0, 1, 2, 3});
  Value p = b.exponential(b.subtract(scores, lse));
  Value seen = b.gt(lse, splat(b, -INFINITY, scores.type, s.scores()));
  return b.select(seen, p, splat(b, 0, scores.type, s.scores()));
}

// Dropout's scaled keep-mask over the scores, drawn from generator state `state` ([2] u64):
// each element is kept with probability 1 - p and scaled by 1 / (1 - p).
Value dropout_scale(Builder& b, const AttentionShape& s, const Value& state, double p,
                    ElementType acc) {
  Value bits = b.rng_bit_generator(state, s.scores(), ElementType::U32).second;
  // Kept when the 32 random bits, read as a fraction of 2^32, are at least p.
  double threshold = std::min(std::floor(p * 4294967296.0), 4294967295.0);
  Value keep = b.ge(bits, b.constant(threshold, ElementType::U32, s.scores()));
  return b.select(keep, splat(b, 1.0 / (1.0 - p), acc, s.scores()), splat(b, 0, acc, s.scores()));
}

// The generator state as two 0-d int64 tensors (the op's philox seed and offset), and back.
std::pair<Value, Value> state_as_seed_and_offset(Builder& b, const Value& state) {
  auto half = [&](int64_t i) {
    return b.reshape(b.bitcast_convert(b.slice(state, {i}, {i + 1}, {1}), ElementType::S64), {});
  };
  return {half(0), half(1)};
}
Value state_of(Builder& b, const Value& seed, const Value& offset) {
  auto half = [&](const Value& x) {
    return b.bitcast_convert(b.reshape(x, {1}), ElementType::U64);
  };
  return b.concatenate({half(seed), half(offset)}, 0);
}

// The forward's results (output [B, Hq, Lq, Dv], logsumexp [B, Hq, Lq] float32, seed,
// offset) of attention over q, k and v with `mask` and causal masking.
Values attention_forward(LoweringContext& ctx, const Value& q, const Value& k, const Value& v,
                         const std::optional<Value>& mask, bool causal, double scale,
                         double dropout) {
  Builder& b = ctx.b;
  AttentionShape s = attention_shape(q, k, v);
  ElementType acc = accumulation_type(q.type);
  Value scores = masked_scores(b, s, q, k, mask, causal, scale, acc);
  Value peak = b.reduce(scores, b.constant(-INFINITY, acc), {4}, BinaryOp::Maximum);
  Value finite_peak = b.select(b.gt(peak, splat(b, -INFINITY, acc, s.grouped_rows())), peak,
                               splat(b, 0, acc, s.grouped_rows()));
  Value shifted = b.subtract(scores, b.broadcast_in_dim(finite_peak, s.scores(), {0, 1, 2, 3}));
  Value total = b.reduce(b.exponential(shifted), b.constant(0, acc), {4}, BinaryOp::Add);
  Value logsumexp = b.add(b.log(total), finite_peak);
  Value p = probabilities(b, s, scores, logsumexp);
  Value seed = b.constant_int(0, ElementType::S64), offset = seed;
  if (dropout > 0) {
    Value state = ctx.rng_state();
    std::tie(seed, offset) = state_as_seed_and_offset(b, state);
    p = b.multiply(p, dropout_scale(b, s, state, dropout, acc));
    ctx.random_bits(s.scores(), ElementType::U32);  // advances the generator past these bits
  }
  Value out = b.dot_general(p, b.convert(v, acc), {0, 1}, {0, 1}, {4}, {2}, acc);
  return Values{
      b.convert(b.reshape(out, s.query_heads(s.value_dim)), q.type),
      b.convert(b.reshape(logsumexp, {s.batch, s.kv_heads * s.group, s.q_len}), ElementType::F32),
      seed, offset};
}

// torch_tpu::attention(query, key, value, attn_mask, is_causal, scale, dropout_p)
//   -> (output [B, Hq, Lq, Dv], logsumexp [B, Hq, Lq] float32, seed, offset)
LOWER({"torch_tpu::attention"}, [](LoweringContext& ctx) {
  return attention_forward(ctx, ctx.tensor(0), ctx.tensor(1), ctx.tensor(2), ctx.optional_tensor(3),
                           ctx.arg(4).toBool(), ctx.arg(5).toDouble(), ctx.arg(6).toDouble());
});

// [batch, heads, capacity, width] from a flat buffer whose first elements are a contiguous
// [batch, heads, length, width] (length a runtime input): rows past length read as zeros.
Value rows_of_bucket(Builder& b, const Value& flat, const Value& length, int64_t batch,
                     int64_t heads, int64_t capacity, int64_t width) {
  const Shape shape{batch, heads, capacity, width};
  auto constant = [&](int64_t value) {
    return splat(b, static_cast<double>(value), ElementType::S64, shape);
  };
  auto position = [&](int64_t dim) { return b.iota(shape, ElementType::S64, dim); };
  Value rows = b.broadcast_in_dim(length, shape, {});
  Value head = b.add(b.multiply(position(0), constant(heads)), position(1));
  Value index =
      b.add(b.multiply(b.add(b.multiply(head, rows), position(2)), constant(width)), position(3));
  index = b.clamp(constant(0), index, constant(flat.shape[0] - 1));
  Value values =
      b.reshape(take_slices(b, flat, 0, b.reshape(index, {hlo::num_elements(shape)})), shape);
  return b.select(b.lt(position(2), rows), values, splat(b, 0, flat.type, shape));
}

// torch_tpu::bucket_attention(query, key, value, length, kv_heads, value_dim, scale): the
// attention above (no mask, not causal, no dropout) over keys and values grown in size buckets
// (dispatch/growing_buckets.h), given as the buckets' flat buffers, `length` of their rows
// real: the rest masked, so that one executable serves every length of the buckets.
LOWER({"@bucket_attention"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value q = ctx.tensor(0), key = ctx.tensor(1), value = ctx.tensor(2);
  Value length = ctx.scalar(3, ElementType::S64);
  const int64_t kv_heads = ctx.arg(4).toInt(), value_dim = ctx.arg(5).toInt();
  const int64_t batch = q.shape[0], head_dim = q.shape[3];
  const int64_t capacity = std::min(key.shape[0] / (batch * kv_heads * head_dim),
                                    value.shape[0] / (batch * kv_heads * value_dim));
  Value k = rows_of_bucket(b, key, length, batch, kv_heads, capacity, head_dim);
  Value v = rows_of_bucket(b, value, length, batch, kv_heads, capacity, value_dim);
  const Shape mask_shape{1, 1, 1, capacity};
  Value real =
      b.lt(b.iota(mask_shape, ElementType::S64, 3), b.broadcast_in_dim(length, mask_shape, {}));
  return attention_forward(ctx, q, k, v, real, false, ctx.arg(6).toDouble(), 0.0);
});

// torch_tpu::bucket_view_attention(query, key, value, length, query_offset, key_offset,
//   value_offset, query_view, key_view, value_view, rows, is_causal, scale, output_capacity,
//   logsumexp_capacity): the attention above (no mask, no dropout) over a whole sequence that
// grows with `length` (dispatch/length_buckets.h). Each input is a view of a bucket's flat
// buffer, its sequence dim the length's, read padded to `rows`; keys past the length are
// masked, and the output and logsumexp come back as the first elements of flat buffers in their
// exact contiguous order, so that one executable serves every length of the bucket.
LOWER({"@bucket_view_attention"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value length = ctx.scalar(3, ElementType::S64);
  const int64_t rows = ctx.arg(10).toInt();
  std::vector<Value> inputs;
  for (int i = 0; i < 3; ++i) {
    Value flat = ctx.tensor(i);
    Value offset = ctx.scalar(4 + i, ElementType::S64);
    Value padded = read_grown_view(b, flat, grown_view(ctx.arg(7 + i)), rows, length, offset);
    // Past the length a bucket holds whatever its producer left: a NaN there would reach the
    // output through a masked key's zero weight (0 x NaN), so those rows read as zeros.
    const Shape& shape = padded.shape;
    Value real = b.lt(b.iota(shape, ElementType::S64, 2), b.broadcast_in_dim(length, shape, {}));
    inputs.push_back(b.select(real, padded, splat(b, 0, padded.type, shape)));
  }
  const Shape mask_shape{1, 1, 1, rows};
  Value real =
      b.lt(b.iota(mask_shape, ElementType::S64, 3), b.broadcast_in_dim(length, mask_shape, {}));
  Values results = attention_forward(ctx, inputs[0], inputs[1], inputs[2], real,
                                     ctx.arg(11).toBool(), ctx.arg(12).toDouble(), 0.0);
  const Shape& out = results[0].shape;
  results[0] = pack_grown(b, results[0], {out[0], out[1], -1, out[3]}, length, ctx.arg(13).toInt());
  results[1] = pack_grown(b, results[1], {out[0], out[1], -1}, length, ctx.arg(14).toInt());
  return results;
});

// Sums `grad` ([B, Hq, Lq, Lk]) down to the mask's own (broadcast) shape.
Value reduce_to_mask_shape(Builder& b, const Value& grad, const Shape& mask_shape) {
  int64_t lead = grad.rank() - static_cast<int64_t>(mask_shape.size());
  std::vector<int64_t> summed;
  for (int64_t d = 0; d < grad.rank(); ++d) {
    if (d < lead || (mask_shape[d - lead] == 1 && grad.shape[d] != 1)) summed.push_back(d);
  }
  Value reduced = summed.empty() ? grad : sum(b, grad, summed);
  return b.reshape(reduced, mask_shape);
}

// torch_tpu::attention_backward(grad_out, query, key, value, attn_mask, output, logsumexp,
//   is_causal, scale, mask_grad, dropout_p, seed, offset)
//   -> (grad_query, grad_key, grad_value, grad_mask)
// The probabilities are recomputed from the saved logsumexp, and dropout's mask from the
// generator state forward drew it from, rather than kept from forward.
LOWER({"torch_tpu::attention_backward"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  Value grad_out = ctx.tensor(0), q = ctx.tensor(1), k = ctx.tensor(2), v = ctx.tensor(3);
  std::optional<Value> mask = ctx.optional_tensor(4);
  Value out = ctx.tensor(5), logsumexp = ctx.tensor(6);
  double scale = ctx.arg(8).toDouble();
  AttentionShape s = attention_shape(q, k, v);
  ElementType acc = accumulation_type(q.type);
  Value scores = masked_scores(b, s, q, k, mask, ctx.arg(7).toBool(), scale, acc);
  Value p = probabilities(b, s, scores, b.reshape(b.convert(logsumexp, acc), s.grouped_rows()));
  Shape grouped_out{s.batch, s.kv_heads, s.group, s.q_len, s.value_dim};
  Value d_out = b.reshape(b.convert(grad_out, acc), grouped_out);
  // dV = sum over the group and the queries of p^T dO; dP = dO V^T.
  // With dropout the output is (p * z) V, z the scaled keep-mask: dV sees p * z, and the
  // probabilities' gradient is z * dO V^T. rowsum(dO * O) below is still rowsum(p * that).
  double dropout = ctx.arg(10).toDouble();
  std::optional<Value> z;
  if (dropout > 0) {
    z = dropout_scale(b, s, state_of(b, ctx.tensor(11), ctx.tensor(12)), dropout, acc);
  }
  Value kept = z ? b.multiply(p, *z) : p;
  Value grad_v = b.dot_general(kept, d_out, {0, 1}, {0, 1}, {2, 3}, {2, 3}, acc);
  Value grad_p = b.dot_general(d_out, b.convert(v, acc), {0, 1}, {0, 1}, {4}, {3}, acc);
  if (z) grad_p = b.multiply(grad_p, *z);
  // dS = p * (dP - rowsum(dO * O)): the softmax's backward.
  Value row_dot = sum(b, b.multiply(d_out, b.reshape(b.convert(out, acc), grouped_out)), {4});
  Value grad_scores =
      b.multiply(p, b.subtract(grad_p, b.broadcast_in_dim(row_dot, s.scores(), {0, 1, 2, 3})));
  Value grad_logits = b.multiply(grad_scores, splat(b, scale, acc, s.scores()));
  Value grad_q = b.dot_general(grad_logits, b.convert(k, acc), {0, 1}, {0, 1}, {4}, {2}, acc);
  Value grouped_q = b.reshape(b.convert(q, acc), s.grouped_query());
  Value grad_k = b.dot_general(grad_logits, grouped_q, {0, 1}, {0, 1}, {2, 3}, {2, 3}, acc);
  Value grad_mask = splat(b, 0, q.type, {0});
  if (mask && ctx.arg(9).toBool() && mask->type != ElementType::Pred) {
    Shape heads_scores{s.batch, s.kv_heads * s.group, s.q_len, s.k_len};
    grad_mask = b.convert(
        reduce_to_mask_shape(b, b.reshape(grad_scores, heads_scores), mask->shape), mask->type);
  }
  return Values{b.convert(b.reshape(grad_q, s.query_heads(s.head_dim)), q.type),
                b.convert(grad_k, k.type), b.convert(grad_v, v.type), grad_mask};
});

// The scale sdpa uses when none is given: 1 / sqrt(head_dim).
double softmax_scale(const at::Tensor& query, std::optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
}

using AttentionSignature = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, bool,
    double, double);
const c10::TypedOperatorHandle<AttentionSignature>& attention_op() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torch_tpu::attention", "")
                       .typed<AttentionSignature>();
  return op;
}

using AttentionBackwardSignature = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
    const std::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&, bool, double, bool,
    double, const at::Tensor&, const at::Tensor&);
const c10::TypedOperatorHandle<AttentionBackwardSignature>& attention_backward_op() {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("torch_tpu::attention_backward", "")
                       .typed<AttentionBackwardSignature>();
  return op;
}

// `out` laid out in memory as `like` is (a [B, L, H, D] buffer seen as [B, H, L, D], say), as
// the ops' Meta kernels promise: compiled graphs view the results accordingly.
at::Tensor with_layout_of(const at::Tensor& like, const at::Tensor& out) {
  std::vector<int64_t> order(like.dim());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return like.stride(a) > like.stride(b); });
  if (std::is_sorted(order.begin(), order.end())) return out;
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[order[i]] = static_cast<int64_t>(i);
  return out.permute(order).contiguous().permute(inverse);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
fused_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                bool return_debug_mask, std::optional<double> scale) {
  TORCH_CHECK(!return_debug_mask, "torch_tpu: fused attention has no debug mask");
  auto [out, logsumexp, seed, offset] = attention_op().call(query, key, value, attn_bias, is_causal,
                                                            softmax_scale(query, scale), dropout_p);
  out = with_layout_of(query, out);
  // The auxiliary results the op's Meta kernel describes, so compiled graphs see what eager
  // returns: no cumulative lengths or debug mask; 0-d seed and offset (dropout's generator
  // state, zeros without dropout).
  return {out,
          logsumexp,
          at::Tensor(),
          at::Tensor(),
          c10::SymInt(query.size(2)),
          c10::SymInt(key.size(2)),
          seed,
          offset,
          at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor&, const at::Tensor&,
    c10::SymInt, c10::SymInt, double dropout_p, bool is_causal, const at::Tensor& seed,
    const at::Tensor& offset, std::optional<double> scale) {
  if (!grad_out.defined()) return {};  // no gradient reached the output: none flows back
  std::optional<at::Tensor> mask =
      attn_bias.defined() ? std::optional<at::Tensor>(attn_bias) : std::nullopt;
  auto [grad_q, grad_k, grad_v, grad_mask] = attention_backward_op().call(
      grad_out.contiguous(), query, key, value, mask, out, logsumexp, is_causal,
      softmax_scale(query, scale), grad_input_mask[3], dropout_p, seed, offset);
  return {with_layout_of(query, grad_q), with_layout_of(key, grad_k), with_layout_of(value, grad_v),
          grad_input_mask[3] && mask ? grad_mask : at::Tensor()};
}

// Our lowering serves every call but those whose heads do not group (the math path raises
// torch's own error), dropout_p >= 1 (all dropped; the math path answers) and those where the
// user turned the overrideable backend off (torch.nn.attention.sdpa_kernel).
int64_t choose_attention_backend(const at::Tensor& query, const at::Tensor& key,
                                 const at::Tensor& value, const std::optional<at::Tensor>& mask,
                                 double dropout_p, bool, std::optional<double>, bool enable_gqa) {
  auto math = static_cast<int64_t>(at::SDPBackend::math);
  if (!at::globalContext().userEnabledOverrideableSDP() || dropout_p >= 1.0) return math;
  if (query.dim() != 4 || key.dim() != 4 || value.dim() != 4) return math;
  if (key.size(1) != value.size(1) || query.size(1) % key.size(1) != 0) return math;
  if (query.size(1) != key.size(1) && !enable_gqa) return math;
  if (mask && mask->defined() && mask->dim() > 4) return math;
  return static_cast<int64_t>(at::SDPBackend::overrideable);
}

TORCH_LIBRARY_FRAGMENT(torch_tpu, m) {
  m.def(
      "attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask, bool is_causal, "
      "float scale, float dropout_p) -> (Tensor output, Tensor logsumexp, Tensor seed, "
      "Tensor offset)");
  m.def(
      "attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, "
      "Tensor? attn_mask, Tensor output, Tensor logsumexp, bool is_causal, float scale, "
      "bool mask_grad, float dropout_p, Tensor seed, Tensor offset) -> (Tensor grad_query, "
      "Tensor grad_key, Tensor grad_value, Tensor grad_mask)");
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", &fused_attention);
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", &fused_attention_backward);
}

}  // namespace
}  // namespace torch_tpu::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_tpu::aten::choose_attention_backend);
}  // namespace at::native
