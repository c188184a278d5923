// Builds one StableHLO module (MLIR text, generic op syntax) from typed values. Knows nothing
// of torch or PJRT. Each method checks its operands and infers its result's shape and type, so
// a kernel error surfaces here, with a message, rather than as a compiler failure.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "csrc/hlo/ops.h"
#include "csrc/hlo/types.h"

namespace torch_tpu::hlo {

struct Value {
  std::string name;  // SSA name, e.g. %v3 or %v3#1
  Shape shape;
  ElementType type = ElementType::F32;
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  std::string tensor_type() const { return hlo::tensor_type(shape, type); }
};

// The same SSA value under another element type of the same MLIR spelling (C32 and C64).
inline Value retyped(const Value& value, ElementType type) {
  return Value{value.name, value.shape, type};
}

// A malformed request to the builder (wrong shapes or types): a bug in a kernel or bad input.
class BuildError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct GatherDims {
  std::vector<int64_t> offset_dims, collapsed_slice_dims, start_index_map;
  std::vector<int64_t> operand_batching_dims, start_indices_batching_dims;
  int64_t index_vector_dim = 0;
};

struct ScatterDims {
  std::vector<int64_t> update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims;
  std::vector<int64_t> input_batching_dims, scatter_indices_batching_dims;
  int64_t index_vector_dim = 0;
};

struct ConvDims {
  // Layout letters in stablehlo.conv form, e.g. input "b f 0 1" is NCHW.
  int64_t input_batch = 0, input_feature = 1;
  std::vector<int64_t> input_spatial;
  int64_t kernel_output_feature = 0, kernel_input_feature = 1;
  std::vector<int64_t> kernel_spatial;
  int64_t output_batch = 0, output_feature = 1;
  std::vector<int64_t> output_spatial;
};

struct ConvParams {
  std::vector<int64_t> strides, lhs_dilation, rhs_dilation;
  std::vector<std::pair<int64_t, int64_t>> padding;
  int64_t feature_group_count = 1, batch_group_count = 1;
};

// How float32 (and wider) matrix products and convolutions are computed: exactly
// (`Highest`, PyTorch's default, "highest"), or with the faster reduced-precision paths a
// backend has (TF32 on NVIDIA GPUs, bf16 passes on TPUs: "high" and "medium"). Process-wide,
// as torch.set_float32_matmul_precision is; the dispatcher keeps it in step with torch's and
// in its cache keys. The plugin's own default is reduced precision on GPU and TPU, so
// products say which they want.
enum class DotPrecision { Default, High, Highest };
void set_dot_precision(DotPrecision precision);
DotPrecision dot_precision();

class Builder {
 public:
  // A region body: gets the block arguments, emits ops through the builder, returns results.
  using Body = std::function<std::vector<Value>(Builder&, const std::vector<Value>&)>;

  Value parameter(const Shape& shape, ElementType type);
  int64_t num_parameters() const { return static_cast<int64_t>(parameters_.size()); }
  const std::vector<Value>& parameters() const { return parameters_; }

  Value constant(double value, ElementType type, const Shape& shape = {});
  Value constant_int(int64_t value, ElementType type, const Shape& shape = {});
  // A 1-D constant holding `values` (a table computed on the host), in a real or integer type.
  Value constant_values(const std::vector<double>& values, ElementType type);
  Value iota(const Shape& shape, ElementType type, int64_t dimension);

  // Elementwise; operands must have equal shapes (broadcast explicitly first). Each op of
  // ops.h has its own method, e.g. b.negate(x), b.add(x, y), b.ge(x, y); these take the op as
  // a value, for kernels that choose it (b.binary(is_max ? BinaryOp::Maximum : ...)).
  Value unary(UnaryOp op, const Value& x);
  Value binary(BinaryOp op, const Value& a, const Value& b);
  Value compare(Comparison direction, const Value& a, const Value& b);
#define TORCH_TPU_HLO_UNARY_METHOD(value, method, name) \
  Value method(const Value& x) { return unary(UnaryOp::value, x); }
#define TORCH_TPU_HLO_BINARY_METHOD(value, method, name) \
  Value method(const Value& a, const Value& b) { return binary(BinaryOp::value, a, b); }
#define TORCH_TPU_HLO_COMPARISON_METHOD(value, method, name) \
  Value method(const Value& a, const Value& b) { return compare(Comparison::value, a, b); }
  TORCH_TPU_HLO_UNARY_OPS(TORCH_TPU_HLO_UNARY_METHOD)
  TORCH_TPU_HLO_BINARY_OPS(TORCH_TPU_HLO_BINARY_METHOD)
  TORCH_TPU_HLO_COMPARISONS(TORCH_TPU_HLO_COMPARISON_METHOD)
#undef TORCH_TPU_HLO_UNARY_METHOD
#undef TORCH_TPU_HLO_BINARY_METHOD
#undef TORCH_TPU_HLO_COMPARISON_METHOD
  Value select(const Value& predicate, const Value& on_true, const Value& on_false);
  Value clamp(const Value& min, const Value& x, const Value& max);
  Value convert(const Value& x, ElementType type);
  // x rounded to a float of that many exponent and mantissa bits (float16: 5, 10), kept in x's
  // type: a rounding XLA keeps, where it may drop a narrowing convert and its widening one.
  Value reduce_precision(const Value& x, int exponent_bits, int mantissa_bits);
  // x * y exactly, as the rounded product and its error (Dekker's product; float32 or float64):
  // the factors cut into halves of their significands by masking bits, so that a fused
  // multiply-add in the backend cannot disturb the split.
  std::pair<Value, Value> exact_product(const Value& x, const Value& y);
  // Same bits as another type; to a narrower type adds a trailing dimension, to a wider one
  // consumes it (as stablehlo.bitcast_convert does).
  Value bitcast_convert(const Value& x, ElementType type);
  // Complex numbers: parts of a complex value (real() of a real value is itself), and back.
  Value real(const Value& x);
  Value imag(const Value& x);
  Value complex(const Value& re, const Value& im);
  // Complex conjugate; a real value is its own conjugate.
  Value conj(const Value& x);
  // stablehlo.fft over the trailing lengths.size() dimensions: FFT, IFFT (scaled by 1/n, as
  // XLA defines it), RFFT (real in, n/2+1 out), IRFFT (back to `lengths` real points).
  Value fft(const Value& x, FftType fft_type, const std::vector<int64_t>& lengths);

  Value reshape(const Value& x, const Shape& shape);
  Value broadcast_in_dim(const Value& x, const Shape& shape, const std::vector<int64_t>& dims);
  Value transpose(const Value& x, const std::vector<int64_t>& permutation);
  Value slice(const Value& x, const std::vector<int64_t>& start, const std::vector<int64_t>& limit,
              const std::vector<int64_t>& strides);
  Value dynamic_slice(const Value& x, const std::vector<Value>& starts,
                      const std::vector<int64_t>& sizes);
  Value dynamic_update_slice(const Value& x, const Value& update, const std::vector<Value>& starts);
  Value concatenate(const std::vector<Value>& values, int64_t dimension);
  Value pad(const Value& x, const Value& padding_value, const std::vector<int64_t>& low,
            const std::vector<int64_t>& high, const std::vector<int64_t>& interior);
  Value reverse(const Value& x, const std::vector<int64_t>& dims);

  Value dot_general(const Value& lhs, const Value& rhs, const std::vector<int64_t>& lhs_batch,
                    const std::vector<int64_t>& rhs_batch,
                    const std::vector<int64_t>& lhs_contracting,
                    const std::vector<int64_t>& rhs_contracting, ElementType result_type);
  Value convolution(const Value& input, const Value& kernel, const ConvDims& dims,
                    const ConvParams& params, ElementType result_type);

  std::vector<Value> reduce(const std::vector<Value>& inputs, const std::vector<Value>& inits,
                            const std::vector<int64_t>& dims, const Body& body);
  // Single-input reduction whose body is one binary op (BinaryOp::Add, Maximum, ...).
  Value reduce(const Value& x, const Value& init, const std::vector<int64_t>& dims, BinaryOp op);
  Value reduce_window(const Value& x, const Value& init, const std::vector<int64_t>& window,
                      const std::vector<int64_t>& strides,
                      const std::vector<int64_t>& base_dilations,
                      const std::vector<int64_t>& window_dilations,
                      const std::vector<std::pair<int64_t, int64_t>>& padding, BinaryOp op);
  std::vector<Value> sort(const std::vector<Value>& inputs, int64_t dimension, bool stable,
                          const Body& comparator);

  // stablehlo.while over loop-carried `state`: `condition` returns a scalar predicate, `body`
  // the next state (same shapes and types). Both see only the state, never outer values.
  std::vector<Value> while_loop(const std::vector<Value>& state, const Body& condition,
                                const Body& body);

  Value gather(const Value& operand, const Value& indices, const GatherDims& dims,
               const std::vector<int64_t>& slice_sizes);
  Value scatter(const Value& operand, const Value& indices, const Value& updates,
                const ScatterDims& dims, const Body& update);

  // Returns {new_state, random bits}; state is a u64[2] three-fry key/counter.
  std::pair<Value, Value> rng_bit_generator(const Value& state, const Shape& shape,
                                            ElementType type);

  // Cross-replica collectives (no channel_handle: replica ids, not partitions, index the
  // groups). `replica_groups` lists disjoint groups of equal size; `reducer` is a stablehlo
  // binary op: Add, Multiply, Minimum, Maximum, or (integers and i1 only) And, Or, Xor. The
  // XLA CPU plugin compiles and/or on i1 only, and runs no minimum/maximum on complex values.
  Value all_reduce(const Value& x, BinaryOp reducer,
                   const std::vector<std::vector<int64_t>>& replica_groups);
  // Concatenates the group's operands along `dimension` (which grows by the group size).
  Value all_gather(const Value& x, int64_t dimension,
                   const std::vector<std::vector<int64_t>>& replica_groups);
  // Reduces across the group, then replica k keeps block k of `dimension` (size / group size).
  Value reduce_scatter(const Value& x, int64_t dimension, BinaryOp reducer,
                       const std::vector<std::vector<int64_t>>& replica_groups);
  // Splits `split_dimension` into `split_count` (= group size) blocks, sends block k to the
  // group's k-th replica, and concatenates what arrives along `concat_dimension`.
  Value all_to_all(const Value& x, int64_t split_dimension, int64_t concat_dimension,
                   int64_t split_count, const std::vector<std::vector<int64_t>>& replica_groups);
  // Sends x from each pair's source replica to its target; a replica that is no target gets
  // zeros.
  Value collective_permute(const Value& x,
                           const std::vector<std::pair<int64_t, int64_t>>& source_target_pairs);

  // Calls a function defined outside this builder (a jax kernel's StableHLO): `functions` is
  // the text of the func.func definitions it needs, `name` the one called. The definitions
  // travel with the module as helpers, each name defined once however often it is called.
  std::vector<Value> call(const std::string& name, const std::string& functions,
                          const std::vector<Value>& operands, const std::vector<Shape>& shapes,
                          const std::vector<ElementType>& types);
  // The helper function texts by name (see call()); module() includes them.
  const std::map<std::string, std::string>& helpers() const { return helpers_; }

  // Runtime checks: scalar i1 values the computation asserts to be true (every index in
  // range). XLA has no assert, so the dispatcher returns their conjunction as an extra result
  // and raises at the next sync point when it is false. Values inside a region cannot leave
  // it, so a check made there is dropped. The kind is the exception CPU raises for the same
  // bad value (LinAlgError, a RuntimeError, for what LAPACK refuses: a NaN matrix).
  enum class CheckKind { RaisesIndexError, RaisesRuntimeError, RaisesLinAlgError };
  struct RuntimeCheck {
    CheckKind kind;
    std::string failure;  // what was wrong when it does not hold, for the error message
  };
  void check_at_runtime(const Value& holds, CheckKind kind, const std::string& failure);
  // The conjunction of every check (a scalar i1), or nullopt when there is none.
  std::optional<Value> runtime_checks();
  // What a failure of that conjunction means: the checks' failures (distinct, joined by "; or
  // "), raising IndexError or LinAlgError only if every check does (else RuntimeError).
  RuntimeCheck runtime_check_failure() const;

  // The whole module, with `results` returned from @main in order.
  std::string module(const std::vector<Value>& results);
  // Just the function (for modules that call several): `@name(params) -> results`. Emits the
  // packing of complex32 results (see boundary_tensor_type), so it is called once, last.
  std::string function(const std::string& name, bool is_public, const std::vector<Value>& results);

 private:
  std::string fresh_name();
  // complex32 (complex32.cc): a ui32 value's two f16 halves as a C32 value, and back; a C64
  // value with its parts rounded to f16, as C32.
  Value unpack_complex32(const Value& bits);
  Value pack_complex32(const Value& z);
  Value round_to_complex32(const Value& z);
  std::vector<Value> emit(const std::string& op, const std::vector<Value>& operands,
                          const std::string& attributes, const std::vector<Shape>& shapes,
                          const std::vector<ElementType>& types, const std::string& regions = "");
  // emit() for an op of any dialect: `op` is its full name ("func.call").
  std::vector<Value> emit_qualified(const std::string& op, const std::vector<Value>& operands,
                                    const std::string& attributes, const std::vector<Shape>& shapes,
                                    const std::vector<ElementType>& types,
                                    const std::string& regions = "");
  Value emit1(const std::string& op, const std::vector<Value>& operands,
              const std::string& attributes, const Shape& shape, ElementType type,
              const std::string& regions = "");
  // Emits a region whose block takes scalar arguments of `types`, filled in by `body`.
  std::string region(const std::vector<ElementType>& types, const Body& body);
  // A region whose block arguments are shaped like `templates`.
  std::string region_like(const std::vector<Value>& templates, const Body& body);
  // A region reducing two scalars of `type` with the binary op `reducer` (checked for `op`).
  std::string reducer_region(const std::string& op, BinaryOp reducer, ElementType type);

  int next_id_ = 0;
  std::vector<Value> parameters_;
  std::vector<Value> runtime_checks_;
  std::vector<RuntimeCheck> runtime_check_failures_;
  std::string body_;
  std::string* out_ = &body_;
  std::map<std::string, std::string> helpers_;
};

// A module holding the given function texts (one of them public @main), then the helpers
// they call (see Builder::call), named module_symbol(name) (symbol.h).
std::string wrap_module(const std::string& functions,
                        const std::map<std::string, std::string>& helpers = {},
                        std::string_view name = "torch_tpu");

// Throws BuildError with `message` unless `condition` holds.
inline void require(bool condition, const std::string& message) {
  if (!condition) throw BuildError("stablehlo builder: " + message);
}

}  // namespace torch_tpu::hlo
