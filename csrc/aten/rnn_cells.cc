// ATen's fused LSTM and GRU cells. ATen's RNN modules send every device but CPU to these: the
// two matmuls' gate pre-activations go in, the new state and a `workspace` for the backward come
// out. Gate orders, the workspace's contents and the math follow ATen's CUDA kernels
// (aten/src/ATen/native/cuda/RNN.cu): computed in opmath, rounded once per output.
#include <ATen/TensorUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "csrc/aten/arith.h"
#include "csrc/aten/common.h"
#include "csrc/dispatch/dispatcher.h"

namespace torch_tpu::aten {
namespace {

constexpr int64_t kLstmGates = 4;     // i, f, g, o
constexpr int64_t kGruGates = 3;      // r, z, n
constexpr int64_t kGruWorkspace = 5;  // r, z, n, hx, hidden_gates' n + hidden_bias' n

// Chunk `i` of `count` equal chunks along dim 1 of a [batch, count * hidden] value.
Value chunk(Builder& b, const Value& x, int64_t i, int64_t count) {
  const int64_t width = x.shape[1] / count;
  return b.slice(x, {0, i * width}, {x.shape[0], (i + 1) * width}, {1, 1});
}
Value sigmoid(Builder& b, const Value& x) { return b.logistic(x); }
Value tanh(Builder& b, const Value& x) { return b.tanh(x); }
Value one_minus(Builder& b, const Value& x) { return b.subtract(c(b, 1, x), x); }
// d sigmoid / dx from its output y: y (1 - y); d tanh / dx: 1 - y^2.
Value sigmoid_slope(Builder& b, const Value& y) { return b.multiply(one_minus(b, y), y); }
Value tanh_slope(Builder& b, const Value& y) { return one_minus(b, b.multiply(y, y)); }

// The sizes CUDA's kernels check (GRU has no Meta kernel to check them first).
void check_cell_sizes(LoweringContext& ctx, const char* op, int64_t gates) {
  auto arg = [&](int index, const char* name) {
    static const at::Tensor undefined;
    const c10::IValue& value = ctx.arg(index);
    return at::TensorArg(value.isNone() ? undefined : value.toTensor(), name, index + 1);
  };
  const at::TensorArg input_gates = arg(0, "input_gates"), hidden_gates = arg(1, "hidden_gates");
  const at::TensorArg input_bias = arg(3, "input_bias"), hidden_bias = arg(4, "hidden_bias");
  const at::TensorArg prev_hidden = arg(2, "prev_hidden");
  at::checkDim(op, input_gates, 2);
  at::checkSameSize(op, input_gates, hidden_gates);
  const int64_t gates_size = input_gates->size(1);
  if (input_bias->defined()) {
    at::checkDim(op, input_bias, 1);
    at::checkNumel(op, input_bias, gates_size);
    at::checkSameSize(op, input_bias, hidden_bias);
  }
  at::checkDim(op, prev_hidden, 2);
  at::checkNumel(op, prev_hidden, input_gates->size(0) * gates_size / gates);
}

// A cell's inputs in opmath; the biases broadcast over the batch.
struct CellInputs {
  Value input_gates, hidden_gates, state;
  std::optional<Value> input_bias, hidden_bias;
  ElementType type;  // the inputs' dtype, the results'

  // Gate k's input and hidden parts with their biases (zero without).
  Value input_part(Builder& b, int64_t k, int64_t count) const {
    return with_bias(b, chunk(b, input_gates, k, count), input_bias, k, count);
  }
  Value hidden_part(Builder& b, int64_t k, int64_t count) const {
    return with_bias(b, chunk(b, hidden_gates, k, count), hidden_bias, k, count);
  }
  // CUDA's order: input + hidden + input bias + hidden bias.
  Value sum(Builder& b, int64_t k, int64_t count) const {
    Value x = b.add(chunk(b, input_gates, k, count), chunk(b, hidden_gates, k, count));
    x = with_bias(b, x, input_bias, k, count);
    return with_bias(b, x, hidden_bias, k, count);
  }

 private:
  static Value with_bias(Builder& b, const Value& x, const std::optional<Value>& bias, int64_t k,
                         int64_t count) {
    return bias ? b.add(x, chunk(b, *bias, k, count)) : x;
  }
};

CellInputs read_cell(LoweringContext& ctx) {
  Builder& b = ctx.b;
  const Value input_gates = ctx.tensor(0);
  const ElementType math = opmath(input_gates.type);
  auto in_math = [&](const Value& x) { return b.convert(x, math); };
  auto bias = [&](int index) -> std::optional<Value> {
    std::optional<Value> value = ctx.optional_tensor(index);
    if (!value) return std::nullopt;
    return as(b, *value, math, input_gates.shape);
  };
  return {in_math(input_gates), in_math(ctx.tensor(1)), in_math(ctx.tensor(2)), bias(3), bias(4),
          input_gates.type};
}

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?)
//   -> (hy, cy, workspace = the activated gates [i, f, g, o], shaped like input_gates).
LOWER({"_thnn_fused_lstm_cell"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  check_cell_sizes(ctx, "_thnn_fused_lstm_cell", kLstmGates);
  const CellInputs in = read_cell(ctx);
  const Value input = sigmoid(b, in.sum(b, 0, kLstmGates));
  const Value forget = sigmoid(b, in.sum(b, 1, kLstmGates));
  const Value cell = tanh(b, in.sum(b, 2, kLstmGates));
  const Value output = sigmoid(b, in.sum(b, 3, kLstmGates));
  const Value cy = b.add(b.multiply(forget, in.state), b.multiply(input, cell));
  const Value hy = b.multiply(output, tanh(b, cy));
  const Value workspace = b.concatenate({input, forget, cell, output}, 1);
  return Values{b.convert(hy, in.type), b.convert(cy, in.type), b.convert(workspace, in.type)};
});

// The summed gradient of each gate over the batch: the biases' gradient.
Value bias_grad(Builder& b, const Value& grad_gates) {
  return b.convert(sum(b, b.convert(grad_gates, opmath(grad_gates.type)), {0}), grad_gates.type);
}
// What stands in for a result that the wrapper below returns undefined.
Value nothing(Builder& b, ElementType type) { return splat(b, 0, type, {0}); }

// (grad_hy?, grad_cy?, cx, cy, workspace, has_bias) -> (grad_gates, grad_cx, grad_bias), as
// _thnn_fused_lstm_cell_backward_impl; a missing gradient counts as zeros.
LOWER({"@lstm_cell_backward"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  const Value workspace = ctx.tensor(4);
  const ElementType type = workspace.type, math = opmath(type);
  const Value cx = b.convert(ctx.tensor(2), math), cy = b.convert(ctx.tensor(3), math);
  auto grad_or_zeros = [&](int index) {
    std::optional<Value> grad = ctx.optional_tensor(index);
    return grad ? b.convert(*grad, math) : c(b, 0, cx);
  };
  const Value grad_hy = grad_or_zeros(0), grad_cy = grad_or_zeros(1);
  auto gate = [&](int64_t k) { return b.convert(chunk(b, workspace, k, kLstmGates), math); };
  const Value input = gate(0), forget = gate(1), cell = gate(2), output = gate(3);

  const Value tanh_cy = tanh(b, cy);
  // The gradient reaching cy: through hy = o tanh(cy), plus grad_cy's own.
  const Value grad_c =
      b.add(b.multiply(b.multiply(grad_hy, output), tanh_slope(b, tanh_cy)), grad_cy);
  const Value grad_input = b.multiply(b.multiply(grad_c, cell), sigmoid_slope(b, input));
  const Value grad_forget = b.multiply(b.multiply(grad_c, cx), sigmoid_slope(b, forget));
  const Value grad_cell = b.multiply(b.multiply(grad_c, input), tanh_slope(b, cell));
  const Value grad_output = b.multiply(b.multiply(grad_hy, tanh_cy), sigmoid_slope(b, output));
  const Value grad_gates =
      b.convert(b.concatenate({grad_input, grad_forget, grad_cell, grad_output}, 1), type);
  const Value grad_cx = b.convert(b.multiply(grad_c, forget), type);
  const bool has_bias = ctx.arg(5).toBool();
  return Values{grad_gates, grad_cx, has_bias ? bias_grad(b, grad_gates) : nothing(b, type)};
});

// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?)
//   -> (hy, workspace = [r, z, n, hx, hidden_gates' n + hidden_bias' n], [batch, 5 * hidden]).
LOWER({"_thnn_fused_gru_cell"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  check_cell_sizes(ctx, "_thnn_fused_gru_cell", kGruGates);
  const CellInputs in = read_cell(ctx);
  const Value reset = sigmoid(b, in.sum(b, 0, kGruGates));
  const Value update = sigmoid(b, in.sum(b, 1, kGruGates));
  const Value hidden_n = in.hidden_part(b, 2, kGruGates);
  const Value candidate =
      tanh(b, b.add(in.input_part(b, 2, kGruGates), b.multiply(reset, hidden_n)));
  // hy = n + z (hx - n)
  const Value hy = b.add(candidate, b.multiply(update, b.subtract(in.state, candidate)));
  const Value workspace = b.concatenate({reset, update, candidate, in.state, hidden_n}, 1);
  return Values{b.convert(hy, in.type), b.convert(workspace, in.type)};
});

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)
//   -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias).
LOWER({"@gru_cell_backward"}, [](LoweringContext& ctx) {
  Builder& b = ctx.b;
  const Value grad_hy0 = ctx.tensor(0), workspace = ctx.tensor(1);
  const char* op = "fused_gru_cell_backward";
  const at::TensorArg grad_arg(ctx.tensor_meta(0), "grad_hy", 1);
  at::checkDim(op, grad_arg, 2);
  at::checkSize(op, at::TensorArg(ctx.tensor_meta(1), "workspace", 2),
                {grad_hy0.shape[0], grad_hy0.shape[1] * kGruWorkspace});
  const ElementType type = grad_hy0.type, math = opmath(type);
  const Value grad_hy = b.convert(grad_hy0, math);
  auto part = [&](int64_t k) { return b.convert(chunk(b, workspace, k, kGruWorkspace), math); };
  const Value reset = part(0), update = part(1), candidate = part(2), hx = part(3);
  const Value hidden_n = part(4);

  const Value grad_update =
      b.multiply(b.multiply(grad_hy, b.subtract(hx, candidate)), sigmoid_slope(b, update));
  const Value grad_hx = b.multiply(grad_hy, update);
  const Value grad_input_n =
      b.multiply(b.multiply(grad_hy, one_minus(b, update)), tanh_slope(b, candidate));
  const Value grad_hidden_n = b.multiply(grad_input_n, reset);
  const Value grad_reset = b.multiply(b.multiply(grad_input_n, hidden_n), sigmoid_slope(b, reset));
  const Value grad_input_gates =
      b.convert(b.concatenate({grad_reset, grad_update, grad_input_n}, 1), type);
  const Value grad_hidden_gates =
      b.convert(b.concatenate({grad_reset, grad_update, grad_hidden_n}, 1), type);
  const bool has_bias = ctx.arg(2).toBool();
  return Values{grad_input_gates, grad_hidden_gates, b.convert(grad_hx, type),
                has_bias ? bias_grad(b, grad_input_gates) : nothing(b, type),
                has_bias ? bias_grad(b, grad_hidden_gates) : nothing(b, type)};
});

// The backwards return their bias gradients undefined without biases (and the LSTM's every
// result without incoming gradients), which a lowering's results cannot be: these run the
// lowering as the op's one executable and drop what ATen leaves undefined.
const c10::FunctionSchema& schema(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").schema();
}
bool defined(const std::optional<at::Tensor>& tensor) {
  return tensor.has_value() && tensor->defined();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  if (!defined(grad_hy) && !defined(grad_cy)) return {};
  static const auto& op_schema = schema("aten::_thnn_fused_lstm_cell_backward_impl");
  std::vector<c10::IValue> results = run_lowering("aten::_thnn_fused_lstm_cell_backward_impl",
                                                  find_lowering("@lstm_cell_backward"), op_schema,
                                                  {grad_hy, grad_cy, cx, cy, workspace, has_bias});
  return {results[0].toTensor(), results[1].toTensor(),
          has_bias ? results[2].toTensor() : at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  static const auto& op_schema = schema("aten::_thnn_fused_gru_cell_backward");
  std::vector<c10::IValue> results =
      run_lowering("aten::_thnn_fused_gru_cell_backward", find_lowering("@gru_cell_backward"),
                   op_schema, {grad_hy, workspace, has_bias});
  auto bias = [&](int index) { return has_bias ? results[index].toTensor() : at::Tensor(); };
  return {results[0].toTensor(), results[1].toTensor(), results[2].toTensor(), bias(3), bias(4)};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(gru_cell_backward));
}

}  // namespace
}  // namespace torch_tpu::aten
