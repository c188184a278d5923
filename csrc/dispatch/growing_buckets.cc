#include "csrc/dispatch/growing_buckets.h"

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include "csrc/device/storage.h"
#include "csrc/device/types.h"
#include "csrc/dispatch/bucket_buffers.h"
#include "csrc/dispatch/bucket_rule.h"
#include "csrc/dispatch/dispatcher.h"
#include "csrc/dispatch/metrics.h"

namespace torch_tpu {

namespace {

// `parts` concatenated along rows of `outer` into a flat buffer of `bucket` elements (zeros
// past their total): the first part read from its own bucket where `first_in_bucket` (its
// length then a runtime input).
at::Tensor cat_into_bucket(const std::vector<at::Tensor>& parts, bool first_in_bucket,
                           int64_t bucket, int64_t outer) {
  static const c10::FunctionSchema schema = torch::jit::parseSchema(
      "torch_tpu::bucket_cat(Tensor first, Tensor[] rest, Scalar length, int bucket, int outer) "
      "-> Tensor");
  const at::Tensor& first = parts[0];
  at::Tensor first_flat = first_in_bucket ? bucket_stand_in(first, device_storage(first)) : first;
  std::vector<at::Tensor> rest(parts.begin() + 1, parts.end());
  return run_lowering("torch_tpu::bucket_cat", find_lowering("@bucket_cat"), schema,
                      {first_flat, c10::List<at::Tensor>(rest), c10::Scalar(first.numel()), bucket,
                       outer})[0]
      .toTensor();
}

// Where `tensor` is a contiguous key or value whose storage is the start of a longer bucket:
// that bucket's stand-in.
std::optional<at::Tensor> grown_in_bucket(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.is_privateuseone() || tensor.dim() != 4 ||
      !plain(tensor, tensor.numel())) {
    return std::nullopt;
  }
  const DeviceStorage& storage = device_storage(tensor);
  const int64_t length = bucket_length_of(storage, to_element_type(tensor.scalar_type()));
  if (length == 0 || length < tensor.numel()) return std::nullopt;
  return bucket_stand_in(tensor, storage);
}

}  // namespace

std::optional<std::vector<c10::IValue>> cat_in_bucket(const std::string& op_name,
                                                      const std::vector<c10::IValue>& args) {
  if (args.size() != 2 || !args[0].isTensorList() || !args[1].isInt()) return std::nullopt;
  const std::vector<at::Tensor> parts = args[0].toTensorVector();
  if (parts.size() < 2 || !parts[0].defined()) return std::nullopt;
  const at::Tensor& first = parts[0];
  const int64_t rank = first.dim();
  int64_t dim = args[1].toInt();
  if (rank == 0 || dim < -rank || dim >= rank) return std::nullopt;
  if (dim < 0) dim += rank;
  std::vector<int64_t> sizes = first.sizes().vec();
  sizes[dim] = 0;
  int64_t length = 0;
  for (const at::Tensor& part : parts) {
    if (!part.defined() || !part.is_privateuseone() || part.dim() != rank ||
        part.scalar_type() != first.scalar_type() || part.is_conj() || part.is_neg()) {
      return std::nullopt;
    }
    for (int64_t d = 0; d < rank; ++d) {
      if (d != dim && part.size(d) != first.size(d)) {
        return std::nullopt;
      }
    }
    sizes[dim] += part.size(dim);
    length += part.numel();
  }
  const int64_t bucket = bucket_length(length);
  const int64_t outer = c10::multiply_integers(first.sizes().begin(), first.sizes().begin() + dim);
  if (first.numel() == 0 || bucket > kEagerLargestBucket) return std::nullopt;
  const hlo::ElementType type = to_element_type(first.scalar_type());
  const int64_t first_bucket =
      plain(first, first.numel()) ? bucket_length_of(device_storage(first), type) : 0;
  const bool first_in_bucket = first_bucket > 0 && first_bucket <= bucket;
  if (!first_in_bucket && !fill_uses_bucket(op_name, first.scalar_type(), bucket, sizes, length)) {
    return std::nullopt;
  }
  metrics().size_bucket_ops++;
  // Under DeferAndFuse the cat joins the pending graph, its result a pending bucket that the
  // graph's later ops read from (attention, views) and the next step's graph reads once run.
  at::Tensor flat = cat_into_bucket(parts, first_in_bucket, bucket, outer);
  at::Tensor result = at::empty(sizes, first.options());
  // The cat's dim is the length the tensors computed from it grow with (length_buckets.h).
  take_as_bucket(flat, result,
                 {sizes[dim], c10::multiply_integers(sizes.begin() + dim + 1, sizes.end())});
  return std::vector<c10::IValue>{result};
}

std::optional<std::vector<c10::IValue>> attention_in_bucket(const std::vector<c10::IValue>& args) {
  if (args.size() != 7 || !args[0].isTensor() || !args[1].isTensor() || !args[2].isTensor()) {
    return std::nullopt;
  }
  // A mask, causal masking and dropout keep their exact-size path: a decoding step has none.
  if (!args[3].isNone() || args[4].toBool() || args[6].toDouble() != 0.0) return std::nullopt;
  const at::Tensor& query = args[0].toTensor();
  const at::Tensor& key = args[1].toTensor();
  const at::Tensor& value = args[2].toTensor();
  // One query a sequence: a decoding step. (Other calls keep the exact path's numerics, which
  // tests of training-sized attention hold to float32's last bits.)
  if (!query.defined() || query.dim() != 4 || query.size(2) != 1 || key.dim() != 4 ||
      value.dim() != 4 || key.size(0) != query.size(0) || value.size(0) != query.size(0) ||
      key.size(1) != value.size(1) || key.size(2) != value.size(2) ||
      key.scalar_type() != value.scalar_type()) {
    return std::nullopt;
  }
  std::optional<at::Tensor> key_bucket = grown_in_bucket(key);
  std::optional<at::Tensor> value_bucket = key_bucket ? grown_in_bucket(value) : std::nullopt;
  if (!value_bucket) return std::nullopt;
  static const c10::FunctionSchema schema = torch::jit::parseSchema(
      "torch_tpu::bucket_attention(Tensor query, Tensor key, Tensor value, Scalar length, "
      "int kv_heads, int value_dim, float scale) -> (Tensor output, Tensor logsumexp, "
      "Tensor seed, Tensor offset)");
  metrics().size_bucket_ops++;
  return run_lowering("torch_tpu::bucket_attention", find_lowering("@bucket_attention"), schema,
                      {query, *key_bucket, *value_bucket, c10::Scalar(key.size(2)), key.size(1),
                       value.size(3), args[5].toDouble()});
}

}  // namespace torch_tpu
