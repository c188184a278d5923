#include "csrc/dispatch/size_buckets.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "csrc/device/runtime.h"
#include "csrc/device/storage.h"
#include "csrc/device/types.h"
#include "csrc/dispatch/dispatcher.h"
#include "csrc/dispatch/fusion.h"
#include "csrc/dispatch/metrics.h"
#include "csrc/dispatch/mode.h"
#include "csrc/dispatch/view_io.h"

namespace torch_tpu {

namespace {

// TORCH_TPU_SIZE_BUCKETS=0 at start-up, or set_size_buckets(false), turns buckets off.
std::atomic<int>& setting() {
  static std::atomic<int> on = [] {
    const char* value = std::getenv("TORCH_TPU_SIZE_BUCKETS");
    return value == nullptr || std::string_view(value) != "0" ? -1 : 0;  // -1: not yet asked
  }();
  return on;
}

bool enabled() {
  int on = setting().load(std::memory_order_relaxed);
  if (on < 0) {
    on = Runtime::get().client().supports_views() ? 1 : 0;
    setting().store(on, std::memory_order_relaxed);
  }
  return on == 1;
}

// What fills and uploads have met, by (op, dtype, bucket): the first length, whether a
// second one came, and how each shape ran.
struct Met {
  int64_t first_length = -1;
  bool two_lengths = false;
  std::map<std::vector<int64_t>, bool> shapes;  // shape -> ran at the bucket
};
std::mutex met_mutex;
std::map<std::tuple<std::string, int, int64_t>, Met>& met_by_bucket() {
  static std::map<std::tuple<std::string, int, int64_t>, Met> met;
  return met;
}

// A fill runs a shape at its bucket where, when it first met the shape, the bucket had met two
// lengths of this (op, dtype): a sweep over lengths then shares the bucket's executables, and
// a shape keeps how it first ran, so that a program repeating its shapes compiles nothing new.
bool fill_uses_bucket(const std::string& op_name, c10::ScalarType dtype, int64_t bucket,
                      c10::IntArrayRef sizes, int64_t length) {
  std::lock_guard<std::mutex> lock(met_mutex);
  Met& met = met_by_bucket()[{op_name, static_cast<int>(dtype), bucket}];
  auto [shape, added] = met.shapes.try_emplace(sizes.vec(), met.two_lengths);
  if (!added) return shape->second;
  if (met.first_length < 0) met.first_length = length;
  met.two_lengths = met.two_lengths || met.first_length != length;
  return shape->second;
}

// A tensor a bucket can stand in for: dense, on the device, read as stored.
bool plain(const at::Tensor& tensor, int64_t length) {
  return tensor.defined() && tensor.is_privateuseone() && tensor.numel() == length &&
         covers_whole_storage(tensor) && !tensor.is_conj() && !tensor.is_neg();
}

// The bucket holding the tensor's elements, where it is one of `bucket` elements of its dtype.
std::shared_ptr<pjrt::Buffer> bucket_of(const at::Tensor& tensor, int64_t bucket) {
  DeviceStorage::Contents contents = device_storage(tensor).raw_contents();
  if (!contents.bucket || contents.type != to_element_type(tensor.scalar_type())) return nullptr;
  const std::vector<int64_t> dims = contents.bucket->dims();
  return dims.size() == 1 && dims[0] == bucket ? contents.bucket : nullptr;
}

// A flat tensor of the bucket's length, holding `contents` where given (else never written).
// Its storage is the dispatcher's own, so the allocator's counts and memory history, which
// tell what the program allocates, leave it out.
at::Tensor stand_in(const at::Tensor& like, int64_t bucket,
                    std::shared_ptr<pjrt::Buffer> contents) {
  const auto nbytes = static_cast<size_t>(bucket) * like.element_size();
  auto* storage = new DeviceStorage(nbytes, like.device().index());
  if (contents) storage->assign(std::move(contents), to_element_type(like.scalar_type()));
  c10::Storage holder(
      c10::Storage::use_byte_size_t(), nbytes,
      c10::DataPtr(
          storage, storage, [](void* context) { delete static_cast<DeviceStorage*>(context); },
          like.device()),
      /*allocator=*/nullptr, /*resizable=*/false);
  at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(holder), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), like.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_contiguous({bucket});
  return tensor;
}

// `tensor` (a bucket's stand-in) with the elements from `length` on replaced by `fill`.
at::Tensor masked(const at::Tensor& tensor, int64_t length, const c10::Scalar& fill) {
  static const c10::FunctionSchema schema = torch::jit::parseSchema(
      "torch_tpu::bucket_mask(Tensor self, Scalar length, Scalar fill) -> Tensor");
  return run_lowering("torch_tpu::bucket_mask", find_lowering("@bucket_mask"), schema,
                      {tensor, c10::Scalar(length), fill})[0]
      .toTensor();
}

// The bucket holding a storage's contents (of `type`) at its start, whatever its length.
std::shared_ptr<pjrt::Buffer> any_bucket(const DeviceStorage& storage, hlo::ElementType type) {
  DeviceStorage::Contents contents = storage.raw_contents();
  if (!contents.bucket || contents.pending || contents.type != type) return nullptr;
  return contents.bucket->dims().size() == 1 ? contents.bucket : nullptr;
}

// `parts` concatenated into a flat buffer of `bucket` elements (zeros past their total): the
// first part read from `first_bucket` where given (its length then a runtime input).
at::Tensor cat_into_bucket(const std::vector<at::Tensor>& parts,
                           std::shared_ptr<pjrt::Buffer> first_bucket, int64_t bucket) {
  static const c10::FunctionSchema schema = torch::jit::parseSchema(
      "torch_tpu::bucket_cat(Tensor first, Tensor[] rest, Scalar length, int bucket) -> Tensor");
  const at::Tensor& first = parts[0];
  at::Tensor first_flat =
      first_bucket ? stand_in(first, first_bucket->dims()[0], first_bucket) : first;
  std::vector<at::Tensor> rest(parts.begin() + 1, parts.end());
  return run_lowering(
             "torch_tpu::bucket_cat", find_lowering("@bucket_cat"), schema,
             {first_flat, c10::List<at::Tensor>(rest), c10::Scalar(first.numel()), bucket})[0]
      .toTensor();
}

// torch.cat of parts that follow each other in memory (every size before `dim` is 1, as for
// generate's [batch 1, length] ids) into a bucket, where the first part holds one or cats of
// this dtype have met two lengths of the bucket; nullopt where the cat runs at its exact size.
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
      if ((d < dim && part.size(d) != 1) || (d > dim && part.size(d) != first.size(d))) {
        return std::nullopt;
      }
    }
    sizes[dim] += part.size(dim);
    length += part.numel();
  }
  const int64_t bucket = bucket_length(length);
  if (first.numel() == 0 || bucket > kEagerLargestBucket) return std::nullopt;
  const hlo::ElementType type = to_element_type(first.scalar_type());
  std::shared_ptr<pjrt::Buffer> first_bucket =
      plain(first, first.numel()) ? any_bucket(device_storage(first), type) : nullptr;
  if (first_bucket && first_bucket->dims()[0] > bucket) first_bucket = nullptr;
  if (!first_bucket && !fill_uses_bucket(op_name, first.scalar_type(), bucket, sizes, length)) {
    return std::nullopt;
  }
  metrics().size_bucket_ops++;
  // Under DeferAndFuse too the cat runs now (its parts' pending graph first): its result must
  // be a bucket's buffer for the next step's graph to read it at the bucket's length.
  RunNowScope run_now;
  at::Tensor flat = cat_into_bucket(parts, std::move(first_bucket), bucket);
  at::Tensor result = at::empty(sizes, first.options());
  DeviceStorage::Contents contents = device_storage(flat).raw_contents();
  device_storage(result).assign_bucket(contents.buffer, contents.type);
  return std::vector<c10::IValue>{result};
}

struct Parsed {
  std::string base;  // "abs_", "cumsum", "copy_"
  std::string overload;
};

Parsed parse(const std::string& op_name) {
  std::string_view name(op_name);
  if (name.starts_with("aten::")) name.remove_prefix(6);
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos) return {std::string(name), ""};
  return {std::string(name.substr(0, dot)), std::string(name.substr(dot + 1))};
}

std::string without_trailing_underscore(std::string name) {
  if (name.ends_with('_') && !name.starts_with('_')) name.pop_back();
  return name;
}

}  // namespace

void set_size_buckets(bool on) {
  TORCH_CHECK(!on || Runtime::get().client().supports_views(),
              "torch_tpu: size buckets need a plugin that makes views of device buffers");
  setting().store(on ? 1 : 0);
}

bool size_buckets() { return enabled(); }

void forget_met_shapes() {
  std::lock_guard<std::mutex> lock(met_mutex);
  met_by_bucket().clear();
}

std::optional<int64_t> upload_bucket(const at::Tensor& dst) {
  if (!enabled() || eager_mode() == EagerMode::DeferAndFuse) return std::nullopt;
  const int64_t length = dst.numel();
  const int64_t bucket = bucket_length(length);
  if (length == 0 || bucket == length || bucket > kEagerLargestBucket || !plain(dst, length) ||
      !fill_uses_bucket("upload", dst.scalar_type(), bucket, dst.sizes(), length)) {
    return std::nullopt;
  }
  metrics().size_bucket_ops++;
  return bucket;
}

BucketKind bucket_kind(const std::string& op_name) {
  const Parsed parsed = parse(op_name);
  const std::string base = without_trailing_underscore(parsed.base);
  const bool in_place = base != parsed.base;
  const OpPadding* row = find_op_padding(base);
  const BucketKind kind = row != nullptr ? row->eager : BucketKind::None;
  const std::string& overload = parsed.overload;
  // Which forms of the op run at buckets: fills and copies overwrite self (in place), a
  // reduction only over the whole tensor (its plain overload).
  switch (kind) {
    case BucketKind::Copy:
      return in_place && overload.empty() ? kind : BucketKind::None;
    case BucketKind::Fill:
      return in_place && (base != "bernoulli" || overload == "float") ? kind : BucketKind::None;
    default:
      break;
  }
  if (overload == "dimname" || overload == "dimname_out") return BucketKind::None;
  switch (kind) {
    case BucketKind::Scan:
      return overload.empty() || overload == "out" ? kind : BucketKind::None;
    case BucketKind::Reduce:
      return overload.empty() && !in_place ? kind : BucketKind::None;
    case BucketKind::Cat:
      return (overload.empty() || overload == "default") && !in_place ? kind : BucketKind::None;
    default:
      return kind;
  }
}

BucketKind remembered_bucket_kind(const std::string& key_prefix) {
  thread_local std::unordered_map<std::string, BucketKind> kinds;
  auto found = kinds.find(key_prefix);
  if (found == kinds.end()) found = kinds.emplace(key_prefix, bucket_kind(key_prefix)).first;
  return found->second;
}

void read_views_from_buckets(const c10::FunctionSchema& schema, std::vector<c10::IValue>& args) {
  // A recorded graph's sources are the storages it read (graph_replay.h): not stand-ins.
  if (bucketed_storage_count() == 0 || recording()) return;
  // The same view of the bucket's buffer, where `tensor` is a view of a storage that is the
  // start of a longer bucket; undefined where it is not.
  auto through_bucket = [](const at::Tensor& tensor) -> at::Tensor {
    if (!tensor.defined() || !tensor.is_privateuseone() || tensor.is_conj() || tensor.is_neg() ||
        covers_whole_storage(tensor)) {
      return {};
    }
    std::shared_ptr<pjrt::Buffer> bucket =
        any_bucket(device_storage(tensor), to_element_type(tensor.scalar_type()));
    const int64_t length = bucket ? bucket->dims()[0] : 0;
    if (length <= storage_elements(tensor)) return {};
    at::Tensor view = stand_in(tensor, length, std::move(bucket));
    view.unsafeGetTensorImpl()->set_sizes_and_strides(tensor.sizes(), tensor.strides(),
                                                      tensor.storage_offset());
    return view;
  };
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < args.size() && i < arguments.size(); ++i) {
    const auto* alias = arguments[i].alias_info();
    if (alias != nullptr && alias->isWrite()) continue;
    if (args[i].isTensor()) {
      if (at::Tensor view = through_bucket(args[i].toTensor()); view.defined()) args[i] = view;
    } else if (args[i].isTensorList()) {
      std::vector<at::Tensor> tensors = args[i].toTensorVector();
      bool replaced = false;
      for (at::Tensor& tensor : tensors) {
        if (at::Tensor view = through_bucket(tensor); view.defined()) {
          tensor = view;
          replaced = true;
        }
      }
      if (replaced) args[i] = c10::List<at::Tensor>(tensors);
    }
  }
}

std::optional<std::vector<c10::IValue>> dispatch_in_buckets(BucketKind kind,
                                                            const std::string& op_name,
                                                            const c10::FunctionSchema& schema,
                                                            const std::vector<c10::IValue>& args,
                                                            Redispatch redispatch) {
  if (kind == BucketKind::None || !enabled()) return std::nullopt;
  // A recorded graph replays whole, at the shapes it was recorded with.
  if (kind == BucketKind::Cat) return recording() ? std::nullopt : cat_in_bucket(op_name, args);
  if (eager_mode() == EagerMode::DeferAndFuse) return std::nullopt;
  // Only fills (and cats) begin a bucket; every other kind needs an input that already is one.
  if (kind != BucketKind::Fill && bucketed_storage_count() == 0) return std::nullopt;
  // A fill joins a pending compiled graph (see joins_pending in dispatcher.cc) at its exact
  // size: its result is a pending value, not a bucket's buffer.
  if (kind == BucketKind::Fill && compiled_graph_pending()) return std::nullopt;
  const auto& arguments = schema.arguments();
  auto written = [&](size_t index) {
    const auto* alias = arguments[index].alias_info();
    return alias != nullptr && alias->isWrite();
  };
  // The length: the first tensor argument's, but the indices' for a scatter (its target keeps
  // its own exact length).
  const int first = kind == BucketKind::IndexPut ? 2 : 0;
  if (static_cast<int>(args.size()) <= first || !args[first].isTensor()) return std::nullopt;
  const at::Tensor& leader = args[first].toTensor();
  const int64_t length = leader.numel();
  if (length == 0 || !plain(leader, length)) return std::nullopt;
  const int64_t bucket = bucket_length(length);
  if (bucket > kEagerLargestBucket || bucket == length) return std::nullopt;
  const std::vector<int64_t> sizes = leader.sizes().vec();

  std::vector<c10::IValue> inner = args;
  std::vector<std::optional<at::Tensor>> stand_ins(args.size());
  // Replaces argument `index` (a tensor of the call's sizes) by a stand-in of the bucket's
  // length: holding its bucket where the op reads it, else fresh. False where it cannot.
  auto stand_in_for = [&](size_t index, bool reads) {
    const at::Tensor& tensor = args[index].toTensor();
    if (!plain(tensor, length) || tensor.sizes() != c10::IntArrayRef(sizes)) return false;
    std::shared_ptr<pjrt::Buffer> contents;
    if (reads && !(contents = bucket_of(tensor, bucket))) return false;
    stand_ins[index] = stand_in(tensor, bucket, std::move(contents));
    inner[index] = *stand_ins[index];
    return true;
  };

  switch (kind) {
    case BucketKind::Fill:
    case BucketKind::Copy: {
      // self is overwritten whole; a copy's source must hold a bucket already, a fill's other
      // arguments are scalars (or a 0-d value).
      const at::Tensor& self = args[0].toTensor();
      // A complex fill draws its parts one after the other: the second draw would start where
      // the bucket's first one ended.
      if (kind == BucketKind::Fill && c10::isComplexType(self.scalar_type())) return std::nullopt;
      if (kind == BucketKind::Fill && !bucket_of(self, bucket) &&
          !fill_uses_bucket(op_name, self.scalar_type(), bucket, self.sizes(), length)) {
        return std::nullopt;
      }
      if (!stand_in_for(0, false)) return std::nullopt;
      for (size_t i = 1; i < args.size(); ++i) {
        if (!args[i].isTensor() || args[i].toTensor().dim() == 0) continue;
        if (kind == BucketKind::Fill || !stand_in_for(i, true)) return std::nullopt;
      }
      if (kind == BucketKind::Copy && !stand_ins[1]) return std::nullopt;
      break;
    }
    case BucketKind::Pointwise:
    case BucketKind::Scan: {
      // Every tensor of the call's sizes is read from its bucket, but out= targets; 0-d tensors
      // broadcast and are passed as they are.
      if (kind == BucketKind::Scan && leader.dim() != 1) return std::nullopt;
      for (size_t i = 0; i < args.size(); ++i) {
        if (!args[i].isTensor()) {
          if (args[i].isTensorList()) return std::nullopt;
          continue;
        }
        if (args[i].toTensor().dim() == 0) continue;
        const bool out = written(i) && arguments[i].kwarg_only();
        if (!stand_in_for(i, !out)) return std::nullopt;
      }
      break;
    }
    case BucketKind::Reduce: {
      const c10::ScalarType dtype = leader.scalar_type();
      const std::optional<c10::Scalar> fill =
          c10::isComplexType(dtype) ? std::nullopt
                                    : neutral(find_op_padding(parse(op_name).base)->neutral, dtype);
      if (!fill || !stand_in_for(0, true)) return std::nullopt;
      inner[0] = masked(*stand_ins[0], length, *fill);
      break;
    }
    case BucketKind::IndexPut: {
      // self[indices] += values with one 1-d index tensor: the indices past the length read as
      // 0 and their values as the sum's identity, so they add nothing. self keeps its length
      // (the indices are checked against it).
      const at::Tensor& self = args[0].toTensor();
      if (args.size() < 4 || !args[3].isBool() || !args[3].toBool() || self.dim() != 1 ||
          leader.dim() != 1 || leader.scalar_type() != self.scalar_type() ||
          !c10::isFloatingType(self.scalar_type())) {
        return std::nullopt;
      }
      // A list of tensors (a kernel's call) or of optional tensors (the op's own schema).
      std::vector<at::Tensor> indices;
      if (args[1].isTensorList()) {
        indices = args[1].toTensorVector();
      } else if (args[1].isList()) {
        for (const c10::IValue& index : args[1].toListRef()) {
          indices.push_back(index.isTensor() ? index.toTensor() : at::Tensor());
        }
      }
      if (indices.size() != 1) return std::nullopt;
      const at::Tensor& index = indices[0];
      auto index_bucket = plain(index, length) && index.dim() == 1 &&
                                  c10::isIntegralType(index.scalar_type(), false)
                              ? bucket_of(index, bucket)
                              : nullptr;
      if (!index_bucket || !stand_in_for(2, true)) return std::nullopt;
      inner[2] = masked(*stand_ins[2], length, *neutral(Reduction::Sum, self.scalar_type()));
      at::Tensor masked_index =
          masked(stand_in(index, bucket, index_bucket), length, c10::Scalar(0));
      if (args[1].isTensorList()) {
        inner[1] = c10::List<at::Tensor>({masked_index});
        break;
      }
      c10::List<std::optional<at::Tensor>> index_list;
      index_list.push_back(masked_index);
      inner[1] = index_list;
      break;
    }
    default:  // None, Cat (above) and the kinds of compiled graphs only
      return std::nullopt;
  }

  metrics().size_bucket_ops++;
  std::vector<c10::IValue> results = redispatch(inner);
  // Written arguments take their stand-in's new bucket; new results of the bucket's length
  // become tensors of the call's sizes over it.
  for (size_t i = 0; i < args.size(); ++i) {
    if (!stand_ins[i] || !written(i)) continue;
    DeviceStorage::Contents contents = device_storage(*stand_ins[i]).raw_contents();
    device_storage(args[i].toTensor()).assign_bucket(contents.buffer, contents.type);
  }
  for (c10::IValue& result : results) {
    if (!result.isTensor()) continue;
    const at::Tensor& tensor = result.toTensor();
    bool replaced = false;
    for (size_t i = 0; i < args.size() && !replaced; ++i) {
      if (stand_ins[i] && tensor.is_same(*stand_ins[i])) {
        result = args[i];
        replaced = true;
      }
    }
    if (replaced || kind == BucketKind::Reduce || tensor.numel() != bucket) continue;
    at::Tensor exact = at::empty(sizes, tensor.options());
    DeviceStorage::Contents contents = device_storage(tensor).raw_contents();
    device_storage(exact).assign_bucket(contents.buffer, contents.type);
    result = exact;
  }
  return results;
}

}  // namespace torch_tpu
