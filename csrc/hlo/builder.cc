#include "csrc/hlo/builder.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "csrc/hlo/symbol.h"

namespace torch_tpu::hlo {
namespace {

std::string i64_array(const std::vector<int64_t>& values) {
  if (values.empty()) return "array<i64>";
  return "array<i64: " + join(values) + ">";
}

std::string list(const std::vector<int64_t>& values) { return "[" + join(values) + "]"; }

std::string padding_attr(const std::vector<std::pair<int64_t, int64_t>>& padding) {
  std::string text = "dense<[";
  for (size_t i = 0; i < padding.size(); ++i) {
    text += (i ? ", [" : "[") + std::to_string(padding[i].first) + ", " +
            std::to_string(padding[i].second) + "]";
  }
  return text + "]> : tensor<" + std::to_string(padding.size()) + "x2xi64>";
}

// Non-finite values must be spelled as bit patterns of the exact width.
std::string float_literal(double value, ElementType type) {
  if (std::isfinite(value)) {
    char text[64];
    std::snprintf(text, sizeof(text), "%.17e", value);
    return text;
  }
  const bool negative = std::signbit(value);
  const bool nan = std::isnan(value);
  switch (type) {
    case ElementType::F64:
      return nan ? "0x7FF8000000000000" : (negative ? "0xFFF0000000000000" : "0x7FF0000000000000");
    case ElementType::F32:
      return nan ? "0x7FC00000" : (negative ? "0xFF800000" : "0x7F800000");
    case ElementType::F16:
      return nan ? "0x7E00" : (negative ? "0xFC00" : "0x7C00");
    case ElementType::BF16:
      return nan ? "0x7FC0" : (negative ? "0xFF80" : "0x7F80");
    // Eight-bit floats as torch converts to them: e4m3fn saturates infinities to +-448, the
    // fnuz kinds have one NaN (0x80) and no infinity.
    case ElementType::F8E4M3FN:
      return nan ? "0x7F" : (negative ? "0xFE" : "0x7E");
    case ElementType::F8E5M2:
      return nan ? "0x7E" : (negative ? "0xFC" : "0x7C");
    case ElementType::F8E4M3FNUZ:
    case ElementType::F8E5M2FNUZ:
      return "0x80";
    default:
      throw BuildError("stablehlo builder: non-finite constant for a non-float type");
  }
}

Shape window_output_shape(const Shape& input, const std::vector<int64_t>& window,
                          const std::vector<int64_t>& strides,
                          const std::vector<int64_t>& base_dilations,
                          const std::vector<int64_t>& window_dilations,
                          const std::vector<std::pair<int64_t, int64_t>>& padding) {
  Shape out(input.size());
  for (size_t d = 0; d < input.size(); ++d) {
    int64_t dilated_input = input[d] == 0 ? 0 : (input[d] - 1) * base_dilations[d] + 1;
    int64_t padded = dilated_input + padding[d].first + padding[d].second;
    int64_t dilated_window = (window[d] - 1) * window_dilations[d] + 1;
    out[d] = padded < dilated_window ? 0 : (padded - dilated_window) / strides[d] + 1;
  }
  return out;
}

bool contains(const std::vector<int64_t>& values, int64_t value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

// A dense i64 matrix attribute, e.g. dense<[[0, 1]]> : tensor<1x2xi64>.
std::string i64_matrix(const std::vector<std::vector<int64_t>>& rows) {
  std::string text = "dense<[";
  for (size_t i = 0; i < rows.size(); ++i) text += (i ? ", " : "") + list(rows[i]);
  const size_t columns = rows.empty() ? 0 : rows[0].size();
  return text + "]> : tensor<" + std::to_string(rows.size()) + "x" + std::to_string(columns) +
         "xi64>";
}

// Checks that `groups` are non-empty, equally sized and disjoint; returns the group size.
int64_t group_size(const std::string& op, const std::vector<std::vector<int64_t>>& groups) {
  require(!groups.empty() && !groups[0].empty(), op + ": replica_groups names no replica");
  std::vector<int64_t> seen;
  for (const auto& group : groups) {
    require(group.size() == groups[0].size(), op + ": replica groups differ in size");
    for (int64_t id : group) {
      require(id >= 0, op + ": negative replica id " + std::to_string(id));
      require(!contains(seen, id), op + ": replica " + std::to_string(id) + " appears twice");
      seen.push_back(id);
    }
  }
  return static_cast<int64_t>(groups[0].size());
}

std::string replica_groups_attr(const std::vector<std::vector<int64_t>>& groups) {
  return "replica_groups = " + i64_matrix(groups);
}

std::string i64_attr(const char* name, int64_t value) {
  return std::string(name) + " = " + std::to_string(value) + " : i64";
}

std::atomic<DotPrecision> current_dot_precision{DotPrecision::Highest};

// The precision_config attribute of a product of `operand` values: only wide floating-point
// operands have a reduced-precision path to choose against.
std::string precision_attribute(const Value& operand) {
  ElementType type = is_complex(operand.type) ? component_type(operand.type) : operand.type;
  DotPrecision precision = current_dot_precision.load(std::memory_order_relaxed);
  if ((type != ElementType::F32 && type != ElementType::F64) ||
      precision == DotPrecision::Default) {
    return "";
  }
  const std::string one = precision == DotPrecision::Highest ? "#stablehlo<precision HIGHEST>"
                                                             : "#stablehlo<precision HIGH>";
  return ", precision_config = [" + one + ", " + one + "]";
}

}  // namespace

void set_dot_precision(DotPrecision precision) {
  current_dot_precision.store(precision, std::memory_order_relaxed);
}

DotPrecision dot_precision() { return current_dot_precision.load(std::memory_order_relaxed); }

std::string Builder::fresh_name() { return "%v" + std::to_string(next_id_++); }

Value Builder::parameter(const Shape& shape, ElementType type) {
  Value value{"%arg" + std::to_string(parameters_.size()), shape, type};
  parameters_.push_back(value);
  if (type == ElementType::C32) return unpack_complex32(retyped(value, ElementType::U32));
  return value;
}

std::vector<Value> Builder::emit(const std::string& op, const std::vector<Value>& operands,
                                 const std::string& attributes, const std::vector<Shape>& shapes,
                                 const std::vector<ElementType>& types,
                                 const std::string& regions) {
  return emit_qualified("stablehlo." + op, operands, attributes, shapes, types, regions);
}

std::vector<Value> Builder::emit_qualified(const std::string& op,
                                           const std::vector<Value>& operands,
                                           const std::string& attributes,
                                           const std::vector<Shape>& shapes,
                                           const std::vector<ElementType>& types,
                                           const std::string& regions) {
  std::string name = fresh_name();
  std::ostringstream line;
  line << "    " << name;
  if (shapes.size() > 1) line << ":" << shapes.size();
  line << " = \"" << op << "\"(";
  for (size_t i = 0; i < operands.size(); ++i) line << (i ? ", " : "") << operands[i].name;
  line << ")";
  if (!regions.empty()) line << " (" << regions << ")";
  if (!attributes.empty()) line << " {" << attributes << "}";
  line << " : (";
  for (size_t i = 0; i < operands.size(); ++i) line << (i ? ", " : "") << operands[i].tensor_type();
  line << ") -> ";
  if (shapes.size() != 1) line << "(";
  for (size_t i = 0; i < shapes.size(); ++i)
    line << (i ? ", " : "") << tensor_type(shapes[i], types[i]);
  if (shapes.size() != 1) line << ")";
  line << "\n";
  *out_ += line.str();

  std::vector<Value> results;
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::string result_name = shapes.size() == 1 ? name : name + "#" + std::to_string(i);
    results.push_back(Value{result_name, shapes[i], types[i]});
  }
  return results;
}

Value Builder::emit1(const std::string& op, const std::vector<Value>& operands,
                     const std::string& attributes, const Shape& shape, ElementType type,
                     const std::string& regions) {
  return emit(op, operands, attributes, {shape}, {type}, regions)[0];
}

std::string Builder::region(const std::vector<ElementType>& types, const Body& body) {
  std::vector<Value> templates;
  for (ElementType type : types) templates.push_back(Value{"", {}, type});
  return region_like(templates, body);
}

std::string Builder::region_like(const std::vector<Value>& templates, const Body& body) {
  std::vector<Value> arguments;
  std::string header = "{\n  ^bb0(";
  for (size_t i = 0; i < templates.size(); ++i) {
    Value argument{fresh_name(), templates[i].shape, templates[i].type};
    header += (i ? ", " : "") + argument.name + ": " + argument.tensor_type();
    arguments.push_back(argument);
  }
  header += "):\n";
  std::string text;
  std::string* saved = out_;
  out_ = &text;
  std::vector<Value> results = body(*this, arguments);
  out_ = saved;
  std::string names, result_types;
  for (size_t i = 0; i < results.size(); ++i) {
    names += (i ? ", " : "") + results[i].name;
    result_types += (i ? ", " : "") + results[i].tensor_type();
  }
  return header + text + "    \"stablehlo.return\"(" + names + ") : (" + result_types +
         ") -> ()\n  }";
}

Value Builder::constant(double value, ElementType type, const Shape& shape) {
  std::string literal;
  if (type == ElementType::Pred) {
    literal = value != 0 ? "true" : "false";
  } else if (is_float(type)) {
    literal = float_literal(value, type);
  } else if (type == ElementType::C32) {
    return convert(constant(value, ElementType::C64, shape), type);
  } else if (is_complex(type)) {
    ElementType part = component_type(type);
    literal = "(" + float_literal(value, part) + ", " + float_literal(0.0, part) + ")";
  } else {
    return constant_int(static_cast<int64_t>(value), type, shape);
  }
  return emit1("constant", {}, "value = dense<" + literal + "> : " + tensor_type(shape, type),
               shape, type);
}

Value Builder::constant_int(int64_t value, ElementType type, const Shape& shape) {
  if (is_float(type) || is_complex(type)) return constant(static_cast<double>(value), type, shape);
  std::string literal =
      type == ElementType::Pred ? (value ? "true" : "false") : std::to_string(value);
  return emit1("constant", {}, "value = dense<" + literal + "> : " + tensor_type(shape, type),
               shape, type);
}

Value Builder::constant_values(const std::vector<double>& values, ElementType type) {
  require(!is_complex(type) && type != ElementType::Pred, "constant_values: real or integer types");
  std::string literal = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) literal += ", ";
    literal += is_float(type) ? float_literal(values[i], type)
                              : std::to_string(static_cast<int64_t>(values[i]));
  }
  literal += "]";
  Shape shape{static_cast<int64_t>(values.size())};
  return emit1("constant", {}, "value = dense<" + literal + "> : " + tensor_type(shape, type),
               shape, type);
}

Value Builder::iota(const Shape& shape, ElementType type, int64_t dimension) {
  require(dimension >= 0 && dimension < static_cast<int64_t>(shape.size()),
          "iota dimension out of range");
  return emit1("iota", {}, "iota_dimension = " + std::to_string(dimension) + " : i64", shape, type);
}

Value Builder::unary(UnaryOp op, const Value& x) {
  ElementType type = x.type;
  if (op == UnaryOp::Abs && type == ElementType::C32) {
    return convert(unary(op, retyped(x, ElementType::C64)), ElementType::F16);
  }
  if (op == UnaryOp::Abs && is_complex(type)) type = component_type(type);  // |z| is real
  // stablehlo's abs and sign take no unsigned operands: |x| is x, and sign(x) is x != 0.
  if (op == UnaryOp::Abs && is_unsigned_int(type)) return x;
  if (op == UnaryOp::Sign && is_unsigned_int(type)) {
    return convert(ne(x, constant(0, type, x.shape)), type);
  }
  return emit1(std::string(stablehlo_name(op)), {x}, "", x.shape, type);
}

Value Builder::binary(BinaryOp op, const Value& a, const Value& b) {
  const std::string name(stablehlo_name(op));
  require(a.shape == b.shape,
          name + ": operand shapes differ (" + a.tensor_type() + " vs " + b.tensor_type() + ")");
  require(a.type == b.type,
          name + ": operand types differ (" + a.tensor_type() + " vs " + b.tensor_type() + ")");
  return emit1(name, {a, b}, "", a.shape, a.type);
}

std::pair<Value, Value> Builder::exact_product(const Value& x, const Value& y) {
  require(x.type == ElementType::F32 || x.type == ElementType::F64,
          "exact_product: float32 or float64");
  const bool single = x.type == ElementType::F32;
  // The significand's high half: 12 of float32's 24 bits, 26 of float64's 53.
  const ElementType bits = single ? ElementType::S32 : ElementType::S64;
  const int64_t high_mask = single ? int64_t{-4096} : int64_t{-134217728};
  auto halves = [&](const Value& v) {
    Value high = bitcast_convert(
        and_(bitcast_convert(v, bits), constant_int(high_mask, bits, v.shape)), v.type);
    return std::pair{high, subtract(v, high)};
  };
  auto [x_high, x_low] = halves(x);
  auto [y_high, y_low] = halves(y);
  Value product = multiply(x, y);
  Value error = add(add(add(subtract(multiply(x_high, y_high), product), multiply(x_high, y_low)),
                        multiply(x_low, y_high)),
                    multiply(x_low, y_low));
  return {product, error};
}

Value Builder::compare(Comparison direction, const Value& a, const Value& b) {
  require(a.shape == b.shape && a.type == b.type,
          "compare: operands differ (" + a.tensor_type() + " vs " + b.tensor_type() + ")");
  return emit1("compare", {a, b},
               "comparison_direction = #stablehlo<comparison_direction " +
                   std::string(stablehlo_name(direction)) + ">",
               a.shape, ElementType::Pred);
}

Value Builder::select(const Value& predicate, const Value& on_true, const Value& on_false) {
  require(predicate.type == ElementType::Pred, "select: predicate must be i1");
  require(
      on_true.shape == on_false.shape && on_true.type == on_false.type,
      "select: branches differ (" + on_true.tensor_type() + " vs " + on_false.tensor_type() + ")");
  require(predicate.shape == on_true.shape || predicate.shape.empty(),
          "select: predicate shape differs");
  return emit1("select", {predicate, on_true, on_false}, "", on_true.shape, on_true.type);
}

Value Builder::clamp(const Value& min, const Value& x, const Value& max) {
  require(min.type == x.type && max.type == x.type, "clamp: types differ");
  return emit1("clamp", {min, x, max}, "", x.shape, x.type);
}

Value Builder::convert(const Value& x, ElementType type) {
  if (x.type == type) return x;
  if (type == ElementType::C32) return round_to_complex32(convert(x, ElementType::C64));
  if (x.type == ElementType::C32) return convert(retyped(x, ElementType::C64), type);
  // StableHLO has no complex-to-real convert; torch keeps the real part (as CPU does).
  if (is_complex(x.type) && !is_complex(type)) return convert(real(x), type);
  // float8_e4m3fn has no infinity: torch saturates out-of-range values (infinities too) to
  // +-448, where XLA's convert gives NaN.
  if (type == ElementType::F8E4M3FN && !is_float8(x.type)) {
    Value wide = is_float(x.type) ? x : convert(x, ElementType::F32);
    Value limit = constant(448.0, wide.type, wide.shape);
    wide = clamp(negate(limit), wide, limit);
    return emit1("convert", {wide}, "", x.shape, type);
  }
  return emit1("convert", {x}, "", x.shape, type);
}

Value Builder::real(const Value& x) {
  if (!is_complex(x.type)) return x;
  if (x.type == ElementType::C32)
    return convert(real(retyped(x, ElementType::C64)), ElementType::F16);
  return emit1("real", {x}, "", x.shape, component_type(x.type));
}

Value Builder::imag(const Value& x) {
  require(is_complex(x.type), "imag: operand is not complex");
  if (x.type == ElementType::C32)
    return convert(imag(retyped(x, ElementType::C64)), ElementType::F16);
  return emit1("imag", {x}, "", x.shape, component_type(x.type));
}

Value Builder::complex(const Value& re, const Value& im) {
  require(re.shape == im.shape && re.type == im.type, "complex: parts differ in shape or type");
  if (re.type == ElementType::F16) {  // complex32: its parts are exact in f32
    Value wide = complex(convert(re, ElementType::F32), convert(im, ElementType::F32));
    return retyped(wide, ElementType::C32);
  }
  require(re.type == ElementType::F32 || re.type == ElementType::F64,
          "complex: parts must be f32 or f64");
  return emit1("complex", {re, im}, "", re.shape, complex_type_of(re.type));
}

Value Builder::conj(const Value& x) {
  if (!is_complex(x.type)) return x;
  return complex(real(x), negate(imag(x)));
}

Value Builder::fft(const Value& x, FftType fft_type, const std::vector<int64_t>& lengths) {
  const size_t n = lengths.size();
  require(n >= 1 && n <= 3 && n <= x.shape.size(), "fft: 1 to 3 trailing dimensions");
  if (x.type == ElementType::C32 || x.type == ElementType::F16) {  // computed in complex64
    const ElementType wide_type = x.type == ElementType::C32 ? ElementType::C64 : ElementType::F32;
    const Value wide = fft(convert(x, wide_type), fft_type, lengths);
    return convert(wide, is_complex(wide.type) ? ElementType::C32 : ElementType::F16);
  }
  Shape shape = x.shape;
  ElementType type = x.type;
  if (fft_type == FftType::RFFT) {
    require(is_float(x.type), "fft: RFFT takes a real operand");
    shape.back() = lengths.back() / 2 + 1;
    type = complex_type_of(x.type);
  } else if (fft_type == FftType::IRFFT) {
    require(is_complex(x.type), "fft: IRFFT takes a complex operand");
    shape.back() = lengths.back();
    type = component_type(x.type);
  } else {
    require(is_complex(x.type), "fft: FFT and IFFT take a complex operand");
  }
  std::string attributes = "fft_type = #stablehlo<fft_type " +
                           std::string(stablehlo_name(fft_type)) +
                           ">, fft_length = array<i64: " + join(lengths) + ">";
  return emit1("fft", {x}, attributes, shape, type);
}

Value Builder::bitcast_convert(const Value& x, ElementType type) {
  const int from = byte_size(x.type), to = byte_size(type);
  Shape shape = x.shape;
  if (from > to) {
    shape.push_back(from / to);  // each element becomes a trailing row of narrower ones
  } else if (from < to) {
    require(!shape.empty() && shape.back() * from == to,
            "bitcast_convert: the last dimension must hold exactly one wider element");
    shape.pop_back();
  }
  return emit1("bitcast_convert", {x}, "", shape, type);
}

Value Builder::reshape(const Value& x, const Shape& shape) {
  require(num_elements(x.shape) == num_elements(shape), "reshape: element counts differ (" +
                                                            x.tensor_type() + " to " +
                                                            tensor_type(shape, x.type) + ")");
  if (x.shape == shape) return x;
  return emit1("reshape", {x}, "", shape, x.type);
}

Value Builder::broadcast_in_dim(const Value& x, const Shape& shape,
                                const std::vector<int64_t>& dims) {
  require(dims.size() == x.shape.size(), "broadcast_in_dim: one target dim per operand dim");
  for (size_t i = 0; i < dims.size(); ++i) {
    require(dims[i] >= 0 && dims[i] < static_cast<int64_t>(shape.size()) &&
                (x.shape[i] == 1 || x.shape[i] == shape[dims[i]]),
            "broadcast_in_dim: " + x.tensor_type() + " does not broadcast to " +
                tensor_type(shape, x.type));
  }
  if (x.shape == shape) return x;
  return emit1("broadcast_in_dim", {x}, "broadcast_dimensions = " + i64_array(dims), shape, x.type);
}

Value Builder::transpose(const Value& x, const std::vector<int64_t>& permutation) {
  require(permutation.size() == x.shape.size(), "transpose: permutation rank differs");
  Shape shape;
  bool identity = true;
  for (size_t i = 0; i < permutation.size(); ++i) {
    shape.push_back(x.shape.at(permutation[i]));
    identity = identity && permutation[i] == static_cast<int64_t>(i);
  }
  if (identity) return x;
  return emit1("transpose", {x}, "permutation = " + i64_array(permutation), shape, x.type);
}

Value Builder::slice(const Value& x, const std::vector<int64_t>& start,
                     const std::vector<int64_t>& limit, const std::vector<int64_t>& strides) {
  require(start.size() == x.shape.size() && limit.size() == x.shape.size() &&
              strides.size() == x.shape.size(),
          "slice: one start/limit/stride per dimension");
  Shape shape;
  for (size_t d = 0; d < start.size(); ++d) {
    require(0 <= start[d] && start[d] <= limit[d] && limit[d] <= x.shape[d] && strides[d] > 0,
            "slice: bounds out of range");
    shape.push_back((limit[d] - start[d] + strides[d] - 1) / strides[d]);
  }
  if (shape == x.shape) return x;
  return emit1("slice", {x},
               "start_indices = " + i64_array(start) + ", limit_indices = " + i64_array(limit) +
                   ", strides = " + i64_array(strides),
               shape, x.type);
}

Value Builder::dynamic_slice(const Value& x, const std::vector<Value>& starts,
                             const std::vector<int64_t>& sizes) {
  require(starts.size() == x.shape.size() && sizes.size() == x.shape.size(),
          "dynamic_slice: one start and size per dimension");
  std::vector<Value> operands{x};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return emit1("dynamic_slice", operands, "slice_sizes = " + i64_array(sizes), sizes, x.type);
}

Value Builder::dynamic_update_slice(const Value& x, const Value& update,
                                    const std::vector<Value>& starts) {
  require(starts.size() == x.shape.size() && update.rank() == x.rank() && update.type == x.type,
          "dynamic_update_slice: operand mismatch");
  std::vector<Value> operands{x, update};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return emit1("dynamic_update_slice", operands, "", x.shape, x.type);
}

Value Builder::concatenate(const std::vector<Value>& values, int64_t dimension) {
  require(!values.empty(), "concatenate: no operands");
  Shape shape = values[0].shape;
  require(dimension >= 0 && dimension < static_cast<int64_t>(shape.size()),
          "concatenate: dimension out of range");
  shape[dimension] = 0;
  for (const Value& value : values) {
    require(value.rank() == values[0].rank() && value.type == values[0].type,
            "concatenate: operands differ in rank or type");
    shape[dimension] += value.shape[dimension];
  }
  if (values.size() == 1) return values[0];
  return emit1("concatenate", values, "dimension = " + std::to_string(dimension) + " : i64", shape,
               values[0].type);
}

Value Builder::pad(const Value& x, const Value& padding_value, const std::vector<int64_t>& low,
                   const std::vector<int64_t>& high, const std::vector<int64_t>& interior) {
  require(low.size() == x.shape.size() && high.size() == x.shape.size() &&
              interior.size() == x.shape.size() && padding_value.shape.empty(),
          "pad: one low/high/interior per dimension and a scalar padding value");
  Shape shape;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    int64_t dilated = x.shape[d] == 0 ? 0 : (x.shape[d] - 1) * (interior[d] + 1) + 1;
    shape.push_back(dilated + low[d] + high[d]);
  }
  return emit1("pad", {x, padding_value},
               "edge_padding_low = " + i64_array(low) + ", edge_padding_high = " + i64_array(high) +
                   ", interior_padding = " + i64_array(interior),
               shape, x.type);
}

Value Builder::reduce_precision(const Value& x, int exponent_bits, int mantissa_bits) {
  require(is_float(x.type), "reduce_precision: not a float");
  return emit1("reduce_precision", {x},
               "exponent_bits = " + std::to_string(exponent_bits) +
                   " : i32, mantissa_bits = " + std::to_string(mantissa_bits) + " : i32",
               x.shape, x.type);
}

Value Builder::reverse(const Value& x, const std::vector<int64_t>& dims) {
  if (dims.empty()) return x;
  return emit1("reverse", {x}, "dimensions = " + i64_array(dims), x.shape, x.type);
}

Value Builder::dot_general(const Value& lhs, const Value& rhs,
                           const std::vector<int64_t>& lhs_batch,
                           const std::vector<int64_t>& rhs_batch,
                           const std::vector<int64_t>& lhs_contracting,
                           const std::vector<int64_t>& rhs_contracting, ElementType result_type) {
  require(lhs_batch.size() == rhs_batch.size() && lhs_contracting.size() == rhs_contracting.size(),
          "dot_general: dimension lists differ in length");
  Shape shape;
  for (size_t i = 0; i < lhs_batch.size(); ++i) {
    require(lhs.shape.at(lhs_batch[i]) == rhs.shape.at(rhs_batch[i]),
            "dot_general: batch sizes differ");
    shape.push_back(lhs.shape[lhs_batch[i]]);
  }
  for (size_t i = 0; i < lhs_contracting.size(); ++i) {
    require(lhs.shape.at(lhs_contracting[i]) == rhs.shape.at(rhs_contracting[i]),
            "dot_general: contracting sizes differ (" + lhs.tensor_type() + " and " +
                rhs.tensor_type() + ")");
  }
  for (int64_t d = 0; d < lhs.rank(); ++d) {
    if (!contains(lhs_batch, d) && !contains(lhs_contracting, d)) shape.push_back(lhs.shape[d]);
  }
  for (int64_t d = 0; d < rhs.rank(); ++d) {
    if (!contains(rhs_batch, d) && !contains(rhs_contracting, d)) shape.push_back(rhs.shape[d]);
  }
  std::string numbers = "dot_dimension_numbers = #stablehlo.dot<";
  std::vector<std::string> parts;
  if (!lhs_batch.empty()) parts.push_back("lhs_batching_dimensions = " + list(lhs_batch));
  if (!rhs_batch.empty()) parts.push_back("rhs_batching_dimensions = " + list(rhs_batch));
  if (!lhs_contracting.empty()) {
    parts.push_back("lhs_contracting_dimensions = " + list(lhs_contracting));
  }
  if (!rhs_contracting.empty()) {
    parts.push_back("rhs_contracting_dimensions = " + list(rhs_contracting));
  }
  for (size_t i = 0; i < parts.size(); ++i) numbers += (i ? ", " : "") + parts[i];
  numbers += ">" + precision_attribute(lhs);
  return emit1("dot_general", {lhs, rhs}, numbers, shape, result_type);
}

Value Builder::convolution(const Value& input, const Value& kernel, const ConvDims& dims,
                           const ConvParams& params, ElementType result_type) {
  const size_t spatial = dims.input_spatial.size();
  require(dims.kernel_spatial.size() == spatial && dims.output_spatial.size() == spatial &&
              params.strides.size() == spatial && params.padding.size() == spatial &&
              params.lhs_dilation.size() == spatial && params.rhs_dilation.size() == spatial,
          "convolution: parameters must give one value per spatial dimension");
  auto layout = [](size_t rank, int64_t a, char a_letter, int64_t b, char b_letter,
                   const std::vector<int64_t>& spatial_dims) {
    std::vector<std::string> letters(rank);
    letters[a] = a_letter;
    letters[b] = b_letter;
    for (size_t i = 0; i < spatial_dims.size(); ++i) letters[spatial_dims[i]] = std::to_string(i);
    std::string text = "[";
    for (size_t i = 0; i < rank; ++i) text += (i ? ", " : "") + letters[i];
    return text + "]";
  };
  std::string numbers = layout(input.shape.size(), dims.input_batch, 'b', dims.input_feature, 'f',
                               dims.input_spatial) +
                        "x" +
                        layout(kernel.shape.size(), dims.kernel_output_feature, 'o',
                               dims.kernel_input_feature, 'i', dims.kernel_spatial) +
                        "->" +
                        layout(input.shape.size(), dims.output_batch, 'b', dims.output_feature, 'f',
                               dims.output_spatial);
  Shape shape(input.shape.size());
  shape[dims.output_batch] = input.shape[dims.input_batch] / params.batch_group_count;
  shape[dims.output_feature] = kernel.shape[dims.kernel_output_feature];
  for (size_t i = 0; i < spatial; ++i) {
    int64_t in = input.shape[dims.input_spatial[i]];
    int64_t k = kernel.shape[dims.kernel_spatial[i]];
    int64_t dilated_in = in == 0 ? 0 : (in - 1) * params.lhs_dilation[i] + 1;
    int64_t padded = dilated_in + params.padding[i].first + params.padding[i].second;
    int64_t dilated_k = (k - 1) * params.rhs_dilation[i] + 1;
    require(padded >= dilated_k, "convolution: kernel larger than padded input");
    shape[dims.output_spatial[i]] = (padded - dilated_k) / params.strides[i] + 1;
  }
  std::string attributes =
      "batch_group_count = " + std::to_string(params.batch_group_count) +
      " : i64, dimension_numbers = #stablehlo.conv<" + numbers +
      ">, feature_group_count = " + std::to_string(params.feature_group_count) +
      " : i64, lhs_dilation = " + i64_array(params.lhs_dilation) +
      ", padding = " + padding_attr(params.padding) +
      ", rhs_dilation = " + i64_array(params.rhs_dilation) +
      ", window_strides = " + i64_array(params.strides) + precision_attribute(input);
  return emit1("convolution", {input, kernel}, attributes, shape, result_type);
}

std::vector<Value> Builder::reduce(const std::vector<Value>& inputs,
                                   const std::vector<Value>& inits,
                                   const std::vector<int64_t>& dims, const Body& body) {
  require(!inputs.empty() && inputs.size() == inits.size(), "reduce: one init per input");
  Shape shape;
  for (int64_t d = 0; d < inputs[0].rank(); ++d) {
    if (!contains(dims, d)) shape.push_back(inputs[0].shape[d]);
  }
  for (int64_t d : dims) require(d >= 0 && d < inputs[0].rank(), "reduce: dimension out of range");
  std::vector<ElementType> types;
  for (const Value& init : inits) types.push_back(init.type);
  std::vector<ElementType> block_types = types;
  block_types.insert(block_types.end(), types.begin(), types.end());
  std::string body_text = region(block_types, body);
  std::vector<Value> operands = inputs;
  operands.insert(operands.end(), inits.begin(), inits.end());
  std::vector<Shape> shapes(inputs.size(), shape);
  return emit("reduce", operands, "dimensions = " + i64_array(dims), shapes, types, body_text);
}

Value Builder::reduce(const Value& x, const Value& init, const std::vector<int64_t>& dims,
                      BinaryOp op) {
  return reduce({x}, {init}, dims, [op](Builder& b, const std::vector<Value>& args) {
    return std::vector<Value>{b.binary(op, args[0], args[1])};
  })[0];
}

Value Builder::reduce_window(const Value& x, const Value& init, const std::vector<int64_t>& window,
                             const std::vector<int64_t>& strides,
                             const std::vector<int64_t>& base_dilations,
                             const std::vector<int64_t>& window_dilations,
                             const std::vector<std::pair<int64_t, int64_t>>& padding, BinaryOp op) {
  const size_t rank = x.shape.size();
  require(window.size() == rank && strides.size() == rank && base_dilations.size() == rank &&
              window_dilations.size() == rank && padding.size() == rank,
          "reduce_window: one window/stride/dilation/padding per dimension");
  Shape shape =
      window_output_shape(x.shape, window, strides, base_dilations, window_dilations, padding);
  std::string body_text = region({init.type, init.type}, [op](Builder& b, const auto& args) {
    return std::vector<Value>{b.binary(op, args[0], args[1])};
  });
  std::string attributes =
      "base_dilations = " + i64_array(base_dilations) + ", padding = " + padding_attr(padding) +
      ", window_dilations = " + i64_array(window_dilations) +
      ", window_dimensions = " + i64_array(window) + ", window_strides = " + i64_array(strides);
  return emit1("reduce_window", {x, init}, attributes, shape, x.type, body_text);
}

std::vector<Value> Builder::sort(const std::vector<Value>& inputs, int64_t dimension, bool stable,
                                 const Body& comparator) {
  std::vector<ElementType> block_types;
  std::vector<Shape> shapes;
  std::vector<ElementType> types;
  for (const Value& input : inputs) {
    require(input.shape == inputs[0].shape, "sort: inputs differ in shape");
    block_types.push_back(input.type);
    block_types.push_back(input.type);
    shapes.push_back(input.shape);
    types.push_back(input.type);
  }
  std::string body_text = region(block_types, comparator);
  return emit("sort", inputs,
              "dimension = " + std::to_string(dimension) +
                  " : i64, is_stable = " + (stable ? "true" : "false"),
              shapes, types, body_text);
}

std::vector<Value> Builder::while_loop(const std::vector<Value>& state, const Body& condition,
                                       const Body& body) {
  require(!state.empty(), "while: no loop state");
  auto checked_condition = [&](Builder& b, const std::vector<Value>& args) {
    std::vector<Value> result = condition(b, args);
    require(result.size() == 1 && result[0].type == ElementType::Pred && result[0].shape.empty(),
            "while: the condition must return one scalar predicate");
    return result;
  };
  auto checked_body = [&](Builder& b, const std::vector<Value>& args) {
    std::vector<Value> result = body(b, args);
    require(result.size() == state.size(), "while: the body must return the whole state");
    for (size_t i = 0; i < state.size(); ++i) {
      require(result[i].shape == state[i].shape && result[i].type == state[i].type,
              "while: the body changed the state's shape or type");
    }
    return result;
  };
  std::string regions =
      region_like(state, checked_condition) + ", " + region_like(state, checked_body);
  std::vector<Shape> shapes;
  std::vector<ElementType> types;
  for (const Value& value : state) {
    shapes.push_back(value.shape);
    types.push_back(value.type);
  }
  return emit("while", state, "", shapes, types, regions);
}

Value Builder::gather(const Value& operand, const Value& indices, const GatherDims& dims,
                      const std::vector<int64_t>& slice_sizes) {
  require(slice_sizes.size() == operand.shape.size(), "gather: one slice size per operand dim");
  Shape batch_shape;
  for (int64_t d = 0; d < indices.rank(); ++d) {
    if (d != dims.index_vector_dim) batch_shape.push_back(indices.shape[d]);
  }
  std::vector<int64_t> offset_sizes;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (!contains(dims.collapsed_slice_dims, d) && !contains(dims.operand_batching_dims, d)) {
      offset_sizes.push_back(slice_sizes[d]);
    }
  }
  require(offset_sizes.size() == dims.offset_dims.size(), "gather: offset_dims count mismatch");
  const int64_t out_rank = static_cast<int64_t>(batch_shape.size() + offset_sizes.size());
  Shape shape(out_rank);
  size_t next_batch = 0, next_offset = 0;
  for (int64_t d = 0; d < out_rank; ++d) {
    shape[d] =
        contains(dims.offset_dims, d) ? offset_sizes[next_offset++] : batch_shape.at(next_batch++);
  }
  std::string numbers =
      "dimension_numbers = #stablehlo.gather<offset_dims = " + list(dims.offset_dims) +
      ", collapsed_slice_dims = " + list(dims.collapsed_slice_dims);
  if (!dims.operand_batching_dims.empty()) {
    numbers += ", operand_batching_dims = " + list(dims.operand_batching_dims) +
               ", start_indices_batching_dims = " + list(dims.start_indices_batching_dims);
  }
  numbers += ", start_index_map = " + list(dims.start_index_map) +
             ", index_vector_dim = " + std::to_string(dims.index_vector_dim) + ">";
  return emit1("gather", {operand, indices},
               numbers + ", indices_are_sorted = false, slice_sizes = " + i64_array(slice_sizes),
               shape, operand.type);
}

Value Builder::scatter(const Value& operand, const Value& indices, const Value& updates,
                       const ScatterDims& dims, const Body& update) {
  require(operand.type == updates.type, "scatter: operand and updates differ in type");
  std::string body_text = region({operand.type, operand.type}, update);
  std::string numbers = "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = " +
                        list(dims.update_window_dims) +
                        ", inserted_window_dims = " + list(dims.inserted_window_dims);
  if (!dims.input_batching_dims.empty()) {
    numbers += ", input_batching_dims = " + list(dims.input_batching_dims) +
               ", scatter_indices_batching_dims = " + list(dims.scatter_indices_batching_dims);
  }
  numbers += ", scatter_dims_to_operand_dims = " + list(dims.scatter_dims_to_operand_dims) +
             ", index_vector_dim = " + std::to_string(dims.index_vector_dim) + ">";
  return emit1("scatter", {operand, indices, updates},
               "indices_are_sorted = false, " + numbers + ", unique_indices = false", operand.shape,
               operand.type, body_text);
}

std::pair<Value, Value> Builder::rng_bit_generator(const Value& state, const Shape& shape,
                                                   ElementType type) {
  auto results =
      emit("rng_bit_generator", {state}, "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>",
           {state.shape, shape}, {state.type, type});
  return {results[0], results[1]};
}

std::string Builder::reducer_region(const std::string& op, BinaryOp reducer, ElementType type) {
  const bool arithmetic = reducer == BinaryOp::Add || reducer == BinaryOp::Multiply ||
                          reducer == BinaryOp::Minimum || reducer == BinaryOp::Maximum;
  const bool bitwise =
      reducer == BinaryOp::And || reducer == BinaryOp::Or || reducer == BinaryOp::Xor;
  const std::string name(stablehlo_name(reducer));
  require(arithmetic || bitwise,
          op + ": unknown reducer '" + name + "' (add, multiply, minimum, maximum, and, or, xor)");
  require(!bitwise || type == ElementType::Pred || is_signed_int(type) || is_unsigned_int(type),
          op + ": reducer '" + name + "' needs an integer or i1 operand, not " + mlir_name(type));
  return region({type, type}, [reducer](Builder& b, const std::vector<Value>& args) {
    return std::vector<Value>{b.binary(reducer, args[0], args[1])};
  });
}

Value Builder::all_reduce(const Value& x, BinaryOp reducer,
                          const std::vector<std::vector<int64_t>>& replica_groups) {
  group_size("all_reduce", replica_groups);
  std::string body_text = reducer_region("all_reduce", reducer, x.type);
  return emit1("all_reduce", {x}, replica_groups_attr(replica_groups), x.shape, x.type, body_text);
}

Value Builder::all_gather(const Value& x, int64_t dimension,
                          const std::vector<std::vector<int64_t>>& replica_groups) {
  const int64_t size = group_size("all_gather", replica_groups);
  require(dimension >= 0 && dimension < x.rank(), "all_gather: dimension " +
                                                      std::to_string(dimension) +
                                                      " out of range for " + x.tensor_type());
  Shape shape = x.shape;
  shape[dimension] *= size;
  return emit1("all_gather", {x},
               i64_attr("all_gather_dim", dimension) + ", " + replica_groups_attr(replica_groups),
               shape, x.type);
}

Value Builder::reduce_scatter(const Value& x, int64_t dimension, BinaryOp reducer,
                              const std::vector<std::vector<int64_t>>& replica_groups) {
  const int64_t size = group_size("reduce_scatter", replica_groups);
  require(dimension >= 0 && dimension < x.rank() && x.shape[dimension] % size == 0,
          "reduce_scatter: dimension " + std::to_string(dimension) + " of " + x.tensor_type() +
              " must exist and divide by the group size " + std::to_string(size));
  Shape shape = x.shape;
  shape[dimension] /= size;
  std::string body_text = reducer_region("reduce_scatter", reducer, x.type);
  return emit1(
      "reduce_scatter", {x},
      replica_groups_attr(replica_groups) + ", " + i64_attr("scatter_dimension", dimension), shape,
      x.type, body_text);
}

Value Builder::all_to_all(const Value& x, int64_t split_dimension, int64_t concat_dimension,
                          int64_t split_count,
                          const std::vector<std::vector<int64_t>>& replica_groups) {
  const int64_t size = group_size("all_to_all", replica_groups);
  require(split_count == size, "all_to_all: split_count " + std::to_string(split_count) +
                                   " differs from the group size " + std::to_string(size));
  require(split_dimension >= 0 && split_dimension < x.rank() && concat_dimension >= 0 &&
              concat_dimension < x.rank(),
          "all_to_all: split or concat dimension out of range for " + x.tensor_type());
  require(x.shape[split_dimension] % split_count == 0,
          "all_to_all: split dimension of " + x.tensor_type() + " does not divide by " +
              std::to_string(split_count));
  Shape shape = x.shape;
  shape[split_dimension] /= split_count;
  shape[concat_dimension] *= split_count;
  return emit1("all_to_all", {x},
               i64_attr("concat_dimension", concat_dimension) + ", " +
                   replica_groups_attr(replica_groups) + ", " +
                   i64_attr("split_count", split_count) + ", " +
                   i64_attr("split_dimension", split_dimension),
               shape, x.type);
}

Value Builder::collective_permute(
    const Value& x, const std::vector<std::pair<int64_t, int64_t>>& source_target_pairs) {
  require(!source_target_pairs.empty(), "collective_permute: no source_target_pairs");
  std::vector<int64_t> sources, targets;
  std::vector<std::vector<int64_t>> rows;
  for (const auto& [source, target] : source_target_pairs) {
    require(source >= 0 && target >= 0, "collective_permute: negative replica id");
    require(!contains(sources, source) && !contains(targets, target),
            "collective_permute: a replica is a source or a target twice");
    sources.push_back(source);
    targets.push_back(target);
    rows.push_back({source, target});
  }
  return emit1("collective_permute", {x}, "source_target_pairs = " + i64_matrix(rows), x.shape,
               x.type);
}

std::string Builder::function(const std::string& name, bool is_public,
                              const std::vector<Value>& values) {
  std::vector<Value> results;
  for (const Value& value : values) {
    results.push_back(value.type == ElementType::C32 ? pack_complex32(value) : value);
  }
  std::ostringstream text;
  text << "  func.func " << (is_public ? "public" : "private") << " @" << name << "(";
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Value& parameter = parameters_[i];
    text << (i ? ", " : "") << parameter.name << ": "
         << boundary_tensor_type(parameter.shape, parameter.type);
  }
  text << ") -> (";
  for (size_t i = 0; i < results.size(); ++i) text << (i ? ", " : "") << results[i].tensor_type();
  text << ") {\n" << body_ << "    return ";
  for (size_t i = 0; i < results.size(); ++i) text << (i ? ", " : "") << results[i].name;
  if (!results.empty()) text << " : ";
  for (size_t i = 0; i < results.size(); ++i) text << (i ? ", " : "") << results[i].tensor_type();
  text << "\n  }\n";
  return text.str();
}

void Builder::check_at_runtime(const Value& holds, CheckKind kind, const std::string& failure) {
  require(holds.type == ElementType::Pred && holds.rank() == 0,
          "check_at_runtime: needs a scalar i1, got " + holds.tensor_type());
  if (out_ != &body_) return;
  runtime_checks_.push_back(holds);
  runtime_check_failures_.push_back({kind, failure});
}

Builder::RuntimeCheck Builder::runtime_check_failure() const {
  RuntimeCheck all{CheckKind::RaisesIndexError, ""};
  for (size_t i = 0; i < runtime_check_failures_.size(); ++i) {
    const RuntimeCheck& check = runtime_check_failures_[i];
    if (i == 0) all.kind = check.kind;
    if (check.kind != all.kind) all.kind = CheckKind::RaisesRuntimeError;
    if (all.failure.find(check.failure) != std::string::npos) continue;
    all.failure += (all.failure.empty() ? "" : "; or ") + check.failure;
  }
  return all;
}

std::optional<Value> Builder::runtime_checks() {
  if (runtime_checks_.empty()) return std::nullopt;
  Value all = runtime_checks_[0];
  for (size_t i = 1; i < runtime_checks_.size(); ++i) all = and_(all, runtime_checks_[i]);
  return all;
}

std::vector<Value> Builder::call(const std::string& name, const std::string& functions,
                                 const std::vector<Value>& operands,
                                 const std::vector<Shape>& shapes,
                                 const std::vector<ElementType>& types) {
  require(shapes.size() == types.size(), "call: as many result shapes as types");
  require(functions.find("@" + name + "(") != std::string::npos,
          "call: the functions define no @" + name);
  auto [existing, added] = helpers_.emplace(name, functions);
  require(added || existing->second == functions, "call: @" + name + " defined twice, unequally");
  return emit_qualified("func.call", operands, "callee = @" + name, shapes, types);
}

std::string Builder::module(const std::vector<Value>& results) {
  return wrap_module(function("main", true, results), helpers_);
}

std::string wrap_module(const std::string& functions,
                        const std::map<std::string, std::string>& helpers, std::string_view name) {
  std::string text = "module @" + module_symbol(name) + " {\n" + functions;
  for (const auto& [name, helper] : helpers) text += helper;
  return text + "}\n";
}

}  // namespace torch_tpu::hlo
