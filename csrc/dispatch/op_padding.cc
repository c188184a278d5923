#include "csrc/dispatch/op_padding.h"

#include <array>
#include <limits>
#include <string>
#include <unordered_map>

namespace torch_tpu {
namespace {

using K = BucketKind;
using R = Reduction;

// Where a row has a rule on one path only, either the path cannot run it (eager buckets are
// flat 1-d buffers: no tril, no layout; eager fills are in-place, compiled graphs functional) or
// the other path has not been tried with it yet: adding it there changes what that path pads.
constexpr auto kTable = std::to_array<OpPadding>({
    // Pointwise on both paths.
    {"abs", K::Pointwise, K::Pointwise},
    {"add", K::Pointwise, K::Pointwise},
    {"bitwise_and", K::Pointwise, K::Pointwise},
    {"bitwise_not", K::Pointwise, K::Pointwise},
    {"bitwise_or", K::Pointwise, K::Pointwise},
    {"bitwise_xor", K::Pointwise, K::Pointwise},
    {"clamp", K::Pointwise, K::Pointwise},
    {"clamp_max", K::Pointwise, K::Pointwise},
    {"clamp_min", K::Pointwise, K::Pointwise},
    {"cos", K::Pointwise, K::Pointwise},
    {"div", K::Pointwise, K::Pointwise},
    {"eq", K::Pointwise, K::Pointwise},
    {"erf", K::Pointwise, K::Pointwise},
    {"exp", K::Pointwise, K::Pointwise},
    {"expm1", K::Pointwise, K::Pointwise},
    {"ge", K::Pointwise, K::Pointwise},
    {"gelu", K::Pointwise, K::Pointwise},
    {"gt", K::Pointwise, K::Pointwise},
    {"le", K::Pointwise, K::Pointwise},
    {"log", K::Pointwise, K::Pointwise},
    {"log1p", K::Pointwise, K::Pointwise},
    {"logical_and", K::Pointwise, K::Pointwise},
    {"logical_not", K::Pointwise, K::Pointwise},
    {"logical_or", K::Pointwise, K::Pointwise},
    {"lt", K::Pointwise, K::Pointwise},
    {"maximum", K::Pointwise, K::Pointwise},
    {"minimum", K::Pointwise, K::Pointwise},
    {"mul", K::Pointwise, K::Pointwise},
    {"ne", K::Pointwise, K::Pointwise},
    {"neg", K::Pointwise, K::Pointwise},
    {"pow", K::Pointwise, K::Pointwise},
    {"reciprocal", K::Pointwise, K::Pointwise},
    {"relu", K::Pointwise, K::Pointwise},
    {"rsqrt", K::Pointwise, K::Pointwise},
    {"sigmoid", K::Pointwise, K::Pointwise},
    {"sign", K::Pointwise, K::Pointwise},
    {"silu", K::Pointwise, K::Pointwise},
    {"sin", K::Pointwise, K::Pointwise},
    {"sqrt", K::Pointwise, K::Pointwise},
    {"sub", K::Pointwise, K::Pointwise},
    {"tanh", K::Pointwise, K::Pointwise},
    {"where", K::Pointwise, K::Pointwise},
    // Pointwise, so far at eager buckets only.
    {"atan2", K::Pointwise, K::None},
    {"ceil", K::Pointwise, K::None},
    {"exp2", K::Pointwise, K::None},
    {"floor", K::Pointwise, K::None},
    {"fmax", K::Pointwise, K::None},
    {"fmin", K::Pointwise, K::None},
    {"fmod", K::Pointwise, K::None},
    {"frac", K::Pointwise, K::None},
    {"hardtanh", K::Pointwise, K::None},
    {"hypot", K::Pointwise, K::None},
    {"leaky_relu", K::Pointwise, K::None},
    {"log10", K::Pointwise, K::None},
    {"log2", K::Pointwise, K::None},
    {"logical_xor", K::Pointwise, K::None},
    {"nan_to_num", K::Pointwise, K::None},
    {"remainder", K::Pointwise, K::None},
    {"tan", K::Pointwise, K::None},
    {"trunc", K::Pointwise, K::None},
    // Pointwise, so far in compiled graphs only (random ones draw per position of the padded
    // shape; tril/triu read positions, which padding at the end leaves where they were).
    {"_to_copy", K::None, K::Pointwise},
    {"addcdiv", K::None, K::Pointwise},
    {"addcmul", K::None, K::Pointwise},
    {"alias", K::None, K::Pointwise},
    {"clone", K::None, K::Pointwise},
    {"detach", K::None, K::Pointwise},
    {"empty_like", K::None, K::Pointwise},
    {"full_like", K::None, K::Pointwise},
    {"gelu_backward", K::None, K::Pointwise},
    {"lerp", K::None, K::Pointwise},
    {"lift_fresh_copy", K::None, K::Pointwise},
    {"masked_fill", K::None, K::Pointwise},
    {"native_dropout", K::None, K::Pointwise},
    {"native_dropout_backward", K::None, K::Pointwise},
    {"ones_like", K::None, K::Pointwise},
    {"rand_like", K::None, K::Pointwise},
    {"randn_like", K::None, K::Pointwise},
    {"rsub", K::None, K::Pointwise},
    {"sigmoid_backward", K::None, K::Pointwise},
    {"silu_backward", K::None, K::Pointwise},
    {"square", K::None, K::Pointwise},
    {"tanh_backward", K::None, K::Pointwise},
    {"threshold_backward", K::None, K::Pointwise},
    {"tril", K::None, K::Pointwise},
    {"triu", K::None, K::Pointwise},
    {"zeros_like", K::None, K::Pointwise},
    // Eager copy_ and fill_ overwrite self in place; a compiled graph's functional copy and fill
    // carry self's padding along.
    {"copy", K::Copy, K::Pointwise},
    {"fill", K::Fill, K::Pointwise},
    // Fills: eager's in-place ones, a compiled graph's factories (their sizes padded).
    {"bernoulli", K::Fill, K::None},
    {"cauchy", K::Fill, K::None},
    {"exponential", K::Fill, K::None},
    {"geometric", K::Fill, K::None},
    {"log_normal", K::Fill, K::None},
    {"normal", K::Fill, K::None},
    {"random", K::Fill, K::None},
    {"uniform", K::Fill, K::None},
    {"zero", K::Fill, K::None},
    {"arange", K::None, K::Fill},
    {"empty", K::None, K::Fill},
    {"full", K::None, K::Fill},
    {"ones", K::None, K::Fill},
    {"rand", K::None, K::Fill},
    {"randn", K::None, K::Fill},
    {"scalar_tensor", K::None, K::Fill},
    {"zeros", K::None, K::Fill},
    // Layout: in compiled graphs. An eager cat grows a tensor in its bucket.
    {"_unsafe_view", K::None, K::Layout},
    {"cat", K::Cat, K::Layout},
    // Our fused attention reads keys and values that eager cats grew in buckets.
    {"torch_tpu::attention", K::Attention, K::None},
    // A recommendation model's jagged indices, uploaded into buckets (jagged_buckets.h).
    {"_embedding_bag", K::Bags, K::None},
    {"_embedding_bag_dense_backward", K::Bags, K::None},
    {"_embedding_bag_forward_only", K::Bags, K::None},
    {"_embedding_bag_per_sample_weights_backward", K::Bags, K::None},
    // Jagged batches permuted by position (fbgemm's permute_2D_sparse_data on tpu).
    {"index_select", K::Lookup, K::None},
    {"searchsorted", K::Lookup, K::None},
    {"expand", K::None, K::Layout},
    {"permute", K::None, K::Layout},
    {"reshape", K::None, K::Layout},
    {"select", K::None, K::Layout},
    {"slice", K::None, K::Layout},
    {"split", K::None, K::Layout},
    {"split_with_sizes", K::None, K::Layout},
    {"squeeze", K::None, K::Layout},
    {"stack", K::None, K::Layout},
    {"t", K::None, K::Layout},
    {"transpose", K::None, K::Layout},
    {"unbind", K::None, K::Layout},
    {"unsqueeze", K::None, K::Layout},
    {"view", K::None, K::Layout},
    // Reductions (eager: full ones only) and prefix scans, with the neutral element padding
    // reads as. mean divides by the real count (_bucketing.py).
    {"all", K::Reduce, K::None, R::All},
    {"amax", K::None, K::Reduce, R::Max},
    {"amin", K::None, K::Reduce, R::Min},
    {"any", K::Reduce, K::Reduce, R::Any},
    {"argmax", K::None, K::Reduce, R::Max},
    {"argmin", K::None, K::Reduce, R::Min},
    {"logsumexp", K::None, K::Reduce, R::Max},
    {"max", K::Reduce, K::None, R::Max},
    {"mean", K::None, K::Reduce, R::Sum},
    {"min", K::Reduce, K::None, R::Min},
    {"prod", K::Reduce, K::Reduce, R::Prod},
    {"sum", K::Reduce, K::Reduce, R::Sum},
    {"cumprod", K::Scan, K::None, R::Prod},
    {"cumsum", K::Scan, K::Scan, R::Sum},
    // Eager scatters whose target keeps its exact length.
    {"_index_put_impl_", K::IndexPut, K::None},
    {"index_put", K::IndexPut, K::None},
    // Matrix products and ops with a rule of their own in compiled graphs. Eager runs those
    // that treat rows apart at a sequence's bucket of rows (length_buckets.h).
    {"addmm", K::Rows, K::Contract},
    {"baddbmm", K::None, K::Contract},
    {"bmm", K::None, K::Contract},
    {"mm", K::Rows, K::Contract},
    {"_log_softmax", K::Rows, K::Own},
    {"_log_softmax_backward_data", K::None, K::Own},
    {"_softmax", K::Rows, K::Own},
    {"_softmax_backward_data", K::None, K::Own},
    {"embedding", K::None, K::Own},
    {"embedding_dense_backward", K::None, K::Own},
    {"native_layer_norm", K::Rows, K::Own},
    {"native_layer_norm_backward", K::None, K::Own},
    {"nll_loss_backward", K::None, K::Own},
    {"nll_loss_forward", K::None, K::Own},
    {"select_backward", K::None, K::Own},
    {"slice_backward", K::None, K::Own},
    {"sym_numel", K::None, K::Own},
    {"sym_size", K::None, K::Own},
});

}  // namespace

std::span<const OpPadding> op_paddings() { return kTable; }

const OpPadding* find_op_padding(std::string_view op) {
  static const std::unordered_map<std::string_view, const OpPadding*> by_name = [] {
    std::unordered_map<std::string_view, const OpPadding*> rows;
    for (const OpPadding& row : kTable) rows.emplace(row.op, &row);
    return rows;
  }();
  auto found = by_name.find(op);
  return found == by_name.end() ? nullptr : found->second;
}

std::optional<c10::Scalar> neutral(Reduction reduction, c10::ScalarType dtype) {
  switch (reduction) {
    case Reduction::Sum:
      return c10::isFloatingType(dtype) ? c10::Scalar(-0.0) : c10::Scalar(0);
    case Reduction::Prod:
    case Reduction::All:
      return c10::Scalar(1);
    case Reduction::Any:
      return c10::Scalar(0);
    case Reduction::Max:
    case Reduction::Min:
      break;
    case Reduction::None:
      return std::nullopt;
  }
  const bool lowest = reduction == Reduction::Max;
  if (dtype == c10::kBool) return c10::Scalar(!lowest);
  if (c10::isFloatingType(dtype)) {
    const double inf = std::numeric_limits<double>::infinity();
    return c10::Scalar(lowest ? -inf : inf);
  }
  auto limit = [lowest]<typename T>(T) {
    return c10::Scalar(static_cast<int64_t>(lowest ? std::numeric_limits<T>::lowest()
                                                   : std::numeric_limits<T>::max()));
  };
  switch (dtype) {
    case c10::kByte:
      return limit(uint8_t{});
    case c10::kChar:
      return limit(int8_t{});
    case c10::kShort:
      return limit(int16_t{});
    case c10::kInt:
      return limit(int32_t{});
    case c10::kLong:
      return limit(int64_t{});
    default:
      return std::nullopt;
  }
}

}  // namespace torch_tpu
