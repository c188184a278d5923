#include "csrc/dispatch/jagged_buckets.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include <string_view>
#include <unordered_set>

#include "csrc/device/storage.h"
#include "csrc/device/types.h"
#include "csrc/dispatch/bucket_buffers.h"
#include "csrc/dispatch/bucket_rule.h"
#include "csrc/dispatch/dispatcher.h"
#include "csrc/dispatch/meta_checks.h"
#include "csrc/dispatch/metrics.h"
#include "csrc/dispatch/view_io.h"

namespace torch_tpu {

namespace {

// A 1-d tensor read as a run of a storage held in a bucket: the bucket's stand-in and where
// the run starts in it.
struct Run {
  at::Tensor flat;
  int64_t start = 0;
};

std::optional<Run> run_in_bucket(const at::Tensor& tensor, int64_t count) {
  if (!tensor.defined() || !tensor.is_privateuseone() || tensor.dim() != 1 ||
      tensor.numel() != count || (count > 1 && tensor.stride(0) != 1) || tensor.is_conj() ||
      tensor.is_neg()) {
    return std::nullopt;
  }
  const DeviceStorage& storage = device_storage(tensor);
  int64_t bucket = bucket_length_of(storage, to_element_type(tensor.scalar_type()));
  at::Tensor flat;
  if (bucket > 0) {
    flat = bucket_stand_in(tensor, storage);
  } else {
    // A storage of a bucket's length is its own bucket (an upload of exactly that length).
    bucket = storage_elements(tensor);
    if (bucket != bucket_length(bucket)) return std::nullopt;
    flat = tensor.as_strided({bucket}, {1}, 0);
  }
  if (bucket < tensor.storage_offset() + count) return std::nullopt;
  return Run{flat, tensor.storage_offset()};
}

// The run's two arguments (flat, start); an absent optional tensor's are (None, 0).
void add_run(std::vector<c10::IValue>& args, const std::optional<Run>& run) {
  args.emplace_back(run ? c10::IValue(run->flat) : c10::IValue());
  args.emplace_back(c10::Scalar(run ? run->start : 0));
}

// The optional per-sample weights at args[index], read as a run where given: false where they
// are given but not held in a bucket.
bool weights_run(const std::vector<c10::IValue>& args, size_t index, int64_t count,
                 std::optional<Run>& run) {
  if (args[index].isNone() || (args[index].isTensor() && !args[index].toTensor().defined())) {
    return true;
  }
  run = args[index].isTensor() ? run_in_bucket(args[index].toTensor(), count) : std::nullopt;
  return run.has_value();
}

// `flat` (a result of the window's length) as a tensor of `count` elements over its bucket.
at::Tensor over_bucket(const at::Tensor& flat, int64_t count) {
  at::Tensor result = at::empty({count}, flat.options());
  take_as_bucket(flat, result);
  return result;
}

// The bucketed lowering of `op`'s call. Its key (and the name an index error gives) is the op's
// own, marked: a failed check names the op the user called.
std::vector<c10::IValue> run_bucketed(const c10::FunctionSchema& op,
                                      const c10::FunctionSchema& schema, const Lowering& lowering,
                                      std::vector<c10::IValue> args) {
  metrics().size_bucket_ops++;
  return run_lowering(op.name() + " (at a size bucket)", lowering, schema, std::move(args));
}

// ATen's checks of the call's dtypes, ranks and flags, run once for each combination of them:
// the exact op runs them at each key's first call, and these bucketed calls share keys.
void check_like_aten(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  std::string kind = schema.name();
  for (const c10::IValue& arg : args) {
    kind += '|';
    if (arg.isTensor() && arg.toTensor().defined()) {
      const at::Tensor& tensor = arg.toTensor();
      kind += std::string(c10::toString(tensor.scalar_type())) + std::to_string(tensor.dim());
    } else if (arg.isInt() || arg.isBool()) {
      kind += std::to_string(arg.isInt() ? arg.toInt() : static_cast<int64_t>(arg.toBool()));
    }
  }
  check_written_overlap(schema, args);  // every call: no aliasing in `kind`
  thread_local std::unordered_set<std::string> checked;
  if (checked.contains(kind)) return;
  run_meta_checks(schema, args);
  checked.insert(std::move(kind));
}

// _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
// per_sample_weights?, include_last_offset, padding_idx).
std::optional<std::vector<c10::IValue>> forward(const c10::FunctionSchema& op,
                                                const std::vector<c10::IValue>& args) {
  if (args.size() != 9 || !args[0].isTensor() || !args[1].isTensor() || !args[2].isTensor()) {
    return std::nullopt;
  }
  const int64_t count = args[1].toTensor().numel();
  const int64_t window = bucket_length(count);
  if (count == 0 || window > kEagerLargestBucket) return std::nullopt;
  std::optional<Run> indices = run_in_bucket(args[1].toTensor(), count), weights;
  if (!indices || !weights_run(args, 6, count, weights)) return std::nullopt;
  check_like_aten(op, args);
  std::vector<c10::IValue> inner{args[0]};
  add_run(inner, indices);
  inner.insert(inner.end(), {c10::Scalar(count), window, args[2], args[4]});
  add_run(inner, weights);
  inner.insert(inner.end(), {args[7], args[8]});
  static const Lowering& lowering = find_lowering("@bucket_embedding_bag");
  static const c10::FunctionSchema schema = torch::jit::parseSchema(
      "torch_tpu::bucket_embedding_bag(Tensor weight, Tensor indices, Scalar indices_start, Scalar "
      "length, int window, "
      "Tensor offsets, int mode, Tensor? per_sample_weights, Scalar weights_start, "
      "bool include_last_offset, int padding_idx) -> (Tensor, Tensor, Tensor, Tensor)");
  std::vector<c10::IValue> results = run_bucketed(op, schema, lowering, std::move(inner));
  results[1] = over_bucket(results[1].toTensor(), count);
  return results;
}

// _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
// num_weights, scale_grad_by_freq, mode, per_sample_weights?, padding_idx).
std::optional<std::vector<c10::IValue>> backward(const c10::FunctionSchema& op,
                                                 const std::vector<c10::IValue>& args) {
  if (args.size() != 10 || !args[1].isTensor() || !args[2].isTensor()) return std::nullopt;
  const int64_t count = args[1].toTensor().numel();
  const int64_t window = bucket_length(count);
  if (count == 0 || window > kEagerLargestBucket) return std::nullopt;
  std::optional<Run> indices = run_in_bucket(args[1].toTensor(), count);
  std::optional<Run> offset2bag = run_in_bucket(args[2].toTensor(), count), weights;
  if (!indices || !offset2bag || !weights_run(args, 8, count, weights)) return std::nullopt;
  check_like_aten(op, args);
  std::vector<c10::IValue> inner{args[0]};
  add_run(inner, indices);
  add_run(inner, offset2bag);
  inner.insert(inner.end(),
               {c10::Scalar(count), window, args[3], args[4], args[5], args[6], args[7]});
  add_run(inner, weights);
  inner.push_back(args[9]);
  static const Lowering& lowering = find_lowering("@bucket_embedding_bag_backward");
  static const c10::FunctionSchema schema = torch::jit::parseSchema(
      "torch_tpu::bucket_embedding_bag_backward(Tensor grad, Tensor indices, Scalar indices_start, "
      "Tensor offset2bag, "
      "Scalar offset2bag_start, Scalar length, int window, Tensor bag_size, "
      "Tensor maximum_indices, int num_weights, bool scale_grad_by_freq, "
      "int mode, Tensor? per_sample_weights, Scalar weights_start, "
      "int padding_idx) -> Tensor");
  return run_bucketed(op, schema, lowering, std::move(inner));
}

// _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode,
// padding_idx).
std::optional<std::vector<c10::IValue>> weights_backward(const c10::FunctionSchema& op,
                                                         const std::vector<c10::IValue>& args) {
  if (args.size() != 7 || !args[2].isTensor() || !args[4].isTensor()) return std::nullopt;
  const int64_t count = args[2].toTensor().numel();
  const int64_t window = bucket_length(count);
  if (count == 0 || window > kEagerLargestBucket) return std::nullopt;
  std::optional<Run> indices = run_in_bucket(args[2].toTensor(), count);
  std::optional<Run> offset2bag = run_in_bucket(args[4].toTensor(), count);
  if (!indices || !offset2bag) return std::nullopt;
  check_like_aten(op, args);
  std::vector<c10::IValue> inner{args[0], args[1]};
  add_run(inner, indices);
  add_run(inner, offset2bag);
  inner.insert(inner.end(), {c10::Scalar(count), window, args[5], args[6]});
  static const Lowering& lowering =
      find_lowering("@bucket_embedding_bag_per_sample_weights_backward");
  static const c10::FunctionSchema schema = torch::jit::parseSchema(
      "torch_tpu::bucket_embedding_bag_per_sample_weights_backward(Tensor grad, Tensor weight, "
      "Tensor indices, Scalar indices_start, Tensor offset2bag, "
      "Scalar offset2bag_start, Scalar length, int window, int mode, int padding_idx) -> Tensor");
  std::vector<c10::IValue> results = run_bucketed(op, schema, lowering, std::move(inner));
  results[0] = over_bucket(results[0].toTensor(), count);
  return results;
}

}  // namespace

std::optional<std::vector<c10::IValue>> bags_in_bucket(const std::string& op_name,
                                                       const c10::FunctionSchema& schema,
                                                       const std::vector<c10::IValue>& args) {
  std::string_view name(op_name);
  if (name.starts_with("aten::")) name.remove_prefix(6);
  name = name.substr(0, name.find('.'));
  if (name == "_embedding_bag" || name == "_embedding_bag_forward_only") {
    return forward(schema, args);
  }
  if (name == "_embedding_bag_dense_backward") return backward(schema, args);
  if (name == "_embedding_bag_per_sample_weights_backward") return weights_backward(schema, args);
  return std::nullopt;
}

}  // namespace torch_tpu
