#include "csrc/dispatch/length_buckets.h"

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include <string_view>

#include "csrc/device/types.h"
#include "csrc/dispatch/bucket_buffers.h"
#include "csrc/dispatch/dispatcher.h"
#include "csrc/dispatch/metrics.h"
#include "csrc/dispatch/view_io.h"

namespace torch_tpu {

namespace {

// A grown tensor's bucket.
struct Grown {
  GrownLength grown;
  int64_t capacity = 0;
  std::shared_ptr<pjrt::Buffer> buffer;
  int64_t rows = 0;  // the length's bucket: capacity / (the storage's elements per position)
};

std::optional<Grown> grown_bucket(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.is_privateuseone() || tensor.is_conj() || tensor.is_neg() ||
      tensor.numel() == 0) {
    return std::nullopt;
  }
  DeviceStorage::Contents contents = device_storage(tensor).raw_contents();
  const int64_t length = contents.grown.length;
  if (!contents.bucket || length <= 0 || contents.type != to_element_type(tensor.scalar_type()) ||
      contents.bucket->dims().size() != 1) {
    return std::nullopt;
  }
  const int64_t elements = storage_elements(tensor);
  const int64_t capacity = contents.bucket->dims()[0];
  if (contents.grown.inner <= 0 || elements < length || elements % length != 0 ||
      capacity % (elements / length) != 0) {
    return std::nullopt;
  }
  return Grown{contents.grown, capacity, contents.bucket, capacity / (elements / length)};
}

// The view's sizes and strides as grown_views.h encodes them (the length's dim -1, strides
// that step over whole positions -c for c x length); `dims` gets the length's dims: those of
// its size that step from position to position (a head dim as long as the sequence is not one).
std::vector<int64_t> encode_view(const at::Tensor& view, const GrownLength& grown,
                                 std::vector<int64_t>& dims) {
  // Strides at least a position's span step over positions; those within a position are
  // smaller, whatever the length.
  const int64_t span = grown.length * grown.inner;
  std::vector<int64_t> encoded(2 * view.dim());
  for (int64_t d = 0; d < view.dim(); ++d) {
    const int64_t size = view.size(d), stride = view.stride(d);
    const bool length_dim = size == grown.length && stride == grown.inner;
    if (length_dim) dims.push_back(d);
    encoded[d] = length_dim ? -1 : size;
    encoded[view.dim() + d] =
        size == 1 ? 0 : (stride >= span && stride % span == 0 ? -(stride / grown.length) : stride);
  }
  return encoded;
}

std::string_view base_name(std::string_view op_name) {
  if (op_name.starts_with("aten::")) op_name.remove_prefix(6);
  return op_name.substr(0, op_name.find('.'));
}

}  // namespace

std::optional<GrownLength> grown_length(const at::Tensor& tensor) {
  std::optional<Grown> grown = grown_bucket(tensor);
  return grown ? std::optional<GrownLength>(grown->grown) : std::nullopt;
}

std::optional<std::vector<c10::IValue>> rows_in_bucket(const std::string& op_name,
                                                       const std::vector<c10::IValue>& args,
                                                       Redispatch redispatch) {
  // Which argument holds the rows, and how many of its last dims make a row.
  const std::string_view op = base_name(op_name);
  int row_arg = 0;
  size_t row_dims = 1;
  if (op == "addmm") {
    row_arg = 1;
    if (args.size() < 3 || !args[0].isTensor() || args[0].toTensor().dim() > 1) {
      return std::nullopt;  // a bias of a row's width, or none
    }
  } else if (op == "index_select") {
    row_arg = 2;  // the index: a row per position, its own dims none
    row_dims = 0;
    if (args.size() != 3 || !args[1].isInt() || args[1].toInt() != 0 || !args[2].isTensor() ||
        (args[2].toTensor().scalar_type() != at::kLong &&
         args[2].toTensor().scalar_type() != at::kInt) ||
        args[0].toTensor().size(0) == 0 || args[0].toTensor().is_complex()) {
      return std::nullopt;  // index_select's own checks stay with its exact form
    }
  } else if (op == "native_layer_norm") {
    if (args.size() < 2 || !args[1].isIntList()) return std::nullopt;
    row_dims = args[1].toIntVector().size();
  } else if (op == "_log_softmax" || op == "_softmax") {
    if (args.size() < 2 || !args[1].isInt() || !args[0].isTensor()) return std::nullopt;
    const int64_t rank = args[0].toTensor().dim();
    if (args[1].toInt() != rank - 1 && args[1].toInt() != -1) return std::nullopt;
  } else if (op != "mm") {
    return std::nullopt;
  }
  if (static_cast<int>(args.size()) <= row_arg || !args[row_arg].isTensor()) return std::nullopt;
  const at::Tensor& input = args[row_arg].toTensor();
  std::optional<Grown> grown = grown_bucket(input);
  if (!grown || !plain(input, input.numel()) || input.dim() < static_cast<int64_t>(row_dims) ||
      (op == "index_select" && input.dim() != 1)) {
    return std::nullopt;
  }
  const auto lead = static_cast<int64_t>(input.dim() - row_dims);
  const int64_t width = c10::multiply_integers(input.sizes().begin() + lead, input.sizes().end());
  // A row must lie within one position: the length's dim is not one of its dims.
  if (width == 0 || grown->grown.inner % width != 0 || grown->capacity % width != 0) {
    return std::nullopt;
  }
  const int64_t rows = grown->capacity / width;
  std::vector<int64_t> padded_sizes{rows};
  padded_sizes.insert(padded_sizes.end(), input.sizes().begin() + lead, input.sizes().end());
  at::Tensor padded = stand_in(input, grown->capacity, grown->buffer);
  padded.unsafeGetTensorImpl()->set_sizes_contiguous(padded_sizes);
  metrics().size_bucket_ops++;
  std::vector<c10::IValue> results;
  if (op == "index_select") {
    // One executable, which reads the index's rows past the length as 0: in range of any
    // table, so that they raise nothing.
    static const c10::FunctionSchema schema = torch::jit::parseSchema(
        "torch_tpu::bucket_rows_index_select(Tensor self, Tensor index, Scalar length) -> Tensor");
    // Keyed and named as the op called: a failed index check names it.
    results = run_lowering("aten::index_select (at a size bucket)",
                           find_lowering("@bucket_rows_index_select"), schema,
                           {args[0], padded, c10::Scalar(input.numel())});
  } else {
    std::vector<c10::IValue> inner = args;
    inner[row_arg] = padded;
    if (op == "_log_softmax" || op == "_softmax") inner[1] = static_cast<int64_t>(1);
    results = redispatch(inner);
  }
  for (c10::IValue& result : results) {
    if (!result.isTensor()) continue;
    const at::Tensor& tensor = result.toTensor();
    if (!tensor.defined() || tensor.dim() == 0 || tensor.size(0) != rows) continue;
    std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().begin() + lead);
    sizes.insert(sizes.end(), tensor.sizes().begin() + 1, tensor.sizes().end());
    const int64_t row_width = tensor.numel() / rows;
    at::Tensor exact = at::empty(sizes, tensor.options());
    take_as_bucket(tensor, exact, {grown->grown.length, grown->grown.inner / width * row_width});
    result = exact;
  }
  return results;
}

std::optional<std::vector<c10::IValue>> view_copy_in_bucket(const std::vector<c10::IValue>& args) {
  if (args.size() < 2 || !args[0].isTensor() || !args[1].isTensor()) return std::nullopt;
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& src = args[1].toTensor();
  if (!plain(self, self.numel()) || !src.defined() || src.scalar_type() != self.scalar_type() ||
      src.sizes() != self.sizes() || plain(src, src.numel())) {
    return std::nullopt;
  }
  std::optional<Grown> grown = grown_bucket(src);
  if (!grown) return std::nullopt;
  std::vector<int64_t> dims;
  std::vector<int64_t> view = encode_view(src, grown->grown, dims);
  if (dims.size() != 1) return std::nullopt;  // the length's dim unknown: exact sizes
  const int64_t length = grown->grown.length;
  const int64_t inner =
      c10::multiply_integers(self.sizes().begin() + dims[0] + 1, self.sizes().end());
  static const c10::FunctionSchema schema = torch::jit::parseSchema(
      "torch_tpu::bucket_view_copy(Tensor src, Scalar length, Scalar offset, int[] view, "
      "int capacity) -> Tensor");
  metrics().size_bucket_ops++;
  at::Tensor flat =
      run_lowering(
          "torch_tpu::bucket_view_copy", find_lowering("@bucket_view_copy"), schema,
          {bucket_stand_in(src, device_storage(src)), c10::Scalar(length),
           c10::Scalar(src.storage_offset()), view, grown->rows * (self.numel() / length)})[0]
          .toTensor();
  take_as_bucket(flat, self, {length, inner});
  return std::vector<c10::IValue>{self};
}

std::optional<std::vector<c10::IValue>> grown_attention_in_bucket(
    const std::vector<c10::IValue>& args) {
  // (query, key, value, attn_mask, is_causal, scale, dropout_p): no mask, no dropout.
  if (args.size() != 7 || !args[3].isNone() || args[6].toDouble() != 0.0) return std::nullopt;
  std::vector<c10::IValue> call(3);
  int64_t length = 0, rows = 0;
  std::vector<c10::IValue> offsets, views;
  for (int i = 0; i < 3; ++i) {
    if (!args[i].isTensor()) return std::nullopt;
    const at::Tensor& tensor = args[i].toTensor();
    std::optional<Grown> grown = grown_bucket(tensor);
    if (!grown || tensor.dim() != 4 || (length != 0 && grown->grown.length != length) ||
        (rows != 0 && grown->rows != rows)) {
      return std::nullopt;
    }
    length = grown->grown.length;
    rows = grown->rows;
    std::vector<int64_t> dims;
    views.emplace_back(encode_view(tensor, grown->grown, dims));
    if (dims != std::vector<int64_t>{2}) return std::nullopt;  // the sequence's dim only
    call[i] = bucket_stand_in(tensor, device_storage(tensor));
    offsets.emplace_back(c10::Scalar(tensor.storage_offset()));
  }
  const at::Tensor& query = args[0].toTensor();
  const int64_t batch = query.size(0), heads = query.size(1);
  const int64_t value_dim = args[2].toTensor().size(3);
  call.emplace_back(c10::Scalar(length));
  call.insert(call.end(), offsets.begin(), offsets.end());
  call.insert(call.end(), views.begin(), views.end());
  call.insert(call.end(),
              {rows, args[4], args[5], rows * batch * heads * value_dim, rows * batch * heads});
  static const c10::FunctionSchema schema = torch::jit::parseSchema(
      "torch_tpu::bucket_view_attention(Tensor query, Tensor key, Tensor value, Scalar length, "
      "Scalar query_offset, Scalar key_offset, Scalar value_offset, int[] query_view, "
      "int[] key_view, int[] value_view, int rows, bool is_causal, float scale, "
      "int output_capacity, int logsumexp_capacity) -> (Tensor output, Tensor logsumexp, "
      "Tensor seed, Tensor offset)");
  metrics().size_bucket_ops++;
  std::vector<c10::IValue> results = run_lowering(
      "torch_tpu::bucket_view_attention", find_lowering("@bucket_view_attention"), schema, call);
  at::Tensor output = at::empty({batch, heads, length, value_dim}, query.options());
  take_as_bucket(results[0].toTensor(), output, {length, value_dim});
  at::Tensor logsumexp = at::empty({batch, heads, length}, query.options().dtype(at::kFloat));
  take_as_bucket(results[1].toTensor(), logsumexp, {length, 1});
  results[0] = output;
  results[1] = logsumexp;
  return results;
}

}  // namespace torch_tpu
