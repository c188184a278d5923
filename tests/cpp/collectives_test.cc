// Collectives lowered to StableHLO and run by XLA itself: one process, one client with two CPU
// devices, one execute call that launches both replicas (the CPU plugin then runs the
// collectives in-process). Each result is checked against numbers computed here on the host.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "csrc/hlo/builder.h"
#include "csrc/pjrt/client.h"
#include "csrc/pjrt/compile_options.h"
#include "csrc/pjrt/error.h"

namespace torch_tpu::hlo {
namespace {

using pjrt::Buffer;
using pjrt::Client;

const std::vector<std::vector<int64_t>> kBothReplicas{{0, 1}};

std::shared_ptr<Client> client() {
  static std::shared_ptr<Client> instance = [] {
    const char* path = std::getenv("TORCH_TPU_TEST_PLUGIN");
    if (path == nullptr || *path == '\0') throw std::runtime_error("TORCH_TPU_TEST_PLUGIN unset");
    return Client::create(pjrt::Plugin::load(path), {{"cpu_device_count", int64_t{2}}});
  }();
  return instance;
}

// The ids of the client's devices, in the order `order` picks them.
std::vector<int> device_ids(const std::vector<int>& order = {0, 1}) {
  std::vector<int> ids;
  for (int index : order) ids.push_back(client()->devices()[index].id);
  return ids;
}

// A module with one parameter of `shape` and `type`, returning `op` applied to it.
std::string module_of(const Shape& shape, ElementType type,
                      const std::function<Value(Builder&, const Value&)>& op) {
  Builder b;
  Value x = b.parameter(shape, type);
  return b.module({op(b, x)});
}

// Compiles `module` for two replicas, replica r on client device order[r]; gives replica r
// inputs[r] on its device, runs both in one call and returns each replica's single output.
template <typename T>
std::vector<std::vector<T>> run_replicated(const std::string& module, PJRT_Buffer_Type type,
                                           const Shape& shape,
                                           const std::vector<std::vector<T>>& inputs,
                                           const std::vector<int>& order = {0, 1}) {
  auto executable =
      client()->compile(module, pjrt::replicated_compile_options(2, device_ids(order)));
  std::vector<Buffer> buffers;
  std::vector<std::vector<PJRT_Buffer*>> arguments;
  for (size_t r = 0; r < inputs.size(); ++r) {
    PJRT_Device* device = client()->devices()[order[r]].device;
    buffers.push_back(client()->upload(inputs[r].data(), type, shape, device));
    arguments.push_back({buffers.back().raw()});
  }
  std::vector<pjrt::ExecuteResult> results = executable->execute_replicated(arguments);
  std::vector<std::vector<T>> outputs;
  for (pjrt::ExecuteResult& result : results) {
    result.done.await();
    const Buffer& out = result.outputs.at(0);
    std::vector<T> host(num_elements(out.dims()));
    out.copy_to_host(host.data(), host.size() * sizeof(T)).await();
    outputs.push_back(std::move(host));
  }
  return outputs;
}

// bf16 is the top half of an f32: exact for the small integers used here.
uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16);
}

float from_bf16(uint16_t half) {
  uint32_t bits = static_cast<uint32_t>(half) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

const std::vector<float> kA{1, -2, 3.5f, 8, 0, -1}, kB{4, 5, -6, 0.5f, 2, -3};

std::vector<std::vector<float>> all_reduce_f32(BinaryOp reducer) {
  std::string module = module_of({2, 3}, ElementType::F32, [&](Builder& b, const Value& x) {
    return b.all_reduce(x, reducer, kBothReplicas);
  });
  return run_replicated<float>(module, PJRT_Buffer_Type_F32, {2, 3}, {kA, kB});
}

std::vector<float> elementwise(const std::function<float(float, float)>& f) {
  std::vector<float> out;
  for (size_t i = 0; i < kA.size(); ++i) out.push_back(f(kA[i], kB[i]));
  return out;
}

TEST(AllReduce, SumF32) {
  auto expected = elementwise([](float a, float b) { return a + b; });
  auto out = all_reduce_f32(BinaryOp::Add);
  EXPECT_EQ(out[0], expected);
  EXPECT_EQ(out[1], expected);
}

TEST(AllReduce, MaxF32) {
  auto expected = elementwise([](float a, float b) { return a > b ? a : b; });
  auto out = all_reduce_f32(BinaryOp::Maximum);
  EXPECT_EQ(out[0], expected);
  EXPECT_EQ(out[1], expected);
}

TEST(AllReduce, MinF32) {
  auto expected = elementwise([](float a, float b) { return a < b ? a : b; });
  auto out = all_reduce_f32(BinaryOp::Minimum);
  EXPECT_EQ(out[0], expected);
  EXPECT_EQ(out[1], expected);
}

TEST(AllReduce, ProductF32) {
  auto expected = elementwise([](float a, float b) { return a * b; });
  auto out = all_reduce_f32(BinaryOp::Multiply);
  EXPECT_EQ(out[0], expected);
  EXPECT_EQ(out[1], expected);
}

TEST(AllReduce, SumS32) {
  std::string module = module_of({4}, ElementType::S32, [](Builder& b, const Value& x) {
    return b.all_reduce(x, BinaryOp::Add, kBothReplicas);
  });
  auto out = run_replicated<int32_t>(module, PJRT_Buffer_Type_S32, {4},
                                     {{1, -2, 1000000, 7}, {10, 20, 2000000, -7}});
  std::vector<int32_t> expected{11, 18, 3000000, 0};
  EXPECT_EQ(out[0], expected);
  EXPECT_EQ(out[1], expected);
}

TEST(AllReduce, SumBF16) {
  std::vector<float> a{1, 2, -3, 64}, b{4, -8, 16, 64};
  std::vector<uint16_t> a16, b16;
  for (size_t i = 0; i < a.size(); ++i) {
    a16.push_back(to_bf16(a[i]));
    b16.push_back(to_bf16(b[i]));
  }
  std::string module = module_of({4}, ElementType::BF16, [](Builder& builder, const Value& x) {
    return builder.all_reduce(x, BinaryOp::Add, kBothReplicas);
  });
  auto out = run_replicated<uint16_t>(module, PJRT_Buffer_Type_BF16, {4}, {a16, b16});
  for (int r = 0; r < 2; ++r) {
    std::vector<float> values;
    for (uint16_t half : out[r]) values.push_back(from_bf16(half));
    EXPECT_EQ(values, (std::vector<float>{5, -6, 13, 128})) << "replica " << r;
  }
}

TEST(AllReduce, OrPred) {
  std::string module = module_of({4}, ElementType::Pred, [](Builder& b, const Value& x) {
    return b.all_reduce(x, BinaryOp::Or, kBothReplicas);
  });
  auto out =
      run_replicated<uint8_t>(module, PJRT_Buffer_Type_PRED, {4}, {{0, 1, 0, 1}, {0, 0, 1, 1}});
  std::vector<uint8_t> expected{0, 1, 1, 1};
  EXPECT_EQ(out[0], expected);
  EXPECT_EQ(out[1], expected);
}

TEST(AllGather, Dim0) {
  std::string module = module_of({2, 3}, ElementType::F32, [](Builder& b, const Value& x) {
    return b.all_gather(x, 0, kBothReplicas);
  });
  auto out = run_replicated<float>(module, PJRT_Buffer_Type_F32, {2, 3}, {kA, kB});
  std::vector<float> expected = kA;  // replica 0's rows, then replica 1's
  expected.insert(expected.end(), kB.begin(), kB.end());
  EXPECT_EQ(out[0], expected);
  EXPECT_EQ(out[1], expected);
}

TEST(AllGather, Dim1) {
  std::string module = module_of({2, 3}, ElementType::F32, [](Builder& b, const Value& x) {
    return b.all_gather(x, 1, kBothReplicas);
  });
  auto out = run_replicated<float>(module, PJRT_Buffer_Type_F32, {2, 3}, {kA, kB});
  std::vector<float> expected;  // each row: replica 0's row, then replica 1's
  for (size_t row = 0; row < 2; ++row) {
    expected.insert(expected.end(), kA.begin() + 3 * row, kA.begin() + 3 * row + 3);
    expected.insert(expected.end(), kB.begin() + 3 * row, kB.begin() + 3 * row + 3);
  }
  EXPECT_EQ(out[0], expected);
  EXPECT_EQ(out[1], expected);
}

TEST(ReduceScatter, SumDim0) {
  std::string module = module_of({4, 2}, ElementType::F32, [](Builder& b, const Value& x) {
    return b.reduce_scatter(x, 0, BinaryOp::Add, kBothReplicas);
  });
  std::vector<float> a{1, 2, 3, 4, 5, 6, 7, 8}, b{10, 20, 30, 40, 50, 60, 70, 80};
  auto out = run_replicated<float>(module, PJRT_Buffer_Type_F32, {4, 2}, {a, b});
  EXPECT_EQ(out[0], (std::vector<float>{11, 22, 33, 44}));  // rows 0-1 of the sum
  EXPECT_EQ(out[1], (std::vector<float>{55, 66, 77, 88}));  // rows 2-3
}

TEST(AllToAll, SplitColumnsConcatRows) {
  // x is 2x4 on each replica; column block k (2x2) goes to replica k, which stacks the blocks
  // it receives by source replica: 4x2.
  std::string module = module_of({2, 4}, ElementType::F32, [](Builder& b, const Value& x) {
    return b.all_to_all(x, 1, 0, 2, kBothReplicas);
  });
  std::vector<float> a{0, 1, 2, 3, 4, 5, 6, 7}, b{10, 11, 12, 13, 14, 15, 16, 17};
  auto out = run_replicated<float>(module, PJRT_Buffer_Type_F32, {2, 4}, {a, b});
  EXPECT_EQ(out[0], (std::vector<float>{0, 1, 4, 5, 10, 11, 14, 15}));
  EXPECT_EQ(out[1], (std::vector<float>{2, 3, 6, 7, 12, 13, 16, 17}));
}

TEST(CollectivePermute, Swap) {
  std::string module = module_of({2, 3}, ElementType::F32, [](Builder& b, const Value& x) {
    return b.collective_permute(x, {{0, 1}, {1, 0}});
  });
  auto out = run_replicated<float>(module, PJRT_Buffer_Type_F32, {2, 3}, {kA, kB});
  EXPECT_EQ(out[0], kB);
  EXPECT_EQ(out[1], kA);
}

TEST(Replicated, ReversedDeviceAssignment) {
  // Replica 0 runs on the second device: all_gather still puts replica 0's rows first.
  std::string module = module_of({2, 3}, ElementType::F32, [](Builder& b, const Value& x) {
    return b.all_gather(x, 0, kBothReplicas);
  });
  auto out = run_replicated<float>(module, PJRT_Buffer_Type_F32, {2, 3}, {kA, kB}, {1, 0});
  std::vector<float> expected = kA;
  expected.insert(expected.end(), kB.begin(), kB.end());
  EXPECT_EQ(out[0], expected);
  EXPECT_EQ(out[1], expected);
}

// Expects `call` to throw pjrt::Error whose message contains `text`.
void expect_error(const std::function<void()>& call, const std::string& text) {
  try {
    call();
    FAIL() << "expected pjrt::Error containing '" << text << "'";
  } catch (const pjrt::Error& error) {
    EXPECT_NE(std::string(error.what()).find(text), std::string::npos) << error.what();
    EXPECT_EQ(error.code(), PJRT_Error_Code_INVALID_ARGUMENT);
  }
}

TEST(Replicated, WrongReplicaCountIsAnError) {
  std::string module = module_of({4}, ElementType::F32, [](Builder& b, const Value& x) {
    return b.all_reduce(x, BinaryOp::Add, kBothReplicas);
  });
  auto executable = client()->compile(module, pjrt::replicated_compile_options(2, device_ids()));
  std::vector<float> host(4, 1);
  Buffer buffer =
      client()->upload(host.data(), PJRT_Buffer_Type_F32, Shape{4}, client()->devices()[0].device);
  expect_error([&] { executable->execute_replicated({{buffer.raw()}}); },
               "1 argument lists for an executable compiled for 2 devices");
  expect_error([&] { executable->execute_replicated({}); }, "no argument lists");
  expect_error([&] { executable->execute_replicated({{buffer.raw()}, {}}); },
               "different numbers of arguments");
}

// Had replica 0 launched, it would wait in the all_reduce for replica 1 until the plugin
// aborted the process (40 s); the check before launching makes these plain errors.
TEST(Replicated, MisplacedOrMismatchedArgumentsFailBeforeLaunch) {
  std::string module = module_of({4}, ElementType::F32, [](Builder& b, const Value& x) {
    return b.all_reduce(x, BinaryOp::Add, kBothReplicas);
  });
  auto executable = client()->compile(module, pjrt::replicated_compile_options(2, device_ids()));
  std::vector<float> host(4, 1);
  PJRT_Device* first = client()->devices()[0].device;
  PJRT_Device* second = client()->devices()[1].device;
  Buffer on_first = client()->upload(host.data(), PJRT_Buffer_Type_F32, Shape{4}, first);
  Buffer on_second = client()->upload(host.data(), PJRT_Buffer_Type_F32, Shape{4}, second);
  Buffer short_on_second = client()->upload(host.data(), PJRT_Buffer_Type_F32, Shape{2}, second);
  expect_error([&] { executable->execute_replicated({{on_first.raw()}, {on_first.raw()}}); },
               "argument 0 of replica 1 is not on that replica's device");
  expect_error([&] { executable->execute_replicated({{on_first.raw()}, {short_on_second.raw()}}); },
               "differs in type or shape");
  auto results = executable->execute_replicated({{on_first.raw()}, {on_second.raw()}});
  std::vector<float> out(4);
  results[1].outputs[0].copy_to_host(out.data(), out.size() * sizeof(float)).await();
  EXPECT_EQ(out, std::vector<float>(4, 2));  // still usable after the rejected calls
}

TEST(Replicated, CompileOptionsNeedOneDevicePerReplica) {
  EXPECT_THROW(pjrt::replicated_compile_options(2, {0}), std::invalid_argument);
  EXPECT_THROW(pjrt::replicated_compile_options(0, {}), std::invalid_argument);
}

TEST(CollectiveText, AllReduceHasRegionAndGroups) {
  std::string text = module_of({4}, ElementType::F32, [](Builder& b, const Value& x) {
    return b.all_reduce(x, BinaryOp::Add, kBothReplicas);
  });
  EXPECT_NE(text.find("\"stablehlo.all_reduce\"(%arg0) ({"), std::string::npos) << text;
  EXPECT_NE(text.find("\"stablehlo.add\""), std::string::npos) << text;
  EXPECT_NE(text.find("{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}"), std::string::npos)
      << text;
}

TEST(CollectiveText, BadArgumentsAreBuildErrors) {
  Builder b;
  Value x = b.parameter({4, 3}, ElementType::F32);
  EXPECT_THROW(b.all_reduce(x, BinaryOp::Subtract, kBothReplicas), BuildError);
  EXPECT_THROW(b.all_reduce(x, BinaryOp::Or, kBothReplicas), BuildError);  // float operand
  EXPECT_THROW(b.all_reduce(x, BinaryOp::Add, {{0, 1}, {2}}), BuildError);
  EXPECT_THROW(b.all_reduce(x, BinaryOp::Add, {{0, 1}, {1, 2}}), BuildError);
  EXPECT_THROW(b.all_reduce(x, BinaryOp::Add, {}), BuildError);
  EXPECT_THROW(b.all_gather(x, 2, kBothReplicas), BuildError);
  EXPECT_THROW(b.reduce_scatter(x, 1, BinaryOp::Add, kBothReplicas), BuildError);  // 3 % 2 != 0
  EXPECT_THROW(b.all_to_all(x, 0, 1, 3, kBothReplicas), BuildError);
  EXPECT_THROW(b.all_to_all(x, 1, 0, 2, kBothReplicas), BuildError);
  EXPECT_THROW(b.collective_permute(x, {{0, 1}, {0, 0}}), BuildError);
  EXPECT_THROW(b.collective_permute(x, {}), BuildError);
}

}  // namespace
}  // namespace torch_tpu::hlo
