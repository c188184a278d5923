// The StableHLO builder: module text is accepted by the CPU plugin's compiler and computes
// the expected numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "csrc/hlo/builder.h"
#include "csrc/pjrt/client.h"
#include "csrc/pjrt/compile_options.h"

namespace torch_tpu::hlo {
namespace {

using pjrt::Buffer;
using pjrt::Client;

std::shared_ptr<Client> client() {
  static std::shared_ptr<Client> instance = Client::create(
      pjrt::Plugin::load(std::getenv("TORCH_TPU_TEST_PLUGIN")), {{"cpu_device_count", int64_t{1}}});
  return instance;
}

// Compiles `module`, runs it on f32 inputs of the given shapes, returns output `index` as f32.
std::vector<float> run(const std::string& module, const std::vector<std::vector<float>>& inputs,
                       const std::vector<Shape>& shapes, size_t index = 0) {
  auto executable = client()->compile(module, pjrt::single_device_compile_options());
  PJRT_Device* device = client()->devices()[0].device;
  std::vector<Buffer> buffers;
  std::vector<PJRT_Buffer*> raw;
  for (size_t i = 0; i < inputs.size(); ++i) {
    buffers.push_back(client()->upload(inputs[i].data(), PJRT_Buffer_Type_F32, shapes[i], device));
    raw.push_back(buffers.back().raw());
  }
  auto result = executable->execute(raw, device);
  const Buffer& out = result.outputs.at(index);
  std::vector<float> host(out.on_device_size_in_bytes() / sizeof(float));
  out.copy_to_host(host.data(), host.size() * sizeof(float)).await();
  return host;
}

TEST(Builder, TextHasEntryAndTypes) {
  Builder b;
  Value x = b.parameter({2, 3}, ElementType::F32);
  Value y = b.exponential(x);
  std::string text = b.module({y});
  EXPECT_NE(text.find("func.func public @main(%arg0: tensor<2x3xf32>)"), std::string::npos);
  EXPECT_NE(text.find("stablehlo.exponential"), std::string::npos);
}

TEST(Builder, CallRunsFunctionsDefinedElsewhereOnce) {
  // A jax kernel's functions: an entry that calls a helper of its own.
  const std::string functions =
      "  func.func private @k_main(%a: tensor<3xf32>) -> tensor<3xf32> {\n"
      "    %0 = call @k_square(%a) : (tensor<3xf32>) -> tensor<3xf32>\n"
      "    return %0 : tensor<3xf32>\n"
      "  }\n"
      "  func.func private @k_square(%a: tensor<3xf32>) -> tensor<3xf32> {\n"
      "    %0 = stablehlo.multiply %a, %a : tensor<3xf32>\n"
      "    return %0 : tensor<3xf32>\n"
      "  }\n";
  Builder b;
  Value x = b.parameter({3}, ElementType::F32);
  Value once = b.call("k_main", functions, {x}, {{3}}, {ElementType::F32})[0];
  Value twice = b.call("k_main", functions, {once}, {{3}}, {ElementType::F32})[0];
  std::string text = b.module({twice});
  const std::string definition = "func.func private @k_square(";
  EXPECT_EQ(text.find(definition), text.rfind(definition));  // defined once, called twice
  EXPECT_EQ(run(text, {{1, 2, 3}}, {{3}}), (std::vector<float>{1, 16, 81}));
  EXPECT_THROW(b.call("k_other", functions, {x}, {{3}}, {ElementType::F32}), BuildError);
  EXPECT_THROW(b.call("k_main", functions + " ", {x}, {{3}}, {ElementType::F32}), BuildError);
}

// Every op of ops.h, as its typed method emits it, is one the plugin's parser knows: the table's
// StableHLO names are spelt right.
TEST(Builder, EveryOpOfTheTableCompiles) {
  Builder b;
  Value f = b.parameter({2}, ElementType::F32);
  Value i = b.parameter({2}, ElementType::S32);
  auto on_ints = [](auto op) { return op == UnaryOp::Not || op == UnaryOp::CountLeadingZeros; };
  std::vector<Value> results;
#define TORCH_TPU_TEST_UNARY(value, method, name) \
  results.push_back(on_ints(UnaryOp::value) ? b.method(i) : b.method(f));
  TORCH_TPU_HLO_UNARY_OPS(TORCH_TPU_TEST_UNARY)
#undef TORCH_TPU_TEST_UNARY
  const std::vector<BinaryOp> integer_only{BinaryOp::And,
                                           BinaryOp::Or,
                                           BinaryOp::Xor,
                                           BinaryOp::ShiftLeft,
                                           BinaryOp::ShiftRightArithmetic,
                                           BinaryOp::ShiftRightLogical};
#define TORCH_TPU_TEST_BINARY(value, method, name)                                            \
  results.push_back(std::count(integer_only.begin(), integer_only.end(), BinaryOp::value) > 0 \
                        ? b.method(i, i)                                                      \
                        : b.method(f, f));
  TORCH_TPU_HLO_BINARY_OPS(TORCH_TPU_TEST_BINARY)
#undef TORCH_TPU_TEST_BINARY
#define TORCH_TPU_TEST_COMPARISON(value, method, name) results.push_back(b.method(f, f));
  TORCH_TPU_HLO_COMPARISONS(TORCH_TPU_TEST_COMPARISON)
#undef TORCH_TPU_TEST_COMPARISON
  std::string module = b.module(results);
  EXPECT_NE(module.find("\"stablehlo.shift_right_logical\""), std::string::npos) << module;
  EXPECT_NE(module.find("comparison_direction GE>"), std::string::npos) << module;
  EXPECT_NO_THROW(client()->compile(module, pjrt::single_device_compile_options())) << module;
}

// Names that arrive as data (a collective's reducer from Python) map back to the same ops.
TEST(Builder, RuntimeChecksRaiseTheClassEveryCheckShares) {
  using Kind = Builder::CheckKind;
  auto failure_of = [](std::vector<Kind> kinds) {
    Builder b;
    Value holds = b.constant(1, ElementType::Pred);
    for (Kind kind : kinds) b.check_at_runtime(holds, kind, "a failure");
    return b.runtime_check_failure();
  };
  EXPECT_EQ(failure_of({Kind::RaisesIndexError, Kind::RaisesIndexError}).kind,
            Kind::RaisesIndexError);
  EXPECT_EQ(failure_of({Kind::RaisesLinAlgError}).kind, Kind::RaisesLinAlgError);
  EXPECT_EQ(failure_of({Kind::RaisesLinAlgError, Kind::RaisesIndexError}).kind,
            Kind::RaisesRuntimeError);
  EXPECT_EQ(failure_of({Kind::RaisesIndexError, Kind::RaisesRuntimeError}).kind,
            Kind::RaisesRuntimeError);
  EXPECT_EQ(failure_of({Kind::RaisesIndexError, Kind::RaisesIndexError}).failure, "a failure");
}

TEST(Builder, BinaryOpsAreFoundByTheirStablehloNames) {
#define TORCH_TPU_TEST_NAMED(value, method, name) \
  EXPECT_EQ(binary_op_named(stablehlo_name(BinaryOp::value)), BinaryOp::value);
  TORCH_TPU_HLO_BINARY_OPS(TORCH_TPU_TEST_NAMED)
#undef TORCH_TPU_TEST_NAMED
  EXPECT_EQ(binary_op_named("sub"), std::nullopt);
}

TEST(Builder, ShapeErrorsAreReported) {
  Builder b;
  Value x = b.parameter({2, 3}, ElementType::F32);
  Value y = b.parameter({3, 2}, ElementType::F32);
  EXPECT_THROW(b.add(x, y), BuildError);
  EXPECT_THROW(b.reshape(x, {7}), BuildError);
  EXPECT_THROW(b.dot_general(x, x, {}, {}, {1}, {1 - 1}, ElementType::F32), BuildError);
}

TEST(Builder, BroadcastAndArithmetic) {
  Builder b;
  Value x = b.parameter({2, 3}, ElementType::F32);
  Value row = b.parameter({3}, ElementType::F32);
  Value wide = b.broadcast_in_dim(row, {2, 3}, {1});
  Value two = b.constant(2.0, ElementType::F32, {2, 3});
  Value out = b.multiply(b.add(x, wide), two);
  auto host = run(b.module({out}), {{1, 2, 3, 4, 5, 6}, {10, 20, 30}}, {{2, 3}, {3}});
  EXPECT_EQ(host, (std::vector<float>{22, 44, 66, 28, 50, 72}));
}

TEST(Builder, ConstantValuesHoldAHostTable) {
  // x + [0.5, -1.25, 3] and x gathered at the integer table [2, 0, 1].
  Builder b;
  Value x = b.parameter({3}, ElementType::F32);
  Value table = b.constant_values({0.5, -1.25, 3}, ElementType::F32);
  Value index = b.constant_values({2, 0, 1}, ElementType::S64);
  EXPECT_EQ(index.type, ElementType::S64);
  GatherDims dims;
  dims.collapsed_slice_dims = {0};
  dims.start_index_map = {0};
  dims.index_vector_dim = 1;
  Value picked = b.gather(x, index, dims, {1});
  Value out = b.concatenate({b.add(x, table), picked}, 0);
  auto host = run(b.module({out}), {{1, 2, 3}}, {{3}});
  EXPECT_EQ(host, (std::vector<float>{1.5, 0.75, 6, 3, 1, 2}));
}

TEST(Builder, DotGeneralIsMatmul) {
  Builder b;
  Value a = b.parameter({2, 3}, ElementType::F32);
  Value c = b.parameter({3, 2}, ElementType::F32);
  Value out = b.dot_general(a, c, {}, {}, {1}, {0}, ElementType::F32);
  auto host = run(b.module({out}), {{1, 2, 3, 4, 5, 6}, {1, 0, 0, 1, 1, 1}}, {{2, 3}, {3, 2}});
  EXPECT_EQ(host, (std::vector<float>{4, 5, 10, 11}));
}

TEST(Builder, ReduceAndInfinityConstants) {
  Builder b;
  Value x = b.parameter({2, 3}, ElementType::F32);
  Value lowest = b.constant(-std::numeric_limits<double>::infinity(), ElementType::F32);
  Value zero = b.constant(0.0, ElementType::F32);
  Value max = b.reduce(x, lowest, {1}, BinaryOp::Maximum);
  Value sum = b.reduce(x, zero, {0, 1}, BinaryOp::Add);
  std::string module = b.module({max, sum});
  EXPECT_EQ(run(module, {{1, 5, 3, -4, -2, -6}}, {{2, 3}}, 0), (std::vector<float>{5, -2}));
  EXPECT_EQ(run(module, {{1, 5, 3, -4, -2, -6}}, {{2, 3}}, 1), (std::vector<float>{-3}));
}

TEST(Builder, VariadicReduceGivesArgmax) {
  Builder b;
  Value x = b.parameter({2, 3}, ElementType::F32);
  Value index = b.iota({2, 3}, ElementType::F32, 1);
  auto results = b.reduce(
      {x, index}, {b.constant(-INFINITY, ElementType::F32), b.constant(0.0, ElementType::F32)}, {1},
      [](Builder& r, const std::vector<Value>& args) {
        Value take_left = r.ge(args[0], args[2]);
        return std::vector<Value>{r.select(take_left, args[0], args[2]),
                                  r.select(take_left, args[1], args[3])};
      });
  EXPECT_EQ(run(b.module({results[1]}), {{1, 5, 3, 9, -2, -6}}, {{2, 3}}),
            (std::vector<float>{1, 0}));
}

TEST(Builder, GatherRows) {
  Builder b;
  Value table = b.parameter({3, 2}, ElementType::F32);
  Value indices = b.convert(b.parameter({2}, ElementType::F32), ElementType::S32);
  GatherDims dims;
  dims.offset_dims = {1};
  dims.collapsed_slice_dims = {0};
  dims.start_index_map = {0};
  dims.index_vector_dim = 1;
  Value out = b.gather(table, indices, dims, {1, 2});
  auto host = run(b.module({out}), {{1, 2, 3, 4, 5, 6}, {2, 0}}, {{3, 2}, {2}});
  EXPECT_EQ(host, (std::vector<float>{5, 6, 1, 2}));
}

TEST(Builder, ScatterAddAccumulatesDuplicates) {
  Builder b;
  Value base = b.parameter({3}, ElementType::F32);
  Value indices =
      b.reshape(b.convert(b.parameter({3}, ElementType::F32), ElementType::S32), {3, 1});
  Value updates = b.parameter({3}, ElementType::F32);
  ScatterDims dims;
  dims.inserted_window_dims = {0};
  dims.scatter_dims_to_operand_dims = {0};
  dims.index_vector_dim = 1;
  Value out = b.scatter(base, indices, updates, dims, [](Builder& r, const auto& args) {
    return std::vector<Value>{r.add(args[0], args[1])};
  });
  auto host = run(b.module({out}), {{0, 0, 0}, {1, 1, 2}, {1, 2, 3}}, {{3}, {3}, {3}});
  EXPECT_EQ(host, (std::vector<float>{0, 3, 3}));
}

TEST(Builder, ConvolutionAndPooling) {
  Builder b;
  Value image = b.parameter({1, 1, 3, 3}, ElementType::F32);
  Value kernel = b.constant(1.0, ElementType::F32, {1, 1, 2, 2});
  ConvDims dims;
  dims.input_spatial = {2, 3};
  dims.kernel_spatial = {2, 3};
  dims.output_spatial = {2, 3};
  ConvParams params{{1, 1}, {1, 1}, {1, 1}, {{0, 0}, {0, 0}}};
  Value conv = b.convolution(image, kernel, dims, params, ElementType::F32);
  Value pool = b.reduce_window(image, b.constant(-INFINITY, ElementType::F32), {1, 1, 2, 2},
                               {1, 1, 1, 1}, {1, 1, 1, 1}, {1, 1, 1, 1},
                               {{0, 0}, {0, 0}, {0, 0}, {0, 0}}, BinaryOp::Maximum);
  std::string module = b.module({conv, pool});
  std::vector<float> pixels{1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(run(module, {pixels}, {{1, 1, 3, 3}}, 0), (std::vector<float>{12, 16, 24, 28}));
  EXPECT_EQ(run(module, {pixels}, {{1, 1, 3, 3}}, 1), (std::vector<float>{5, 6, 8, 9}));
}

TEST(Builder, SortAscending) {
  Builder b;
  Value x = b.parameter({4}, ElementType::F32);
  auto sorted = b.sort({x}, 0, true, [](Builder& r, const std::vector<Value>& args) {
    return std::vector<Value>{r.lt(args[0], args[1])};
  });
  EXPECT_EQ(run(b.module({sorted[0]}), {{3, 1, 4, 2}}, {{4}}), (std::vector<float>{1, 2, 3, 4}));
}

// Doubles each element until the largest passes 100: the trip count depends on the data.
TEST(Builder, WhileLoopRunsUntilItsCondition) {
  Builder b;
  Value x = b.parameter({3}, ElementType::F32);
  auto out = b.while_loop(
      {x},
      [](Builder& r, const std::vector<Value>& s) {
        Value largest =
            r.reduce(s[0], r.constant(-INFINITY, ElementType::F32), {0}, BinaryOp::Maximum);
        return std::vector<Value>{r.lt(largest, r.constant(100, ElementType::F32))};
      },
      [](Builder& r, const std::vector<Value>& s) {
        return std::vector<Value>{r.add(s[0], s[0])};
      });
  EXPECT_EQ(run(b.module({out[0]}), {{1, 3, 5}}, {{3}}), (std::vector<float>{32, 96, 160}));
  EXPECT_THROW(b.while_loop(
                   {x}, [](Builder&, const std::vector<Value>& s) { return s; },
                   [](Builder&, const std::vector<Value>& s) { return s; }),
               BuildError);
}

TEST(Builder, RngBitsAreUniformInUnitInterval) {
  Builder b;
  Value seed = b.convert(b.parameter({2}, ElementType::F32), ElementType::U64);
  auto [state, bits] = b.rng_bit_generator(seed, {1000}, ElementType::U32);
  // Top 23 bits as a mantissa in [1, 2), minus one: the usual uniform float construction.
  Value mantissa = b.shift_right_logical(bits, b.constant_int(9, ElementType::U32, {1000}));
  Value one_bits = b.constant_int(0x3F800000, ElementType::U32, {1000});
  Value uniform = b.subtract(b.bitcast_convert(b.or_(mantissa, one_bits), ElementType::F32),
                             b.constant(1.0, ElementType::F32, {1000}));
  auto host = run(b.module({uniform}), {{42, 7}}, {{2}});
  double mean = 0;
  for (float v : host) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LT(v, 1.0f);
    mean += v / host.size();
  }
  EXPECT_NEAR(mean, 0.5, 0.05);
}

TEST(Builder, SliceConcatPadTranspose) {
  Builder b;
  Value x = b.parameter({2, 3}, ElementType::F32);
  Value sliced = b.slice(x, {0, 1}, {2, 3}, {1, 1});                                        // 2x2
  Value joined = b.concatenate({sliced, sliced}, 0);                                        // 4x2
  Value padded = b.pad(joined, b.constant(0.0, ElementType::F32), {0, 1}, {0, 0}, {0, 0});  // 4x3
  Value out = b.transpose(padded, {1, 0});                                                  // 3x4
  auto host = run(b.module({out}), {{1, 2, 3, 4, 5, 6}}, {{2, 3}});
  EXPECT_EQ(host, (std::vector<float>{0, 0, 0, 0, 2, 5, 2, 5, 3, 6, 3, 6}));
}

TEST(Builder, Complex32CrossesFunctionBoundariesAsItsBits) {
  Builder b;
  Value z = b.parameter({3}, ElementType::C32);
  EXPECT_EQ(z.type, ElementType::C32);
  Value squared = b.multiply(z, z);
  EXPECT_EQ(b.real(squared).type, ElementType::F16);
  std::string text = b.module({squared});
  EXPECT_NE(text.find("@main(%arg0: tensor<3xui32>) -> (tensor<3xui32>)"), std::string::npos);
}

TEST(Builder, Complex32HoldsHalfPartsRealFirst) {
  // complex(x, 2x) as complex32: 1 + 2^-12 rounds to 1 in f16; each element's 32 bits are its
  // f16 real part in the low half, then its imaginary part (torch's layout).
  Builder b;
  Value x = b.parameter({2}, ElementType::F32);
  Value two_x = b.multiply(x, b.constant(2.0, ElementType::F32, {2}));
  Value z = b.convert(b.complex(x, two_x), ElementType::C32);
  auto host = run(b.module({z}), {{1.0f + 1.0f / 4096, 3.0f}}, {{2}});
  ASSERT_EQ(host.size(), 2u);
  std::vector<uint16_t> halves(4);
  std::memcpy(halves.data(), host.data(), 8);
  EXPECT_EQ(halves, (std::vector<uint16_t>{0x3C00, 0x4000, 0x4200, 0x4600}));
}

TEST(Builder, ComplexPartsAndFft) {
  // x = [1, 2, 3, 4] as complex, + 1 (a complex constant); FFT([2, 3, 4, 5]) = [14, -2+2i, -2,
  // -2-2i]; the parts of its conjugate come back as real values.
  Builder b;
  Value x = b.parameter({4}, ElementType::F32);
  Value z = b.add(b.complex(x, b.constant(0.0, ElementType::F32, {4})),
                  b.constant(1.0, ElementType::C64, {4}));
  Value spectrum = b.fft(z, FftType::FFT, {4});
  EXPECT_EQ(spectrum.type, ElementType::C64);
  Value conjugate = b.conj(spectrum);
  EXPECT_EQ(b.conj(x).name, x.name);  // a real value is its own conjugate
  Value parts = b.concatenate({b.real(conjugate), b.imag(conjugate)}, 0);
  auto host = run(b.module({parts}), {{1, 2, 3, 4}}, {{4}});
  std::vector<float> want{14, -2, -2, -2, 0, -2, 0, 2};
  ASSERT_EQ(host.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(host[i], want[i], 1e-5) << i;
  // RFFT keeps n/2+1 points; IRFFT goes back (XLA scales it by 1/n).
  Builder r;
  Value real_in = r.parameter({4}, ElementType::F32);
  Value half = r.fft(real_in, FftType::RFFT, {4});
  EXPECT_EQ(half.shape, (Shape{3}));
  Value back = r.fft(half, FftType::IRFFT, {4});
  EXPECT_EQ(back.type, ElementType::F32);
  auto round_trip = run(r.module({back}), {{1, 2, 3, 4}}, {{4}});
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(round_trip[i], static_cast<float>(i + 1), 1e-5);
}

TEST(Builder, BitcastBetweenWidths) {
  Builder b;
  Value x = b.parameter({2}, ElementType::F32);
  Value bytes = b.bitcast_convert(x, ElementType::U8);
  EXPECT_EQ(bytes.shape, (Shape{2, 4}));
  Value back = b.bitcast_convert(bytes, ElementType::F32);
  EXPECT_EQ(back.shape, (Shape{2}));
  Builder bad;
  EXPECT_THROW(bad.bitcast_convert(bad.parameter({3}, ElementType::U8), ElementType::F32),
               BuildError);
  auto host = run(b.module({back}), {{1.5f, -2.0f}}, {{2}});
  EXPECT_EQ(host, (std::vector<float>{1.5f, -2.0f}));
}

}  // namespace
}  // namespace torch_tpu::hlo
