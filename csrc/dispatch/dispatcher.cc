#include "csrc/dispatch/dispatcher.h"

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/all.h>
#include <ATen/ops/isfinite.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <c10/util/TypeCast.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <list>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "csrc/device/allocator.h"
#include "csrc/device/generator.h"
#include "csrc/device/runtime.h"
#include "csrc/device/storage.h"
#include "csrc/device/types.h"
#include "csrc/dispatch/cache_entry.h"
#include "csrc/dispatch/complex_support.h"
#include "csrc/dispatch/debug_checks.h"
#include "csrc/dispatch/disk_cache.h"
#include "csrc/dispatch/flight_recorder.h"
#include "csrc/dispatch/fusion.h"
#include "csrc/dispatch/host_timers.h"
#include "csrc/dispatch/meta_checks.h"
#include "csrc/dispatch/metrics.h"
#include "csrc/dispatch/mode.h"
#include "csrc/dispatch/registration.h"
#include "csrc/dispatch/reinterpret.h"
#include "csrc/dispatch/retire.h"
#include "csrc/dispatch/run_ahead.h"
#include "csrc/dispatch/runtime_checks.h"
#include "csrc/dispatch/size_buckets.h"
#include "csrc/dispatch/view_io.h"
#include "csrc/pjrt/compile_options.h"
#include "csrc/profiler/device_trace.h"

namespace torch_tpu {
namespace {

std::mutex cache_mutex;

// Least recently used first out, past max_cached_ops() (see retire.h). Leaked on purpose, like
// the runtime: destroying executables at interpreter exit races the plugin's own teardown
// (std::terminate from its threads).
struct CacheSlot {
  std::shared_ptr<CacheEntry> entry;
  std::list<std::string>::iterator age;
};
auto& cache = *new std::unordered_map<std::string, CacheSlot>();
auto& cache_ages = *new std::list<std::string>();  // most recently used first

// Under cache_mutex.
std::shared_ptr<CacheEntry> cache_find(const std::string& key) {
  auto found = cache.find(key);
  if (found == cache.end()) return nullptr;
  cache_ages.splice(cache_ages.begin(), cache_ages, found->second.age);
  return found->second.entry;
}

// Under cache_mutex; returns the executable of the entry it evicts, if any, to retire.
std::shared_ptr<pjrt::Executable> cache_insert(const std::string& key,
                                               std::shared_ptr<CacheEntry> entry) {
  if (cache.count(key) != 0) return nullptr;
  cache_ages.push_front(key);
  cache.emplace(key, CacheSlot{std::move(entry), cache_ages.begin()});
  if (cache.size() <= max_cached_ops() && !(cache.size() > 1 && mappings_near_limit())) {
    return nullptr;
  }
  auto oldest = cache.find(cache_ages.back());
  // The entry may live on in a pending fused graph, which only needs its function text.
  std::shared_ptr<pjrt::Executable> executable = std::move(oldest->second.entry->executable);
  cache.erase(oldest);
  cache_ages.pop_back();
  return executable;
}

// Appends `value` and `separator` without a temporary string: keys are built at every call.
void append_number(std::string& key, int64_t value, char separator) {
  char digits[24];
  auto end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
  *end++ = separator;
  key.append(digits, end);
}

// Per dim, how many dims have smaller strides: every comparison TensorIterator makes between
// one operand's strides (sizes break its ties, and are keyed already).
void append_stride_order(std::string& key, const at::Tensor& tensor) {
  bool size_one = false;
  for (int64_t d = 0; d < tensor.dim(); ++d) size_one = size_one || tensor.size(d) == 1;
  if (!size_one) return;  // otherwise the strides are keyed, or the default ones
  key += 'o';
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    int64_t smaller = 0;
    for (int64_t e = 0; e < tensor.dim(); ++e) smaller += tensor.stride(e) < tensor.stride(d);
    append_number(key, smaller, ',');
  }
}

void append_tensor_key(std::string& key, const at::Tensor& tensor) {
  if (!tensor.defined()) {
    key += "U;";
    return;
  }
  key += c10::toString(tensor.scalar_type());
  // Lazily conjugated or negated views are read through (see LoweringContext::tensor_at).
  if (tensor.is_conj()) key += "*";
  if (tensor.is_neg()) key += "-";
  if (tensor.device().is_cpu()) {
    // A wrapped Python number promotes less than a 0-d tensor of its dtype (int64 + 1.0 is
    // float32, int64 + tensor(1.0, dtype=float64) float64): they key apart.
    key += tensor.unsafeGetTensorImpl()->is_wrapped_number() ? "w;" : "c;";
    return;
  }
  key += '[';
  for (int64_t size : tensor.sizes()) append_number(key, size, ',');
  // The entry keeps the output layout the Meta kernel chose, which follows the input's suggested
  // memory format; the strides of size-1 dims can change that ([1, C, H, W] taken from a
  // channels-last batch with x[0][None] suggests contiguous, the batch itself channels-last)
  // though they change nothing read, so they key apart by it. (A cached flag: cheap.)
  if ((tensor.dim() == 4 || tensor.dim() == 5) &&
      tensor.suggest_memory_format() != c10::MemoryFormat::Contiguous) {
    key += 'C';
  }
  // The strides of size-1 dims change nothing read, but the Meta kernel's TensorIterator orders
  // the output's dims by them (x.permute(...) + y keeps x's size-1 strides; PyTorch's
  // test_strides_propagation): their order among the strides keys, not their values, so a
  // growing x[:, -1:] keeps one key.
  if (tensor.dim() > 1 && !has_default_strides(tensor)) append_stride_order(key, tensor);
  if (!covers_whole_storage(tensor)) {
    key += '|';
    // A dim of size 1 is read at index 0 whatever its stride: x[:, -1:] of a growing [1, n]
    // tensor has stride n there, and must not key one executable per n.
    for (int64_t d = 0; d < tensor.dim(); ++d) {
      append_number(key, tensor.size(d) == 1 ? 0 : tensor.stride(d), ',');
    }
    // The offset is a runtime input (see view_io.h); the storage's length shapes the parameter.
    key += '/';
    append_number(key, storage_elements(tensor), ']');
  } else {
    key += ']';
  }
  key += ';';
}

// A value the executable is built for (a dim, a flag, a constant): the common kinds without a
// stream, which costs more than the rest of a small op's key.
void append_static_scalar(std::string& key, const c10::IValue& value) {
  if (value.isInt()) {
    key += "Si";
    append_number(key, value.toInt(), ';');
  } else if (value.isBool()) {
    key += value.toBool() ? "Sb1;" : "Sb0;";
  } else if (value.isDouble()) {
    // The shortest text that reads back as the same double (so -0.0 and 0.0 differ).
    char digits[32];
    auto end = std::to_chars(digits, digits + sizeof(digits), value.toDouble()).ptr;
    key += "Sd";
    key.append(digits, end);
    key += ';';
  } else {
    std::ostringstream text;
    text.precision(17);
    text << value;
    key += "S" + text.str() + ";";
  }
}

void append_key(std::string& key, const c10::IValue& value, bool static_scalar = false) {
  if (value.isTensor()) {
    append_tensor_key(key, value.toTensor());
  } else if (value.isTensorList()) {
    key += "{";
    for (const at::Tensor& tensor : value.toTensorList().vec()) append_tensor_key(key, tensor);
    key += "}";
  } else if (value.isList() && value.toListRef().size() > 0 &&
             (value.toListRef()[0].isTensor() || value.toListRef()[0].isNone())) {
    key += "{";
    for (const c10::IValue& item : value.toListRef()) append_key(key, item);
    key += "}";
  } else if (value.isScalar() && static_scalar) {
    append_static_scalar(key, value);
  } else if (value.isScalar()) {
    // Runtime input: only its kind matters, never its value (a complex one was keyed as an
    // int: pow(x, 0) then pow(x, 1j) reused the real executable and raised).
    key += value.isDouble()          ? "sd;"
           : value.isComplexDouble() ? "sc;"
           : value.isBool()          ? "sb;"
                                     : "si;";
  } else if (value.isNone()) {
    key += "N;";
  } else if (value.isIntList()) {
    key += 'L';
    for (int64_t item : value.toIntList()) append_number(key, item, ',');
    key += "];";
  } else if (value.isString()) {
    // Its length first: the text may hold any separator.
    const std::string& text = value.toStringRef();
    append_number(key, static_cast<int64_t>(text.size()), '"');
    key += text;
    key += ';';
  } else {
    std::ostringstream text;
    text.precision(17);
    text << value;
    key += text.str() + ";";
  }
}

// Rejects tensors on other devices, as torch does on CUDA; returns the op's device index.
int check_devices(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  // (In Debug mode dispatch() also checks indexing ops' indices against their bounds.)
  int device = -1;
  auto visit = [&](const at::Tensor& tensor) {
    if (!tensor.defined()) return;
    if (tensor.device().is_cpu()) {
      TORCH_CHECK(tensor.dim() == 0,
                  "Expected all tensors to be on the same device, but found "
                  "at least two devices, tpu:",
                  device < 0 ? current_device() : device, " and cpu! (when checking argument for ",
                  schema.name(), ")");
      return;
    }
    TORCH_CHECK(tensor.device().type() == c10::DeviceType::PrivateUse1,
                "Expected all tensors to be on the same device, but found a tensor on ",
                tensor.device(), " (when checking argument for ", schema.name(), ")");
    int index = tensor.device().index();
    TORCH_CHECK(device < 0 || device == index,
                "Expected all tensors to be on the same device, "
                "but found at least two devices, tpu:",
                device, " and tpu:", index, "!");
    device = index;
  };
  for (const c10::IValue& value : args) {
    if (value.isTensor()) {
      visit(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorList().vec()) visit(tensor);
    } else if (value.isList()) {
      for (const c10::IValue& item : value.toListRef()) {
        if (item.isTensor()) visit(item.toTensor());
      }
    } else if (value.isDevice() && value.toDevice().type() == c10::DeviceType::PrivateUse1 &&
               device < 0) {
      device = value.toDevice().has_index() ? value.toDevice().index() : current_device();
    }
  }
  return device < 0 ? current_device() : device;
}

bool is_scalar_argument(const c10::FunctionSchema& schema, size_t index) {
  if (index >= schema.arguments().size()) return false;  // run_lowering's extra arguments
  c10::TypePtr type = schema.arguments()[index].type();
  if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  return type->kind() == c10::TypeKind::NumberType;
}

// Whether argument `index`'s value is part of the cache key: only `Scalar` arguments are
// runtime inputs; int/float/bool arguments shape the computation, as do Scalars a lowering
// declares static.
bool value_in_key(const c10::FunctionSchema& schema, const LoweringEntry& lowering, size_t index) {
  return !is_scalar_argument(schema, index) ||
         std::find(lowering.static_scalars.begin(), lowering.static_scalars.end(),
                   static_cast<int>(index)) != lowering.static_scalars.end();
}

std::vector<int> written_arguments(const c10::FunctionSchema& schema) {
  std::vector<int> written;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) written.push_back(static_cast<int>(i));
  }
  return written;
}

hlo::Shape shape_of(const at::Tensor& tensor) {
  return hlo::Shape(tensor.sizes().begin(), tensor.sizes().end());
}

std::string shape_text(const hlo::Shape& shape) { return "[" + hlo::join(shape) + "]"; }

// The dimensions from outermost to innermost in memory, for a dense layout's strides.
std::vector<int64_t> memory_order(const std::vector<int64_t>& strides) {
  std::vector<int64_t> order(strides.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  return order;
}

// The storage of `target` (argument `arg`) once `values` are written into it.
hlo::Value written_storage(LoweringContext& ctx, const hlo::Value& values, const at::Tensor& target,
                           int arg) {
  if (covers_whole_storage(target)) return ctx.b.reshape(values, {storage_elements(target)});
  hlo::Value storage = ctx.storage_param(target, arg, -1);
  return write_view(ctx.b, storage, values, ctx.view_offset(target, arg, -1), target);
}

// The strides CPU's TensorIterator gives a pointwise op's out= that it resizes to `shape`: its
// inputs' memory order (ATen's pointwise Meta kernels, Python references, resize contiguously).
// Empty where that order is contiguous.
std::vector<int64_t> pointwise_out_strides(const c10::FunctionSchema& schema,
                                           const std::vector<c10::IValue>& args,
                                           const hlo::Shape& shape) {
  // The config borrows its tensors: they live here until it is built.
  at::Tensor out;
  std::vector<at::Tensor> inputs;
  inputs.reserve(args.size());
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false).add_output(out);
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size() && i < args.size(); ++i) {
    const c10::AliasInfo* alias = arguments[i].alias_info();
    if ((alias != nullptr && alias->isWrite()) || !args[i].isTensor()) continue;
    const at::Tensor& input = args[i].toTensor();
    if (!input.defined()) continue;
    // Meta tensors of one dtype with the input's sizes and strides: only the layout matters.
    inputs.push_back(
        at::empty_strided(input.sizes(), input.strides(), at::TensorOptions().device(at::kMeta)));
    config.add_const_input(inputs.back());
  }
  try {
    at::TensorIterator iter = config.build();
    const at::Tensor& result = iter.output();
    if (result.sizes() != c10::IntArrayRef(shape) || has_default_strides(result)) return {};
    return result.strides().vec();
  } catch (const c10::Error&) {
    return {};  // inputs TensorIterator would not take together: the op decides, not us
  }
}

// Builds and compiles the executable for one key.
std::shared_ptr<CacheEntry> build_entry(const std::string& op_name,
                                        const c10::FunctionSchema& schema,
                                        const LoweringEntry& lowering,
                                        std::vector<c10::IValue>& args,
                                        const OutputLayouts& layouts) {
  hlo::Builder builder;
  LoweringContext ctx(builder, args);
  std::vector<hlo::Value> results;
  try {
    results = lowering.fn(ctx);
  } catch (const hlo::BuildError& error) {
    TORCH_CHECK(false, op_name, ": ", error.what());
  }
  auto entry = std::make_shared<CacheEntry>();
  std::vector<int> written = written_arguments(schema);
  std::vector<hlo::Value> module_results;

  // Results come in schema order of the fresh (non-aliasing) returns, then one per mutated
  // argument; returns that alias a mutated argument hand that argument back.
  std::vector<bool> return_is_alias;
  size_t fresh = 0;
  for (const c10::Argument& ret : schema.returns()) {
    bool alias = ret.alias_info() != nullptr;
    return_is_alias.push_back(alias);
    if (!alias) ++fresh;
  }
  TORCH_INTERNAL_ASSERT(
      results.size() >= fresh + written.size() || (fresh == 0 && results.size() >= written.size()),
      op_name, ": lowering gave ", results.size(), " results for ", fresh, " returns and ",
      written.size(), " mutated arguments");
  std::vector<int> fresh_outputs;
  for (size_t r = 0; r < fresh; ++r) {
    const hlo::Value& result = results[r];
    OutputPlan plan;
    plan.shape = result.shape;
    plan.dtype = to_scalar_type(result.type);
    plan.buffer_type = result.type;
    hlo::Value in_memory_order = result;
    if (r < layouts.size() && layouts[r].size() == result.shape.size()) {
      plan.strides = layouts[r];
      in_memory_order = builder.transpose(result, memory_order(plan.strides));
    }
    fresh_outputs.push_back(static_cast<int>(entry->outputs.size()));
    entry->outputs.push_back(plan);
    module_results.push_back(builder.reshape(in_memory_order, {hlo::num_elements(result.shape)}));
  }
  const bool inplace = !schema.name().empty() && schema.name().back() == '_';
  for (size_t w = 0; w < written.size(); ++w) {
    const c10::IValue& target_value = args[written[w]];
    if (target_value.isNone()) continue;
    const at::Tensor& target = target_value.toTensor();
    hlo::Value result = results[fresh + w];
    hlo::Shape target_shape = shape_of(target);
    if (result.shape != target_shape) {
      const auto& argument = schema.arguments()[written[w]];
      if (!inplace && argument.kwarg_only()) {
        // out=: resize the output as torch does (every mismatched one: mode.values has two),
        // then key again.
        std::vector<int64_t> strides;
        if (bucket_kind(op_name) == BucketKind::Pointwise)
          strides = pointwise_out_strides(schema, args, result.shape);
        entry->resizes.push_back({written[w], result.shape, std::move(strides)});
        continue;
      }
      TORCH_CHECK(false, "output with shape ", shape_text(target_shape),
                  " doesn't match the broadcast shape ", shape_text(result.shape));
    }
    if (!entry->resizes.empty()) continue;  // this attempt only resizes; the next one builds
    c10::ScalarType result_dtype = to_scalar_type(result.type);
    TORCH_CHECK(c10::canCast(result_dtype, target.scalar_type()), "result type ", result_dtype,
                " can't be cast to the desired output type ", target.scalar_type());
    // Some CPU kernels refuse an out= of another dtype where the Meta kernel allows it
    // (neg, floor): CPU's refusal of the dtypes, if it has one, is ours too (not an error the
    // zero-filled stand-ins cause: an integer remainder by zero). Checked once per key.
    if (result_dtype != target.scalar_type()) raise_cpu_dtype_error(schema, args);
    hlo::Value converted = builder.convert(result, to_element_type(target.scalar_type()));
    hlo::Value flat = written_storage(ctx, converted, target, written[w]);
    OutputPlan plan;
    plan.new_tensor = false;
    plan.arg = written[w];
    plan.shape = flat.shape;
    plan.dtype = target.scalar_type();
    plan.buffer_type = flat.type;
    entry->outputs.push_back(plan);
    module_results.push_back(flat);
  }
  if (!entry->resizes.empty()) {
    entry->op_name = op_name;
    entry->outputs.clear();
    return entry;
  }
  if (std::optional<hlo::Value> held = builder.runtime_checks(); held && runtime_checks_enabled()) {
    module_results.push_back(*held);
    hlo::Builder::RuntimeCheck failure = builder.runtime_check_failure();
    using Kind = hlo::Builder::CheckKind;
    const CheckError error = failure.kind == Kind::RaisesIndexError    ? CheckError::Index
                             : failure.kind == Kind::RaisesLinAlgError ? CheckError::LinAlg
                                                                       : CheckError::Runtime;
    entry->runtime_check = CheckedOp{op_name, failure.failure, error};
  }
  size_t next_fresh = 0, next_written = 0;
  for (bool alias : return_is_alias) {
    if (alias) {
      entry->returns.push_back(-(written.at(next_written++) + 1));
    } else {
      entry->returns.push_back(fresh_outputs.at(next_fresh++));
    }
  }
  entry->id = next_entry_id();
  entry->op_name = op_name;
  entry->function = builder.function("main", true, module_results);
  entry->helpers = builder.helpers();
  for (const hlo::Value& parameter : builder.parameters()) {
    entry->param_types.push_back(hlo::boundary_tensor_type(parameter.shape, parameter.type));
  }
  for (const hlo::Value& result : module_results) {
    entry->result_types.push_back(hlo::boundary_tensor_type(result.shape, result.type));
  }
  entry->params = std::move(ctx.params);
  entry->rng_blocks = ctx.rng_blocks;
  for (size_t r = 0; r < entry->outputs.size(); ++r) {
    const OutputPlan& plan = entry->outputs[r];
    if (plan.new_tensor) continue;
    for (size_t p = 0; p < entry->params.size(); ++p) {
      const ParamSource& param = entry->params[p];
      if (param.kind == ParamSource::Kind::Storage && param.arg == plan.arg &&
          param.list_index < 0 && entry->param_types[p] == entry->result_types[r]) {
        entry->aliases.emplace_back(static_cast<int>(p), static_cast<int>(r));
        break;
      }
    }
  }
  return entry;
}

// A scalar's host bytes, at most a complex double's 16: kept on the stack, since every op
// with a Scalar argument (add's alpha) looks its device copy up by them.
struct ScalarBytes {
  std::array<char, 16> data{};
  size_t size = 0;
};

template <typename T>
void put(ScalarBytes& bytes, T value) {
  static_assert(sizeof(T) <= sizeof(bytes.data));
  bytes.size = sizeof(T);
  std::memcpy(bytes.data.data(), &value, sizeof(T));
}

// A scalar as an eight-bit float, raising on overflow as CPU's fill does.
template <typename Float8>
Float8 float8_of(const c10::Scalar& scalar, const char* name) {
  return c10::checked_convert<Float8, double>(scalar.toDouble(), name);
}

// A Scalar as host bytes of `type`.
ScalarBytes scalar_bytes(const c10::Scalar& scalar, hlo::ElementType type) {
  ScalarBytes bytes;
  using E = hlo::ElementType;
  switch (type) {
    case E::Pred:
      put(bytes, static_cast<uint8_t>(scalar.toBool()));
      break;
    case E::S8:
      put(bytes, scalar.to<int8_t>());
      break;
    case E::S16:
      put(bytes, scalar.to<int16_t>());
      break;
    case E::S32:
      put(bytes, scalar.to<int32_t>());
      break;
    case E::S64:
      put(bytes, scalar.toLong());
      break;
    case E::U8:
      put(bytes, scalar.to<uint8_t>());
      break;
    case E::U16:
      put(bytes, scalar.to<uint16_t>());
      break;
    case E::U32:
      put(bytes, scalar.to<uint32_t>());
      break;
    case E::U64:
      put(bytes, scalar.to<uint64_t>());
      break;
    case E::F16:
      put(bytes, scalar.to<c10::Half>());
      break;
    case E::BF16:
      put(bytes, scalar.to<c10::BFloat16>());
      break;
    case E::F32:
      put(bytes, scalar.toFloat());
      break;
    case E::F64:
      put(bytes, scalar.toDouble());
      break;
    case E::C64:
      put(bytes, scalar.toComplexFloat());
      break;
    case E::C128:
      put(bytes, scalar.toComplexDouble());
      break;
    case E::C32:
      put(bytes, scalar.to<c10::complex<c10::Half>>());
      break;
    case E::F8E4M3FN:
      put(bytes, float8_of<c10::Float8_e4m3fn>(scalar, "c10::Float8_e4m3fn"));
      break;
    case E::F8E5M2:
      put(bytes, float8_of<c10::Float8_e5m2>(scalar, "c10::Float8_e5m2"));
      break;
    case E::F8E4M3FNUZ:
      put(bytes, float8_of<c10::Float8_e4m3fnuz>(scalar, "c10::Float8_e4m3fnuz"));
      break;
    case E::F8E5M2FNUZ:
      put(bytes, float8_of<c10::Float8_e5m2fnuz>(scalar, "c10::Float8_e5m2fnuz"));
      break;
  }
  return bytes;
}

std::shared_ptr<pjrt::Buffer> upload_bytes(const void* data, hlo::ElementType type,
                                           const hlo::Shape& shape, int device) {
  profiler::HostSpan span(profiler::collecting() ? std::string("upload: a host value") : "");
  metrics().uploads++;
  auto& runtime = Runtime::get();
  return std::make_shared<pjrt::Buffer>(
      runtime.client().upload(data, to_pjrt_type(type), shape, runtime.device(device)));
}

}  // namespace

// Device copies of recently used scalar values (alpha = 1, a learning rate, eps): buffers are
// immutable, so one upload serves every later op that passes the same value.
// Scalar parameters are uploaded once per distinct value and kept, least recently used first
// out: constants (alpha=1, eps, a fixed lr) stay cached, while values new at every step (Adam's
// bias correction, a scheduled lr) evict only the oldest entry. (The cache used to grow to
// 4096 buffers before starting over, ~1.6 KB each: a training run's memory rose for thousands
// of steps.)
std::shared_ptr<pjrt::Buffer> scalar_buffer(const c10::Scalar& scalar, hlo::ElementType type,
                                            int device) {
  struct Slot {
    std::shared_ptr<pjrt::Buffer> buffer;
    std::list<std::string>::iterator age;
  };
  static std::mutex mutex;
  static auto& buffers = *new std::unordered_map<std::string, Slot>();
  static auto& ages = *new std::list<std::string>();  // most recently used first
  constexpr size_t kMaxEntries = 256;
  const ScalarBytes bytes = scalar_bytes(scalar, type);
  std::string key(bytes.data.data(), bytes.size);
  key += static_cast<char>(type);
  key += std::to_string(device);
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = buffers.find(key);
    if (found != buffers.end()) {
      ages.splice(ages.begin(), ages, found->second.age);
      return found->second.buffer;
    }
  }
  auto buffer = upload_bytes(bytes.data.data(), type, {}, device);
  std::lock_guard<std::mutex> lock(mutex);
  if (buffers.contains(key)) return buffer;  // another thread uploaded it meanwhile
  ages.push_front(key);
  buffers.emplace(key, Slot{buffer, ages.begin()});
  if (buffers.size() > kMaxEntries) {
    buffers.erase(ages.back());
    ages.pop_back();
  }
  return buffer;
}

namespace {

// An op's executable as the profiler names it: the overload torch.ops spells, so that it never
// merges with the op's own row in key_averages() ("aten::mm.default", "aten::add.Tensor").
std::string executable_name(const std::string& op_name) {
  return op_name.ends_with('.') ? op_name + "default" : op_name;
}

// `function` with each aliased parameter of @main marked as the result it may be written into.
std::string with_aliases(std::string function, const CacheEntry& entry) {
  for (const auto& [param, result] : entry.aliases) {
    const std::string declared = "%arg" + std::to_string(param) + ": " + entry.param_types[param];
    const size_t at = function.find(declared);
    TORCH_INTERNAL_ASSERT(at != std::string::npos, entry.op_name, ": no parameter ", declared);
    function.insert(at + declared.size(),
                    " {tf.aliasing_output = " + std::to_string(result) + " : i32}");
  }
  return function;
}

// The op compiled on its own, on first use: DeferAndFuse only ever runs fused graphs, so an
// op seen only there never compiles standalone. `in_place`: the variant that writes its
// in-place results into their donated inputs (entry.aliases).
const pjrt::Executable& standalone_executable(const CacheEntry& entry, bool in_place) {
  std::once_flag& compiled = in_place ? entry.compiled_in_place : entry.compiled;
  std::shared_ptr<pjrt::Executable>& executable =
      in_place ? entry.in_place_executable : entry.executable;
  std::call_once(compiled, [&entry, &executable, in_place] {
    std::string module =
        hlo::wrap_module(in_place ? with_aliases(entry.function, entry) : entry.function,
                         entry.helpers, executable_name(entry.op_name));
    if (std::getenv("TORCH_TPU_DUMP_HLO") != nullptr) {
      std::fprintf(stderr, "torch_tpu: module for %s\n%s\n", entry.op_name.c_str(), module.c_str());
    }
    // Single ops' executables are persisted like graphs' unless TORCH_TPU_CACHE_EAGER=0, so
    // that a warm process compiles nothing: on a TPU or GPU each is a real compile, and even
    // the CPU plugin takes 20-110 ms for one where loading it back takes a few
    // (bench/compile_cache.py).
    static const bool persist = [] {
      const char* setting = std::getenv("TORCH_TPU_CACHE_EAGER");
      return setting == nullptr || std::string_view(setting) != "0";
    }();
    try {
      profiler::HostSpan span("compile " + executable_name(entry.op_name));
      executable = compile_with_cache(module, persist);
    } catch (const pjrt::Error& error) {
      const std::string message =
          "torch_tpu: compiling " + entry.op_name + " failed: " + error.what();
      TORCH_CHECK(false, message, flight::dump_note(message));
    }
  });
  return *executable;
}

// Runs one op now (Strict: enqueue and return; Debug: wait for it, so errors name the op).
std::vector<c10::IValue> execute(const std::shared_ptr<CacheEntry>& held,
                                 const std::vector<c10::IValue>& args, int device, bool wait) {
  if (!wait) bound_run_ahead();
  HostLaps laps;
  const CacheEntry& entry = *held;
  std::vector<std::shared_ptr<pjrt::Buffer>> inputs;
  inputs.reserve(entry.params.size());
  for (const ParamSource& param : entry.params) {
    inputs.push_back(param.kind == ParamSource::Kind::Storage
                         ? storage_buffer(tensor_of(args, param.arg, param.list_index))
                         : value_param_buffer(param, entry, args, device));
  }
  c10::SmallVector<PJRT_Buffer*, 8> raw;
  for (const auto& input : inputs) raw.push_back(input->raw());

  // An in-place write takes over the buffer it replaces where only its storage and this call
  // hold it (besides executions in flight): a few rows written into a large tensor, or an
  // add_, then costs what it writes, not a copy of the whole storage.
  std::vector<int64_t> donated;
  if (!entry.aliases.empty() && donation_enabled()) {
    for (const auto& [param, result] : entry.aliases) {
      if (pjrt::held_only_by(inputs[param], 2)) donated.push_back(param);
    }
  }
  metrics().executions++;
  metrics().donated_buffers += static_cast<int64_t>(donated.size());
  const pjrt::Executable& executable = standalone_executable(entry, !donated.empty());
  for (int64_t param : donated) inputs[param]->donate();
  std::shared_ptr<profiler::RunTimer> timer =
      profiler::RunTimer::launch([&entry] { return executable_name(entry.op_name); }, device);
  laps.lap(HostPhase::Inputs);
  pjrt::ExecuteResult result = executable.execute(raw, Runtime::get().device(device), donated);
  laps.lap(HostPhase::Launch);
  if (timer) timer->launched();
  if (wait) {
    try {
      result.done.await();
    } catch (const pjrt::Error& error) {
      TORCH_CHECK(false, "torch_tpu: ", entry.op_name, " failed on the device: ", error.what());
    }
    if (timer) timer->finished();
  } else {
    // Inputs stay alive until the device is done with them; outputs are usable at once (reads
    // wait for their producer). A failure is reported at the next sync point.
    pending_started();
    auto reads = std::make_shared<pjrt::InFlightReads>(std::move(inputs));
    result.done.on_ready([reads = std::move(reads), held, timer](auto error) mutable {
      if (timer) timer->finished();
      reads.reset();
      if (consume_injected_fault()) error = pjrt::Error("injected fault", PJRT_Error_Code_INTERNAL);
      if (error) record_async_error(held->op_name, error->what());
      pending_finished();
    });
  }
  laps.lap(HostPhase::Completion);

  std::vector<c10::IValue> outputs;
  std::vector<std::weak_ptr<pjrt::Buffer>> checked_results;  // for a failed check (see below)
  for (size_t i = 0; i < entry.outputs.size(); ++i) {
    const OutputPlan& plan = entry.outputs[i];
    auto buffer = std::make_shared<pjrt::Buffer>(std::move(result.outputs[i]));
    if (entry.runtime_check) checked_results.push_back(buffer);
    if (plan.new_tensor) {
      at::Tensor tensor = new_output_tensor(plan, device);
      device_storage(tensor).assign(std::move(buffer), plan.buffer_type);
      outputs.emplace_back(std::move(tensor));
    } else {
      device_storage(args[plan.arg].toTensor()).assign(std::move(buffer), plan.buffer_type);
      outputs.emplace_back(args[plan.arg]);
    }
  }
  if (entry.runtime_check) {
    watch_runtime_check(
        std::make_shared<pjrt::Buffer>(std::move(result.outputs[entry.outputs.size()])),
        hlo::ElementType::Pred, {*entry.runtime_check}, std::move(checked_results));
    if (wait) raise_failed_runtime_checks();  // Debug: at the op itself
  }
  laps.lap(HostPhase::Outputs);
  return outputs;
}

// TORCH_TPU_CHECK_FINITE=1: an op's floating outputs must hold no NaN or Inf.
void check_finite(const CacheEntry& entry, const std::vector<c10::IValue>& outputs) {
  for (const c10::IValue& value : outputs) {
    if (!value.isTensor()) continue;
    const at::Tensor& tensor = value.toTensor();
    if (!c10::isFloatingType(tensor.scalar_type()) || tensor.numel() == 0) continue;
    bool finite = at::isfinite(tensor).all().item<bool>();
    TORCH_CHECK(finite, "torch_tpu: ", entry.op_name,
                " produced NaN or Inf "
                "(TORCH_TPU_CHECK_FINITE=1 reports the first op that does)");
  }
}

// A lowering bound to the op it serves, found once per op and kept by schema address.
struct BoundLowering {
  LoweringEntry lowering;
  std::string op_name;  // "aten::add.Tensor", the cache key's prefix
  // A functional backward's `output_mask` argument (bool[]): the results it masks off are
  // returned undefined, as on CPU (DTensor and autograd rely on that).
  std::optional<int> output_mask_arg;
  // value_in_key of each argument, worked out when bound rather than at every call.
  std::vector<bool> key_mask;
  bool fill = false;  // fill_ or zero_ (see fills_nothing)
  BucketKind bucket = BucketKind::None;
};

bool is_fill(const std::string& op_name) {
  return op_name == "aten::fill_.Scalar" || op_name == "aten::fill_.Tensor" ||
         op_name == "aten::zero_.";
}

// Filling an empty tensor writes nothing. Padding code fills the slice between a real and a
// padded count, which is often empty; recorded, each offset of an empty slice would be an op
// of its own in a fused graph, and the graph would compile once per offset. (A fill value that
// is not 0-d is still refused, as on CPU.)
bool fills_nothing(const BoundLowering& bound, const std::vector<c10::IValue>& args) {
  return bound.fill && args[0].toTensor().numel() == 0 &&
         !(args.size() > 1 && args[1].isTensor() && args[1].toTensor().dim() != 0);
}

std::optional<int> output_mask_argument(const c10::FunctionSchema& schema) {
  if (schema.is_mutable()) return std::nullopt;  // out= variants fill every output
  auto index = schema.argumentIndexWithName("output_mask");
  if (!index) return std::nullopt;
  return static_cast<int>(*index);
}

std::mutex bound_mutex;
std::unordered_map<const void*, BoundLowering>& lowerings_by_schema() {
  static std::unordered_map<const void*, BoundLowering> table;
  return table;
}

std::vector<std::pair<std::string, LoweringEntry>>& pending_lowerings() {
  static std::vector<std::pair<std::string, LoweringEntry>> table;
  return table;
}

// torch.set_float32_matmul_precision, for the products this op lowers (part of its key).
// Whether a Strict op joins the pending graph instead of running alone: it reads no storage
// (a fill, a factory) and a compiled graph is pending, which it then joins at no launch.
bool joins_pending(const CacheEntry& entry) {
  if (!compiled_graph_pending()) return false;
  return std::none_of(entry.params.begin(), entry.params.end(), [](const ParamSource& param) {
    return param.kind == ParamSource::Kind::Storage;
  });
}

hlo::DotPrecision follow_matmul_precision() {
  hlo::DotPrecision precision;
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::HIGHEST:
      precision = hlo::DotPrecision::Highest;
      break;
    case at::Float32MatmulPrecision::HIGH:
      precision = hlo::DotPrecision::High;
      break;
    default:
      precision = hlo::DotPrecision::Default;
  }
  if (hlo::dot_precision() != precision) hlo::set_dot_precision(precision);
  return precision;
}

// `key_mask`: value_in_key for each argument, worked out once per op (lowered_kernel); null
// for run_lowering's calls, which work it out at each call.
std::vector<c10::IValue> dispatch(const std::string& op_name, const c10::FunctionSchema& schema,
                                  const LoweringEntry& lowering, std::vector<c10::IValue>& args,
                                  const std::vector<bool>* key_mask = nullptr,
                                  BucketKind bucket = BucketKind::None,
                                  bool indices_checked = false) {
  HostLaps laps;
  if (bucket != BucketKind::None) {
    // Debug checks indices as the caller gave them: at a bucket's length they carry padding.
    if (eager_mode() == EagerMode::Debug && !indices_checked) {
      check_indices(schema, args);
      indices_checked = true;
    }
    auto results = dispatch_in_buckets(
        bucket, op_name, schema, args, [&](std::vector<c10::IValue>& at_bucket_length) {
          return dispatch(op_name, schema, lowering, at_bucket_length, key_mask, BucketKind::None,
                          indices_checked);
        });
    if (results) return std::move(*results);
  }
  read_views_from_buckets(schema, args);
  int device = check_devices(schema, args);
  if (eager_mode() == EagerMode::Debug && !indices_checked) check_indices(schema, args);
  if (lowering.each_call) lowering.each_call(args);
  laps.lap(HostPhase::Arguments);
  OutputLayouts layouts;
  bool checked = false;
  for (int attempt = 0;; ++attempt) {
    // Built in a string the thread reuses, so that a cache hit allocates no key. A miss copies
    // it first: building the entry may dispatch other ops on this thread.
    thread_local std::string key;
    key.clear();
    key += op_name;
    // Integer division, mean of integers' float results, ...: the default dtype is part of
    // what a call computes.
    key += static_cast<char>('A' +
                             static_cast<int>(c10::typeMetaToScalarType(c10::get_default_dtype())));
    key += static_cast<char>('0' + static_cast<int>(follow_matmul_precision()));
    key += '(';
    for (size_t i = 0; i < args.size(); ++i) {
      append_key(key, args[i],
                 key_mask != nullptr ? (*key_mask)[i] : value_in_key(schema, lowering, i));
    }
    laps.lap(HostPhase::CacheKey);
    std::shared_ptr<CacheEntry> entry;
    {
      std::lock_guard<std::mutex> lock(cache_mutex);
      entry = cache_find(key);
    }
    if (entry) {
      metrics().cache_hits++;
    } else {
      metrics().cache_misses++;
      const std::string missed_key = key;
      // Only on a miss: a call that fails these never compiles, so it never hits. CPU's own
      // error for a bad call comes first; an op CPU computes for complex tensors but we do not
      // yet is refused after it.
      if (!checked) {
        checked = true;
        layouts = run_meta_checks(schema, args);
        if (refuses_complex(op_name, args)) {
          raise_cpu_error(schema, args);
          check_complex_support(op_name, args);
        }
      }
      entry = build_entry(op_name, schema, lowering, args, layouts);
      entry->key_hash = flight::hash_key(missed_key);
      std::shared_ptr<pjrt::Executable> evicted;
      {
        std::lock_guard<std::mutex> lock(cache_mutex);
        evicted = cache_insert(missed_key, entry);
      }
      retire(std::move(evicted));
    }
    // A call that only resizes its out= arguments (torch.arange makes an empty one for every
    // call) is cached too, so that it costs a lookup rather than a lowering each time.
    if (!entry->resizes.empty()) {
      TORCH_INTERNAL_ASSERT(attempt == 0, op_name, ": output resize did not settle");
      for (const auto& [arg, shape, strides] : entry->resizes) {
        const at::Tensor& out = args[arg].toTensor();
        // As CPU: an out= that is resized takes the layout ATen computed for it.
        if (at::native::resize_output(out, c10::IntArrayRef(shape)) && !strides.empty())
          out.as_strided_(shape, strides);
      }
      continue;
    }
    laps.lap(HostPhase::Lookup);
    EagerMode mode = eager_mode();
    // Before it runs, so that a crash or a failed compile finds it last in the record.
    if (flight::enabled()) flight::record_op(entry->op_name, args, mode, device, entry->key_hash);
    std::vector<c10::IValue> outputs =
        mode == EagerMode::DeferAndFuse || (mode == EagerMode::Strict && joins_pending(*entry))
            ? defer(entry, args, device)
            : execute(entry, args, device, mode == EagerMode::Debug);
    if (check_finite_enabled() && mode != EagerMode::DeferAndFuse &&
        entry->op_name.rfind("aten::isfinite", 0) != 0 &&
        entry->op_name.rfind("aten::all", 0) != 0) {
      check_finite(*entry, outputs);
    }
    std::vector<c10::IValue> returns;
    for (int index : entry->returns) {
      returns.push_back(index >= 0 ? outputs[index] : args[-index - 1]);
    }
    return returns;
  }
}

}  // namespace

at::Tensor tensor_of(const std::vector<c10::IValue>& args, int arg, int list_index) {
  if (list_index < 0) return args[arg].toTensor();
  const c10::IValue& list = args[arg];
  if (list.isTensorList()) return list.toTensorList().get(list_index);
  return list.toListRef()[list_index].toTensor();
}

std::shared_ptr<pjrt::Buffer> value_param_buffer(const ParamSource& param, const CacheEntry& entry,
                                                 const std::vector<c10::IValue>& args, int device) {
  switch (param.kind) {
    case ParamSource::Kind::Scalar:
      return scalar_buffer(args[param.arg].toScalar(), param.type, device);
    case ParamSource::Kind::CpuScalarTensor:
      return scalar_buffer(tensor_of(args, param.arg, param.list_index).item(), param.type, device);
    case ParamSource::Kind::ViewOffset:
      return scalar_buffer(tensor_of(args, param.arg, param.list_index).storage_offset(),
                           param.type, device);
    case ParamSource::Kind::RngState:
      return rng_state_buffer(param_generator(args, device), entry.rng_blocks, device);
    case ParamSource::Kind::Storage:
      break;
  }
  TORCH_INTERNAL_ASSERT(false, "torch_tpu: storage parameters are read with storage_buffer");
}

at::Generator param_generator(const std::vector<c10::IValue>& args, int device) {
  at::Generator generator = default_generator(static_cast<c10::DeviceIndex>(device));
  for (const c10::IValue& value : args) {
    if (value.isGenerator() && value.toGenerator().defined()) generator = value.toGenerator();
  }
  TORCH_CHECK(generator.device().type() == c10::DeviceType::PrivateUse1,
              "Expected a 'tpu' device type for generator but found '", generator.device().type(),
              "'");
  return generator;
}

std::shared_ptr<pjrt::Buffer> rng_state_buffer(at::Generator generator, uint64_t blocks,
                                               int device) {
  std::array<uint64_t, 2> state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    state = generator.get<DeviceGenerator>()->next_state(blocks);
  }
  return upload_bytes(state.data(), hlo::ElementType::U64, {2}, device);
}

at::Tensor new_output_tensor(const OutputPlan& plan, int device) {
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
  c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  if (!plan.strides.empty()) {
    return at::detail::empty_strided_generic(c10::IntArrayRef(plan.shape),
                                             c10::IntArrayRef(plan.strides), device_allocator(),
                                             keys, plan.dtype);
  }
  return at::detail::empty_generic(c10::IntArrayRef(plan.shape), device_allocator(), keys,
                                   plan.dtype, std::nullopt);
}

namespace {
std::mutex async_error_mutex;
std::string first_async_error;
std::atomic<bool> inject_fault{false};
}  // namespace

void record_async_error(const std::string& op_name, const std::string& message) {
  std::lock_guard<std::mutex> lock(async_error_mutex);
  if (first_async_error.empty()) first_async_error = op_name + ": " + message;
}

void raise_async_error() {
  std::string error;
  {
    std::lock_guard<std::mutex> lock(async_error_mutex);
    error.swap(first_async_error);
  }
  if (error.empty()) return;
  const std::string message = "torch_tpu: asynchronous device work failed in " + error;
  TORCH_CHECK(false, message, flight::dump_note(message));
}

void inject_async_fault() { inject_fault = true; }

bool consume_injected_fault() { return inject_fault.exchange(false); }

uint64_t next_entry_id() {
  static std::atomic<uint64_t> next_id{1};
  return next_id++;
}

std::shared_ptr<pjrt::Buffer> storage_buffer(const at::Tensor& tensor) {
  DeviceStorage& storage = device_storage(tensor);
  DeviceStorage::Contents contents = storage.contents();
  if (contents.pending) {
    materialize_pending();  // a deferred op writes this storage: run the graph first
    contents = storage.contents();
  }
  hlo::ElementType type = to_element_type(tensor.scalar_type());
  if (!contents.buffer) {
    // Never written (torch.empty): its contents are unspecified; zeros are as good as any.
    std::vector<char> zeros(storage.nbytes(), 0);
    auto buffer = upload_bytes(zeros.data(), type, {storage_elements(tensor)}, storage.device());
    storage.assign(buffer, type);
    return buffer;
  }
  if (contents.type != type) {
    // Reading a whole storage through another dtype must keep every byte.
    const auto nbytes = static_cast<int64_t>(storage.nbytes());
    TORCH_CHECK_NOT_IMPLEMENTED(
        nbytes % hlo::byte_size(type) == 0 && nbytes % hlo::byte_size(contents.type) == 0,
        "torch_tpu: reading a storage of ", nbytes, " bytes written as ",
        to_scalar_type(contents.type), " through a ", tensor.scalar_type(),
        " tensor: its size is not a whole number of elements of both dtypes");
    auto buffer = reinterpret_buffer(contents.buffer, contents.type, type,
                                     static_cast<int64_t>(storage.nbytes()), storage.device());
    storage.assign(buffer, type);
    return buffer;
  }
  return contents.buffer;
}

void register_lowering(std::initializer_list<const char*> names, Lowering lowering,
                       std::vector<int> static_scalars, EachCall each_call) {
  for (const char* name : names) {
    pending_lowerings().emplace_back(name, LoweringEntry{lowering, static_scalars, each_call});
  }
}

namespace {
// aten's ops are registered by their bare names, ours (torch_tpu::...) by qualified ones.
std::string lowering_name(const std::string& op_name) {
  return op_name.starts_with("aten::") ? op_name.substr(6) : op_name;
}
}  // namespace

void lowered_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  HostPhaseTimer total(HostPhase::OpTotal);
  const c10::FunctionSchema& schema = op.schema();
  const BoundLowering* bound = nullptr;
  {
    // Autograd runs backward on its own thread: the table is shared.
    std::lock_guard<std::mutex> lock(bound_mutex);
    auto& table = lowerings_by_schema();
    auto found = table.find(&schema);
    if (found == table.end()) {
      std::string name = lowering_name(schema.name());
      if (!schema.overload_name().empty()) name += "." + schema.overload_name();
      for (const auto& [pending_name, pending] : pending_lowerings()) {
        if (pending_name == name) {
          found = table
                      .emplace(&schema,
                               BoundLowering{pending, schema.name() + "." + schema.overload_name(),
                                             output_mask_argument(schema)})
                      .first;
          BoundLowering& bound_op = found->second;
          bound_op.fill = is_fill(bound_op.op_name);
          bound_op.bucket = bucket_kind(bound_op.op_name);
          if (bound_op.key_mask.empty()) {
            for (size_t i = 0; i < schema.arguments().size(); ++i) {
              bound_op.key_mask.push_back(value_in_key(schema, bound_op.lowering, i));
            }
          }
        }
      }
    }
    TORCH_INTERNAL_ASSERT(found != table.end(), "torch_tpu: no lowering for ", schema.name());
    bound = &found->second;  // stable: unordered_map never moves its elements
  }
  const size_t num_args = schema.arguments().size();
  std::vector<c10::IValue> args(std::make_move_iterator(stack->end() - num_args),
                                std::make_move_iterator(stack->end()));
  torch::jit::drop(*stack, num_args);
  if (fills_nothing(*bound, args)) {
    check_devices(schema, args);
    stack->push_back(std::move(args[0]));
    return;
  }
  // On the caller's tensors, before any is replaced by a copy (a view of a size bucket's
  // storage), and on every call: the cache key holds no aliasing.
  check_written_overlap(schema, args);
  std::vector<c10::IValue> results =
      dispatch(bound->op_name, schema, bound->lowering, args, &bound->key_mask, bound->bucket);
  if (bound->output_mask_arg) {
    const auto mask = args[*bound->output_mask_arg].toBoolList();
    for (size_t i = 0; i < results.size() && i < mask.size(); ++i) {
      if (!mask[i]) results[i] = at::Tensor();
    }
  }
  for (c10::IValue& value : results) stack->push_back(std::move(value));
}

std::vector<c10::IValue> run_lowering(const std::string& key_prefix, const Lowering& lowering,
                                      const c10::FunctionSchema& schema,
                                      std::vector<c10::IValue> args) {
  const BucketKind bucket = remembered_bucket_kind(key_prefix);
  return dispatch(key_prefix, schema, LoweringEntry{lowering, {}}, args, nullptr, bucket);
}

void await_all_pending() {
  await_pending();  // runs the pending fused graph first (the materialize hook)
  raise_async_error();
  raise_failed_runtime_checks();
}

const Lowering& find_lowering(const std::string& name) {
  for (const auto& [pending_name, pending] : pending_lowerings()) {
    if (pending_name == name) return pending.fn;
  }
  TORCH_INTERNAL_ASSERT(false, "torch_tpu: no lowering named ", name);
}

int64_t cache_size() {
  std::lock_guard<std::mutex> lock(cache_mutex);
  return static_cast<int64_t>(cache.size());
}

void clear_cache() {
  materialize_pending();
  await_in_flight();  // nothing may still be running an executable destroyed below
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    cache.clear();
    cache_ages.clear();
  }
  clear_fused_cache();
}

// Names of every lowered op, for registration (see registration.cc).
std::vector<std::string> lowered_op_names() {
  std::vector<std::string> names;
  for (const auto& [name, lowering] : pending_lowerings()) {
    if (name.front() != '@') names.push_back(name);
  }
  return names;
}

}  // namespace torch_tpu
