#include "csrc/dispatch/complex_support.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>
#include <set>
#include <string_view>
#include <unordered_set>

namespace torch_tpu {
namespace {

bool is_complex_tensor(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    return tensor.defined() && c10::isComplexType(tensor.scalar_type());
  }
  if (value.isTensorList()) {
    for (const at::Tensor& tensor : value.toTensorList().vec()) {
      if (tensor.defined() && c10::isComplexType(tensor.scalar_type())) return true;
    }
  }
  if (value.isList()) {
    for (const c10::IValue& item : value.toListRef()) {
      if (is_complex_tensor(item)) return true;
    }
  }
  return false;
}

// "aten::add_.Tensor" -> "add": the op's name without namespace, overload or in-place mark.
std::string_view base_name(std::string_view op_name) {
  if (op_name.rfind("aten::", 0) == 0) op_name.remove_prefix(6);
  op_name = op_name.substr(0, op_name.find('.'));
  if (!op_name.empty() && op_name.back() == '_' && op_name.front() != '_') {
    op_name.remove_suffix(1);
  }
  return op_name;
}

// Kernels whose StableHLO is valid and exact for complex operands (each checked against CPU
// in tests/python/test_complex.py).
const std::unordered_set<std::string_view>& complex_ops() {
  static const std::unordered_set<std::string_view> ops = {
      // copies, fills and arithmetic
      "copy", "fill", "zero", "add", "sub", "rsub", "mul", "div", "neg", "sum",
      // complex-specific
      "_conj_physical", "conj_physical", "complex", "polar", "_fft_c2c", "_fft_r2c", "_fft_c2r",
      // matrix products (dot_general is defined on complex numbers; conj bits are applied
      // when the operands are read)
      "mm", "bmm",
      // data movement
      "cat", "constant_pad_nd", "flip", "where", "gather", "scatter", "scatter_add", "index_select",
      "index_copy", "index_fill", "index_add", "take", "roll", "masked_select", "masked_scatter",
      "repeat", "tril", "triu",
      // math functions StableHLO defines on complex numbers
      "exp", "log", "sqrt", "sin", "cos", "tanh", "abs", "sgn", "silu", "unfold_backward", "pow",
      // comparisons and classification (both parts), statistics and products
      "eq", "ne", "isnan", "isinf", "isfinite", "mean", "var", "std", "var_mean", "std_mean",
      "prod", "cumsum", "logcumsumexp", "_logcumsumexp",
      // samplers, and a select
      "normal", "uniform", "masked_fill",
      // advanced indexing: gathers and scatters (accumulating with a complex add)
      "index", "_index_put_impl_", "index_put",
      // truth tests and norms (a complex value is true when either part is nonzero)
      "count_nonzero", "logical_not", "all", "any", "linalg_vector_norm",
      // shown to compute complex operands as CPU does by the complex64 OpInfo sweep
      // (tools/complex_coverage.py, docs/complex_coverage.md)
      "acos", "acosh", "asin", "atanh", "cosh", "sinh", "tan", "exp2", "expm1", "log10", "log1p",
      "log2", "reciprocal", "rsqrt", "sigmoid", "sinc", "addbmm", "addcdiv", "addcmul", "addmm",
      "addmv", "baddbmm", "dot", "mv", "lerp", "linalg_cross", "cumprod", "norm", "renorm",
      "logical_and", "logical_or", "logical_xor", "nonzero_static", "put", "channel_shuffle",
      "col2im", "im2col", "reflection_pad1d", "reflection_pad1d_backward", "reflection_pad2d",
      "reflection_pad2d_backward", "reflection_pad3d", "reflection_pad3d_backward",
      "replication_pad1d", "replication_pad1d_backward", "replication_pad2d",
      "replication_pad2d_backward", "replication_pad3d", "replication_pad3d_backward",
      "triangular_solve",
      // fixed for complex operands after that sweep: conjugated derivatives, vdot's conjugate,
      // angle's real argument, trace's complex sum
      "sigmoid_backward", "tanh_backward", "vdot", "angle", "trace", "logaddexp",
      // from PyTorch's test_unary_ufuncs (issue 47): written for complex operands
      "atan", "asinh",
      // jax kernels: jax lowered them for their complex operands
      "torch_tpu::jax_call",
      // size buckets' own data movement (dispatch/size_buckets.h)
      "torch_tpu::bucket_cat"};
  return ops;
}

std::atomic<bool> survey_on{false};
std::mutex survey_mutex;
std::set<std::string>& surveyed_ops() {
  static std::set<std::string> ops;
  return ops;
}

}  // namespace

bool refuses_complex(const std::string& op_name, const std::vector<c10::IValue>& args) {
  bool any_complex = false;
  // An out= overload's complex output (its last argument) takes a real result converted, as
  // on CPU (hypot(x, y, out=complex64)): only complex inputs need the op's complex support.
  const std::string_view name = op_name;
  // (xlogy spells them OutTensor and OutScalar_Self.)
  const size_t dot = name.find('.');
  const std::string_view overload = dot == std::string_view::npos ? "" : name.substr(dot + 1);
  const bool out_last = overload.ends_with("out") || overload.starts_with("Out");
  for (size_t i = 0; i + (out_last ? 1 : 0) < args.size(); ++i)
    any_complex = any_complex || is_complex_tensor(args[i]);
  bool refused = any_complex && (op_name.rfind("aten::abs_.", 0) == 0 ||
                                 complex_ops().count(base_name(op_name)) == 0);
  if (refused && survey_on.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(survey_mutex);
    surveyed_ops().emplace(base_name(op_name));
    return false;
  }
  return refused;
}

void set_complex_survey(bool on) { survey_on = on; }

std::vector<std::string> take_complex_survey() {
  std::lock_guard<std::mutex> lock(survey_mutex);
  std::vector<std::string> ops(surveyed_ops().begin(), surveyed_ops().end());
  surveyed_ops().clear();
  return ops;
}

void check_complex_support(const std::string& op_name, const std::vector<c10::IValue>& args) {
  if (!refuses_complex(op_name, args)) return;
  // torch refuses these for complex tensors (the result is real).
  TORCH_CHECK(op_name.rfind("aten::abs_.", 0) != 0,
              "In-place abs is not supported for complex tensors.");
  std::string_view name = op_name;
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);  // no overload name
  TORCH_CHECK_TYPE(complex_ops().count(base_name(op_name)) != 0, "torch_tpu: ", name,
                   " does not support complex tensors on the tpu device yet");
}

}  // namespace torch_tpu
