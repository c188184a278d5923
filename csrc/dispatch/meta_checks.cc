#include "csrc/dispatch/meta_checks.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>
#include <torch/csrc/Exceptions.h>

#include <exception>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "csrc/dispatch/view_io.h"

namespace torch_tpu {
namespace {

class SilentWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& /*warning*/) override {}
};

// Zero-filled CPU tensors stand in for the arguments when CPU's own error is wanted; above
// this many bytes the Meta kernel's error is kept instead of allocating host copies.
constexpr int64_t kMaxCpuRehearsalBytes = int64_t{64} << 20;

at::Tensor copy_on(const at::Tensor& tensor, c10::Device device, int64_t* bytes) {
  if (!tensor.defined()) return tensor;
  *bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
  at::Tensor copy =
      at::empty_strided(tensor.sizes(), tensor.strides(), tensor.options().device(device));
  if (device.is_cpu() && *bytes <= kMaxCpuRehearsalBytes) copy.zero_();
  return copy;
}

// `value` with its tensors replaced by stand-ins on `device` of the same sizes, strides and
// dtypes, and tpu devices named as that device; nullopt for arguments that cannot be given
// (generators belong to a device).
std::optional<c10::IValue> stand_in(const c10::IValue& value, c10::Device device, int64_t* bytes) {
  if (value.isTensor()) return copy_on(value.toTensor(), device, bytes);
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : value.toTensorList().vec())
      list.push_back(copy_on(t, device, bytes));
    return c10::IValue(list);
  }
  if (value.isList() && value.toListRef().size() > 0 &&
      (value.toListRef()[0].isTensor() || value.toListRef()[0].isNone())) {
    c10::List<std::optional<at::Tensor>> list;
    for (const c10::IValue& item : value.toListRef()) {
      list.push_back(item.isTensor()
                         ? std::optional<at::Tensor>(copy_on(item.toTensor(), device, bytes))
                         : std::nullopt);
    }
    return c10::IValue(list);
  }
  if (value.isGenerator()) return std::nullopt;
  // A factory's device too: a Python reference standing in for a Meta kernel (triu_indices's)
  // would otherwise compute on tpu.
  if (value.isDevice() && value.toDevice().type() == c10::DeviceType::PrivateUse1) {
    return c10::IValue(device);
  }
  return value;
}

std::optional<torch::jit::Stack> stand_ins(const std::vector<c10::IValue>& args,
                                           c10::Device device) {
  torch::jit::Stack stack;
  stack.reserve(args.size());
  int64_t bytes = 0;
  for (const c10::IValue& arg : args) {
    std::optional<c10::IValue> value = stand_in(arg, device, &bytes);
    if (!value) return std::nullopt;
    stack.push_back(std::move(*value));
  }
  if (device.is_cpu() && bytes > kMaxCpuRehearsalBytes) return std::nullopt;
  return stack;
}

bool is_python_error_of(const python_error& error, PyObject* type) {
  pybind11::gil_scoped_acquire gil;
  return error.type != nullptr && PyErr_GivenExceptionMatches(error.type, type) != 0;
}

bool is_not_implemented(const python_error& error) {
  return is_python_error_of(error, PyExc_NotImplementedError);
}

// torch.use_deterministic_algorithms' alert from a Meta kernel: Meta kernels take a meta
// tensor for a CUDA one, so the alert is about CUDA's kernel (histc's atomics, median's
// indices), not about ours, whose programs give the same result on every run.
bool is_determinism_alert(std::string_view message) {
  return message.find("does not have a deterministic implementation") != std::string_view::npos;
}

// Ops whose CPU kernels write into overlapping (expanded) targets without complaint: fills,
// masked and indexed writes (deprecated there, but allowed), and reductions' out=.
bool may_write_overlapping(std::string_view name) {
  static const std::unordered_set<std::string_view> allowed = {
      "aten::fill_", "aten::zero_", "aten::masked_fill_", "aten::index_put_",
      "aten::_index_put_impl_", "aten::index_fill_", "aten::sum", "aten::prod", "aten::amax",
      "aten::amin", "aten::nansum", "aten::std", "aten::var", "aten::norm", "aten::any",
      "aten::all", "aten::linalg_vector_norm",
      // idempotent: x <= t -> v
      "aten::threshold_"};
  return allowed.contains(name);
}

// Calls whose Meta kernel copies one backend's limits rather than the op's: _grouped_mm's
// takes only bfloat16 (CUDA's fast path), while CPU, CUDA's fallback and our lowering take any
// float; nll_loss's (a decomposition through gather) refuses the uint8 targets CPU takes.
bool meta_is_narrower_than_op(std::string_view name, const std::vector<c10::IValue>& args) {
  if (name == "aten::_grouped_mm") return true;
  // CPU's abs and angle write a complex input's real results into a complex out= (PyTorch's
  // test_abs_angle_complex_to_float); their Python references refuse it.
  if (name == "aten::abs" || name == "aten::angle") {
    return std::count_if(args.begin(), args.end(), [](const c10::IValue& arg) {
             return arg.isTensor() && arg.toTensor().defined() && arg.toTensor().is_complex();
           }) == 2;
  }
  if (!name.starts_with("aten::nll_loss")) return false;
  return std::any_of(args.begin(), args.end(), [](const c10::IValue& arg) {
    return arg.isTensor() && arg.toTensor().defined() && arg.toTensor().scalar_type() == c10::kByte;
  });
}

// The strides of each fresh return among `outputs` (the Meta kernel's results, one per schema
// return) where they are dense but not contiguous; empty otherwise.
OutputLayouts fresh_output_layouts(const c10::FunctionSchema& schema,
                                   const torch::jit::Stack& outputs) {
  OutputLayouts layouts;
  const auto& returns = schema.returns();
  for (size_t r = 0; r < returns.size() && r < outputs.size(); ++r) {
    if (returns[r].alias_info() != nullptr) continue;
    std::vector<int64_t> strides;
    if (outputs[r].isTensor()) {
      const at::Tensor& result = outputs[r].toTensor();
      // (Size-1 dims' strides included: TensorIterator orders them as the inputs' dims.)
      if (result.defined() && !has_default_strides(result) && result.is_non_overlapping_and_dense())
        strides = result.strides().vec();
    }
    layouts.push_back(std::move(strides));
  }
  return layouts;
}

// Calls whose dtypes CPU's kernels may refuse where the Meta kernel does not check (most CPU
// kernels dispatch on a dtype list, and many compare their operands' dtypes inside): a bool or
// integer `self`, or floating operands of different dtypes. Only such calls are rehearsed on
// the CPU, so floating-point calls of one dtype, the common ones, pay nothing.
bool unusual_dtypes(const std::vector<c10::IValue>& args) {
  std::optional<c10::ScalarType> self, floating;
  for (const c10::IValue& arg : args) {
    if (!arg.isTensor() || !arg.toTensor().defined()) continue;
    const c10::ScalarType type = arg.toTensor().scalar_type();
    if (!self) self = type;
    if (!c10::isFloatingType(type) && !c10::isComplexType(type)) continue;
    if (floating && *floating != type) return true;
    floating = type;
  }
  return self && c10::isIntegralType(*self, /*includeBool=*/true);
}

// Products and cross products whose Meta kernels take operands of two dtypes (mv of float32 by
// int64) where CPU refuses them: our lowerings would promote and answer.
bool mixes_dtypes_cpu_refuses(std::string_view name, const std::vector<c10::IValue>& args) {
  static const std::unordered_set<std::string_view> one_dtype = {
      "aten::mv",    "aten::mm",     "aten::bmm",          "aten::addmv",
      "aten::addmm", "aten::addbmm", "aten::baddbmm",      "aten::dot",
      "aten::vdot",  "aten::addr",   "aten::linalg_cross", "aten::cross"};
  if (!one_dtype.contains(name)) return false;
  std::optional<c10::ScalarType> first;
  for (const c10::IValue& arg : args) {
    if (!arg.isTensor() || !arg.toTensor().defined() || arg.toTensor().dim() == 0) continue;
    const c10::ScalarType type = arg.toTensor().scalar_type();
    if (first && *first != type) return true;
    first = type;
  }
  return false;
}

// Operands that CPU wants in the first tensor's dtype where the Meta kernel takes any
// (index_add's source, layer_norm's weight and bias, embedding_bag's per-sample weights): a
// call giving one of them as integers or bools is rehearsed on the CPU. (A float operand of
// another dtype is rehearsed already, see unusual_dtypes.)
bool integral_operand_cpu_refuses(const c10::FunctionSchema& schema,
                                  const std::vector<c10::IValue>& args) {
  static const auto& operands =
      *new std::unordered_map<std::string_view, std::unordered_set<std::string_view>>{
          {"aten::index_add", {"source"}},
          {"aten::index_add_", {"source"}},
          {"aten::index_copy", {"source"}},
          {"aten::index_copy_", {"source"}},
          {"aten::index_reduce", {"source"}},
          {"aten::index_reduce_", {"source"}},
          {"aten::native_layer_norm", {"weight", "bias"}},
          {"aten::binary_cross_entropy", {"target", "weight"}},
          {"aten::nll_loss_forward", {"weight"}},
          {"aten::nll_loss2d_forward", {"weight"}},
          {"aten::multi_margin_loss", {"weight"}},
          {"aten::_softmax_backward_data", {"output"}},
          {"aten::_log_softmax_backward_data", {"output"}},
          {"aten::_embedding_bag", {"per_sample_weights"}},
          {"aten::_embedding_bag_forward_only", {"per_sample_weights"}}};
  auto found = operands.find(schema.name());
  if (found == operands.end() || args.empty() || !args[0].isTensor()) return false;
  if (c10::isIntegralType(args[0].toTensor().scalar_type(), /*includeBool=*/true)) return false;
  const auto& arguments = schema.arguments();
  for (size_t i = 1; i < arguments.size() && i < args.size(); ++i) {
    if (!found->second.contains(arguments[i].name()) || !args[i].isTensor()) continue;
    const at::Tensor& operand = args[i].toTensor();
    if (operand.defined() && c10::isIntegralType(operand.scalar_type(), /*includeBool=*/true)) {
      return true;
    }
  }
  return false;
}

// Whether CPU's error is about dtypes (and so holds whatever the values): a dtype its kernel
// does not dispatch on, or operands whose dtypes it will not mix. Other errors from zero-filled
// stand-ins could be about the values.
bool is_dtype_error(const c10::Error& error) {
  if (dynamic_cast<const c10::NotImplementedError*>(&error) != nullptr) return true;
  const std::string_view message = error.what_without_backtrace();
  for (std::string_view word : {"type", "Bool", "bool"}) {
    if (message.find(word) != std::string_view::npos) return true;
  }
  return false;
}

// Ops whose CUDA kernels take dtypes their CPU kernels refuse, and that code written for CUDA
// relies on: tpu takes them too (histc of integer expert ids, in mixture-of-experts routing;
// pow in complex32, a float16 tensor with a complex exponent or base, computed in complex64).
bool cuda_takes_more_dtypes(std::string_view name, const std::vector<c10::IValue>& args) {
  if (name == "aten::histc") return true;
  if (name != "aten::pow") return false;
  bool half = false, complex = false;
  for (const c10::IValue& arg : args) {
    if (arg.isTensor() && arg.toTensor().defined()) {
      const c10::ScalarType type = arg.toTensor().scalar_type();
      half = half || type == c10::kHalf || type == c10::kComplexHalf;
      complex = complex || c10::isComplexType(type);
    } else if (arg.isComplexDouble()) {
      complex = true;
    }
  }
  return half && complex;
}

}  // namespace

// In-place and out= targets must not have several elements on one memory location, nor share
// some (not all) of their memory with an input (x[:-1] <<= x[1:]), as CPU checks (Meta kernels
// do not): the write would be silently ambiguous. set_ makes a tensor over another's memory.
namespace {

// Indexed writes that CPU refuses to make from any of their own memory, in full too
// (ind.put_(ind, ind)): which element lands would depend on the order of the writes.
bool refuses_any_overlap(std::string_view name) {
  static const std::unordered_set<std::string_view> ops = {
      "aten::scatter_",   "aten::scatter_add_",    "aten::scatter_reduce_", "aten::put_",
      "aten::index_add_", "aten::index_copy_",     "aten::index_fill_",     "aten::masked_scatter_",
      "aten::index_put_", "aten::_index_put_impl_"};
  return ops.contains(name);
}

// CPU's deprecation warning for a masked or indexed write into an expanded tensor (allowed).
void warn_expanded_target(std::string_view name, const std::vector<c10::IValue>& args) {
  static const std::unordered_map<std::string_view, std::string_view> example = {
      {"aten::masked_fill_", "tensor[mask] = scalar"},
      {"aten::index_fill_", "tensor[indices] = tensor"},
      {"aten::index_put_", "tensor[indices] = tensor"},
      {"aten::_index_put_impl_", "tensor[indices] = tensor"}};
  auto found = example.find(name);
  if (found == example.end() || args.empty() || !args[0].isTensor()) return;
  if (at::has_internal_overlap(args[0].toTensor()) != at::MemOverlap::Yes) return;
  TORCH_WARN("Use of ", name.substr(6), " on expanded tensors is deprecated. Please clone() ",
             "the tensor before performing this operation. This also applies to advanced ",
             "indexing e.g. ", found->second);
}

}  // namespace

void check_written_overlap(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args,
                           bool warn) {
  const std::string_view name = schema.name();
  if (warn) warn_expanded_target(name, args);
  if (name == "aten::masked_fill_") {  // the mask may not share part of the target's memory
    if (args.size() > 1 && args[1].isTensor()) {
      at::assert_no_partial_overlap(args[0].toTensor(), args[1].toTensor());
    }
    return;
  }
  const bool any_overlap = refuses_any_overlap(name);
  if (!any_overlap && (may_write_overlapping(name) || name == "aten::set_")) return;
  const auto& arguments = schema.arguments();
  auto written = [&](size_t i) {
    const c10::AliasInfo* alias = arguments[i].alias_info();
    return alias != nullptr && alias->isWrite();
  };
  for (size_t i = 0; i < arguments.size() && i < args.size(); ++i) {
    if (!written(i) || !args[i].isTensor()) continue;
    const at::Tensor& target = args[i].toTensor();
    if (!target.defined()) continue;
    if (!may_write_overlapping(name)) at::assert_no_internal_overlap(target);
    auto check = [&](const at::Tensor& input) {
      if (!input.defined()) return;
      if (any_overlap) {
        at::assert_no_overlap(target, input);
      } else {
        at::assert_no_partial_overlap(target, input);
      }
    };
    for (size_t j = 0; j < arguments.size() && j < args.size(); ++j) {
      if (written(j)) continue;
      if (args[j].isTensor()) check(args[j].toTensor());
      if (any_overlap && args[j].isList()) {  // index_put_'s indices
        for (const c10::IValue& item : args[j].toListRef()) {
          if (item.isTensor()) check(item.toTensor());
        }
      }
    }
  }
}

void raise_cpu_dtype_error(const c10::FunctionSchema& schema,
                           const std::vector<c10::IValue>& args) {
  if (cuda_takes_more_dtypes(schema.name(), args)) return;
  try {
    raise_cpu_error(schema, args);
  } catch (const c10::Error& error) {
    if (is_dtype_error(error)) throw;
  }
}

OutputLayouts run_meta_checks(const c10::FunctionSchema& schema,
                              const std::vector<c10::IValue>& args) {
  // Again for kernels that reach the dispatcher through run_lowering (copy_'s), silently.
  check_written_overlap(schema, args, /*warn=*/false);
  // Before the Meta kernel: some of these ops have none (_embedding_bag).
  if (integral_operand_cpu_refuses(schema, args)) raise_cpu_dtype_error(schema, args);
  if (meta_is_narrower_than_op(schema.name(), args)) return {};
  auto op = c10::Dispatcher::singleton().findOp(schema.operator_name());
  if (!op || !op->hasKernelForDispatchKey(c10::DispatchKey::Meta)) return {};
  std::optional<torch::jit::Stack> meta = stand_ins(args, c10::Device(c10::kMeta));
  if (!meta) return {};
  // The real call warns (a resized out=, say); the rehearsals must not warn a second time.
  // Python references warn through Python's warnings, which no C++ handler silences: their
  // out= stand-ins are empty, which resizes silently (PyTorch's test_out_resize_warning).
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size() && i < meta->size(); ++i) {
    const c10::AliasInfo* alias = arguments[i].alias_info();
    if (arguments[i].kwarg_only() && alias != nullptr && alias->isWrite() &&
        (*meta)[i].isTensor() && (*meta)[i].toTensor().numel() > 0) {
      (*meta)[i].toTensor().resize_({0});
    }
  }
  SilentWarnings silent;
  c10::WarningUtils::WarningHandlerGuard quiet(&silent);
  std::exception_ptr meta_error;
  bool meta_broke = false;
  try {
    op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &*meta);
  } catch (const c10::NotImplementedError&) {
    return {};  // This Meta kernel cannot answer here (a data-dependent shape, say).
  } catch (const python_error& error) {
    if (is_not_implemented(error)) return {};
    meta_error = std::current_exception();
    // A Python reference that fails on its own code (torch._check given an int for an empty
    // upsample, `.device` of _thnn_fused_lstm_cell's absent bias) rather than refusing the call.
    meta_broke = is_python_error_of(error, PyExc_TypeError) ||
                 is_python_error_of(error, PyExc_AttributeError);
  } catch (const pybind11::error_already_set& error) {
    if (is_determinism_alert(error.what())) return {};
    meta_error = std::current_exception();
    pybind11::gil_scoped_acquire gil;
    meta_broke = error.matches(PyExc_TypeError) || error.matches(PyExc_AttributeError);
  } catch (const std::exception& error) {
    if (is_determinism_alert(error.what())) return {};
    meta_error = std::current_exception();
  } catch (...) {
    meta_error = std::current_exception();
  }
  if (!meta_error) {
    if (unusual_dtypes(args) || mixes_dtypes_cpu_refuses(schema.name(), args)) {
      raise_cpu_dtype_error(schema, args);
    }
    return fresh_output_layouts(schema, *meta);
  }
  // The call is bad. Most Meta kernels are torch's Python references, whose messages (and now
  // and then classes) differ from CPU's: CPU's own error is raised where CPU has one.
  raise_cpu_error(schema, args);
  if (meta_broke) return {};  // CPU took the call, and the Meta kernel's error was its own bug
  std::rethrow_exception(meta_error);  // CPU took the call: the Meta kernel's error stands
}

void raise_cpu_error(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  auto op = c10::Dispatcher::singleton().findOp(schema.operator_name());
  if (!op) return;
  using Key = c10::DispatchKey;
  const bool runs_on_cpu =
      op->hasKernelForDispatchKey(Key::CPU) ||
      op->hasKernelForDispatchKey(Key::CompositeExplicitAutograd) ||
      op->hasKernelForDispatchKey(Key::CompositeExplicitAutogradNonFunctional) ||
      op->hasKernelForDispatchKey(Key::CompositeImplicitAutograd);
  if (!runs_on_cpu) return;
  // CPU's kernel on zero-filled stand-ins: a bad call fails its checks before computing.
  std::optional<torch::jit::Stack> cpu = stand_ins(args, c10::Device(c10::kCPU));
  if (!cpu) return;
  SilentWarnings silent;
  c10::WarningUtils::WarningHandlerGuard quiet(&silent);
  op->redispatchBoxed(c10::DispatchKeySet(Key::CPU), &*cpu);
}

}  // namespace torch_tpu
