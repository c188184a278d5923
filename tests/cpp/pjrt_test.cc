// Runs the PJRT runtime layer against the plugin in TORCH_TPU_TEST_PLUGIN (the CPU plugin).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "csrc/pjrt/client.h"
#include "csrc/pjrt/compile_options.h"
#include "csrc/pjrt/error.h"

namespace torch_tpu::pjrt {
namespace {

std::shared_ptr<Plugin> test_plugin() {
  static std::shared_ptr<Plugin> plugin = [] {
    const char* path = std::getenv("TORCH_TPU_TEST_PLUGIN");
    if (path == nullptr || *path == '\0') throw std::runtime_error("TORCH_TPU_TEST_PLUGIN unset");
    return Plugin::load(path);
  }();
  return plugin;
}

std::shared_ptr<Client> test_client() {
  static std::shared_ptr<Client> client =
      Client::create(test_plugin(), {{"cpu_device_count", int64_t{1}}});
  return client;
}

const char* kAddModule = R"(
func.func public @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = stablehlo.add %a, %b : tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
)";

TEST(Plugin, LoadsAndReportsVersion) {
  auto client = test_client();
  EXPECT_EQ(client->plugin().major_version(), PJRT_API_MAJOR);
  EXPECT_GT(client->plugin().minor_version(), 0);
  EXPECT_TRUE(TORCH_TPU_PJRT_HAS(client->plugin(), PJRT_Client_Compile));
  EXPECT_EQ(client->platform_name(), "cpu");
}

TEST(Plugin, OffersFfiCustomCalls) {
  // The CPU plugin was chosen partly for this: custom kernels reach XLA through FFI.
  EXPECT_TRUE(test_client()->plugin().has_extension(PJRT_Extension_Type_FFI));
}

TEST(Plugin, MissingFileIsAClearError) {
  try {
    Plugin::load("/nonexistent/plugin.so");
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/plugin.so"), std::string::npos);
  }
}

TEST(Client, CreateOptionsGiveOneDevice) {
  auto client = test_client();
  ASSERT_EQ(client->devices().size(), 1u);
  EXPECT_FALSE(client->devices()[0].kind.empty());
}

TEST(Client, UploadDownloadRoundTrip) {
  auto client = test_client();
  std::vector<float> host{1, 2, 3, 4, 5, 6};
  std::vector<int64_t> dims{2, 3};
  Buffer buffer =
      client->upload(host.data(), PJRT_Buffer_Type_F32, dims, client->devices()[0].device);
  EXPECT_EQ(buffer.dims(), dims);
  EXPECT_EQ(buffer.element_type(), PJRT_Buffer_Type_F32);
  std::vector<float> back(6, 0);
  buffer.copy_to_host(back.data(), back.size() * sizeof(float)).await();
  EXPECT_EQ(back, host);
}

TEST(Client, AsyncUploadReleasesHostMemory) {
  auto client = test_client();
  auto* host = new std::vector<int32_t>{7, 8, 9};
  std::vector<int64_t> dims{3};
  std::atomic<bool> released{false};
  Buffer buffer = client->upload_async(host->data(), PJRT_Buffer_Type_S32, dims,
                                       client->devices()[0].device, [&, host] {
                                         delete host;
                                         released = true;
                                       });
  std::vector<int32_t> back(3);
  buffer.copy_to_host(back.data(), back.size() * sizeof(int32_t)).await();
  EXPECT_EQ(back, (std::vector<int32_t>{7, 8, 9}));
  for (int i = 0; i < 1000 && !released; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(released);
}

TEST(Buffer, CopiesToAnotherDeviceOfTheClient) {
  // A client of two devices of its own: tpu:0 -> tpu:1 copies go through this call.
  auto client = Client::create(test_plugin(), {{"cpu_device_count", int64_t{2}}});
  ASSERT_EQ(client->devices().size(), 2u);
  std::vector<int32_t> host{1, -2, 3, -4};
  std::vector<int64_t> dims{2, 2};
  for (auto [from, to] : {std::pair{0, 1}, std::pair{1, 0}}) {
    Buffer source =
        client->upload(host.data(), PJRT_Buffer_Type_S32, dims, client->devices()[from].device);
    Buffer copy = source.copy_to_device(client->devices()[to].device);
    EXPECT_EQ(copy.dims(), dims);
    EXPECT_EQ(copy.element_type(), PJRT_Buffer_Type_S32);
    std::vector<int32_t> back(4, 0);
    copy.copy_to_host(back.data(), back.size() * sizeof(int32_t)).await();
    EXPECT_EQ(back, host);
  }
}

TEST(Executable, CompileAndExecute) {
  auto client = test_client();
  auto executable = client->compile(kAddModule, single_device_compile_options());
  ASSERT_EQ(executable->num_outputs(), 1u);
  std::vector<float> a{1, 2, 3, 4, 5, 6}, b{10, 20, 30, 40, 50, 60};
  std::vector<int64_t> dims{2, 3};
  PJRT_Device* device = client->devices()[0].device;
  Buffer buffer_a = client->upload(a.data(), PJRT_Buffer_Type_F32, dims, device);
  Buffer buffer_b = client->upload(b.data(), PJRT_Buffer_Type_F32, dims, device);
  std::vector<PJRT_Buffer*> arguments{buffer_a.raw(), buffer_b.raw()};
  ExecuteResult result = executable->execute(arguments, device);
  result.done.await();
  std::vector<float> out(6);
  result.outputs[0].copy_to_host(out.data(), out.size() * sizeof(float)).await();
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33, 44, 55, 66}));
}

TEST(Executable, SerializeDeserializeRoundTrip) {
  auto client = test_client();
  auto executable = client->compile(kAddModule, single_device_compile_options());
  std::string bytes = executable->serialize();
  ASSERT_FALSE(bytes.empty());
  auto loaded = client->deserialize(bytes);
  std::vector<float> a{1, 1, 1, 1, 1, 1};
  std::vector<int64_t> dims{2, 3};
  PJRT_Device* device = client->devices()[0].device;
  Buffer buffer = client->upload(a.data(), PJRT_Buffer_Type_F32, dims, device);
  std::vector<PJRT_Buffer*> arguments{buffer.raw(), buffer.raw()};
  ExecuteResult result = loaded->execute(arguments, device);
  std::vector<float> out(6);
  result.outputs[0].copy_to_host(out.data(), out.size() * sizeof(float)).await();
  EXPECT_EQ(out, std::vector<float>(6, 2.0f));
}

TEST(Executable, CompileErrorCarriesCompilerMessage) {
  auto client = test_client();
  try {
    client->compile("func.func public @main() { not_an_op }", single_device_compile_options());
    FAIL() << "expected an exception";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("PJRT_Client_Compile"), std::string::npos);
  }
}

TEST(Executable, WrongArgumentCountIsAnError) {
  auto client = test_client();
  auto executable = client->compile(kAddModule, single_device_compile_options());
  std::vector<float> a(6, 1);
  std::vector<int64_t> dims{2, 3};
  PJRT_Device* device = client->devices()[0].device;
  Buffer buffer = client->upload(a.data(), PJRT_Buffer_Type_F32, dims, device);
  std::vector<PJRT_Buffer*> arguments{buffer.raw()};
  EXPECT_THROW(executable->execute(arguments, device), Error);
}

}  // namespace
}  // namespace torch_tpu::pjrt
