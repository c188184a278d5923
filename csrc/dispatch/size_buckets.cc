#include "csrc/dispatch/size_buckets.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include <string_view>
#include <unordered_map>

#include "csrc/device/storage.h"
#include "csrc/device/types.h"
#include "csrc/dispatch/bucket_buffers.h"
#include "csrc/dispatch/dispatcher.h"
#include "csrc/dispatch/fusion.h"
#include "csrc/dispatch/growing_buckets.h"
#include "csrc/dispatch/jagged_buckets.h"
#include "csrc/dispatch/length_buckets.h"
#include "csrc/dispatch/metrics.h"
#include "csrc/dispatch/mode.h"
#include "csrc/dispatch/view_io.h"

namespace torch_tpu {

namespace {

// `tensor` (a bucket's stand-in) with the elements from `length` on replaced by `fill`.
at::Tensor masked(const at::Tensor& tensor, int64_t length, const c10::Scalar& fill) {
  static const c10::FunctionSchema schema = torch::jit::parseSchema(
      "torch_tpu::bucket_mask(Tensor self, Scalar length, Scalar fill) -> Tensor");
  return run_lowering("torch_tpu::bucket_mask", find_lowering("@bucket_mask"), schema,
                      {tensor, c10::Scalar(length), fill})[0]
      .toTensor();
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

std::optional<int64_t> upload_bucket(const at::Tensor& dst) {
  if (!size_buckets() || eager_mode() == EagerMode::DeferAndFuse) return std::nullopt;
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
    case BucketKind::Bags:
      return overload.empty() || overload == "default" ? kind : BucketKind::None;
    case BucketKind::Rows:  // functional forms only: an out= target keeps its exact sizes
      return (overload.empty() || overload == "default") && !in_place ? kind : BucketKind::None;
    case BucketKind::Lookup:  // index_select's plain form, searchsorted's tensor one
      return overload.empty() || overload == "default" || overload == "Tensor" ? kind
                                                                               : BucketKind::None;
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
    const DeviceStorage& storage = device_storage(tensor);
    const int64_t length = bucket_length_of(storage, to_element_type(tensor.scalar_type()));
    if (length <= storage_elements(tensor)) return {};
    at::Tensor view = bucket_stand_in(tensor, storage);
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
  if (kind == BucketKind::None || !size_buckets()) return std::nullopt;
  // A recorded graph replays whole, at the shapes it was recorded with.
  if (kind == BucketKind::Cat) return recording() ? std::nullopt : cat_in_bucket(op_name, args);
  if (kind == BucketKind::Attention) {
    if (recording()) return std::nullopt;
    if (auto results = attention_in_bucket(args)) return results;
    return eager_mode() == EagerMode::DeferAndFuse ? std::nullopt : grown_attention_in_bucket(args);
  }
  if (kind == BucketKind::Bags)
    return recording() ? std::nullopt : bags_in_bucket(op_name, schema, args);
  if (eager_mode() == EagerMode::DeferAndFuse) return std::nullopt;
  // Only fills (and cats) begin a bucket; every other kind needs an input that already is one.
  if (kind != BucketKind::Fill && bucketed_storage_count() == 0) return std::nullopt;
  // A fill joins a pending compiled graph (see joins_pending in dispatcher.cc) at its exact
  // size: its result is a pending value, not a bucket's buffer.
  if (kind == BucketKind::Fill && compiled_graph_pending()) return std::nullopt;
  // Tensors that grow with a sequence rerun whole (length_buckets.h).
  if (kind == BucketKind::Rows || (kind == BucketKind::Lookup && !args.empty() &&
                                   args[0].isTensor() && args[0].toTensor().dim() == 2)) {
    return recording() ? std::nullopt : rows_in_bucket(op_name, args, redispatch);
  }
  if (kind == BucketKind::Copy && !recording()) {
    if (auto copied = view_copy_in_bucket(args)) return copied;
  }
  const auto& arguments = schema.arguments();
  auto written = [&](size_t index) {
    const auto* alias = arguments[index].alias_info();
    return alias != nullptr && alias->isWrite();
  };
  // The length: the first tensor argument's, but the indices' for a scatter (its target keeps
  // its own exact length) and for a lookup (index_select's index, searchsorted's values).
  int first = 0;
  if (kind == BucketKind::IndexPut) first = 2;
  if (kind == BucketKind::Lookup) first = op_name.find("searchsorted") != std::string::npos ? 1 : 2;
  if (static_cast<int>(args.size()) <= first || !args[first].isTensor()) return std::nullopt;
  const at::Tensor& leader = args[first].toTensor();
  const int64_t length = leader.numel();
  if (length == 0 || !plain(leader, length)) return std::nullopt;
  // A tensor grown with a sequence (length_buckets.h) keeps its bucket, which need not be the
  // rule's for its length; ops on it stay in buckets even where the length fills one exactly.
  const at::Tensor& read = kind == BucketKind::Copy && args.size() > 1 && args[1].isTensor()
                               ? args[1].toTensor()
                               : leader;
  const std::optional<GrownLength> grown =
      kind != BucketKind::Fill && plain(read, length) ? grown_length(read) : std::nullopt;
  const int64_t bucket =
      grown ? bucket_length_of(device_storage(read), to_element_type(read.scalar_type()))
            : bucket_length(length);
  if (bucket > kEagerLargestBucket || (bucket == length && !grown)) return std::nullopt;
  const std::vector<int64_t> sizes = leader.sizes().vec();

  std::vector<c10::IValue> inner = args;
  std::vector<std::optional<at::Tensor>> stand_ins(args.size());
  // Replaces argument `index` (a tensor of the call's sizes) by a stand-in of the bucket's
  // length: holding its bucket where the op reads it, else fresh. False where it cannot.
  auto stand_in_for = [&](size_t index, bool reads) {
    const at::Tensor& tensor = args[index].toTensor();
    if (tensor.sizes() != c10::IntArrayRef(sizes)) return false;
    if (!plain(tensor, length)) {
      // A contiguous view of a longer storage (a positional table's first rows) is read as
      // the bucket's length of it, where the storage holds that many.
      if (kind != BucketKind::Pointwise || !reads || written(index) || !tensor.is_privateuseone() ||
          !tensor.is_contiguous() || tensor.is_conj() || tensor.is_neg() ||
          tensor.storage_offset() + bucket > storage_elements(tensor) ||
          device_storage(tensor).raw_contents().bucket) {
        return false;
      }
      stand_ins[index] = tensor.as_strided({bucket}, {1}, tensor.storage_offset());
      inner[index] = *stand_ins[index];
      return true;
    }
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
        // A result at a bucket is laid out by default; TensorIterator lays it out as its
        // inputs' strides, size-1 dims' included (an NC11 channels-last x * 5 stays so).
        if (!has_default_strides(args[i].toTensor())) return std::nullopt;
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
    case BucketKind::Lookup: {
      // A 1-d tensor looked up at each position of a 1-d index: the result is positionwise in
      // it. Past the length the index reads as 0 (in range of any non-empty tensor); a search
      // there finds what it finds, and both are cut off with the bucket.
      const at::Tensor& whole = args[0].toTensor();
      // (A complex table keeps the exact path, whose op name the complex check knows.)
      if (leader.dim() != 1 || whole.dim() != 1 || whole.numel() == 0 ||
          !whole.is_privateuseone() || whole.is_complex()) {
        return std::nullopt;
      }
      const bool search = first == 1;
      // index_select's own checks stay with its exact form: an index of another dtype, a dim
      // other than the one.
      if (!search && (!args[1].isInt() || (args[1].toInt() != 0 && args[1].toInt() != -1) ||
                      (leader.scalar_type() != at::kLong && leader.scalar_type() != at::kInt))) {
        return std::nullopt;
      }
      if (search && args.size() > 5 && !args[5].isNone()) return std::nullopt;  // a sorter
      if (!stand_in_for(first, true)) return std::nullopt;
      if (search) break;
      inner[first] = masked(*stand_ins[first], length, c10::Scalar(0));
      // A looked-up tensor in a bucket of its own (a jagged batch's values) is read from it,
      // its length a runtime input, so that its new lengths compile nothing either.
      const DeviceStorage& storage = device_storage(whole);
      if (!plain(whole, whole.numel()) ||
          bucket_length_of(storage, to_element_type(whole.scalar_type())) <= whole.numel()) {
        break;
      }
      static const c10::FunctionSchema bucketed = torch::jit::parseSchema(
          "torch_tpu::bucket_index_select(Tensor self, Scalar length, Tensor index) -> Tensor");
      static const Lowering& lowering = find_lowering("@bucket_index_select");
      metrics().size_bucket_ops++;
      at::Tensor flat =
          run_lowering(
              // Keyed and named as the op called: a failed index check names it.
              "aten::index_select (at a size bucket)", lowering, bucketed,
              {bucket_stand_in(whole, storage), c10::Scalar(whole.numel()), inner[first]})[0]
              .toTensor();
      at::Tensor exact = at::empty(sizes, flat.options());
      take_as_bucket(flat, exact);
      return std::vector<c10::IValue>{exact};
    }
    default:  // None, Cat, Attention and Bags (above) and the kinds of compiled graphs only
      return std::nullopt;
  }

  metrics().size_bucket_ops++;
  std::vector<c10::IValue> results = redispatch(inner);
  // Written arguments take their stand-in's new bucket; new results of the bucket's length
  // become tensors of the call's sizes over it.
  for (size_t i = 0; i < args.size(); ++i) {
    if (!stand_ins[i] || !written(i)) continue;
    DeviceStorage::Contents contents = device_storage(*stand_ins[i]).raw_contents();
    device_storage(args[i].toTensor())
        .assign_bucket(contents.buffer, contents.type, grown.value_or(GrownLength{}));
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
    device_storage(exact).assign_bucket(contents.buffer, contents.type,
                                        grown.value_or(GrownLength{}));
    result = exact;
  }
  return results;
}

}  // namespace torch_tpu
