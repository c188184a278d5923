// The plugin profiler wrapper against real plugins: the CPU plugin offers no profiler; a plugin
// that does (the XLA CUDA plugin from jax-cuda13-pjrt loads and profiles its host even where
// there is no GPU) runs a whole create/start/stop/collect round and hands back an XSpace.
// Set TORCH_TPU_TEST_PROFILER_PLUGIN to such a plugin's .so to run that part.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "csrc/pjrt/plugin.h"
#include "csrc/pjrt/profiler.h"

namespace torch_tpu::pjrt {
namespace {

TEST(PluginProfiler, CpuPluginHasNone) {
  const char* path = std::getenv("TORCH_TPU_TEST_PLUGIN");
  ASSERT_NE(path, nullptr);
  auto plugin = Plugin::load(path);
  EXPECT_FALSE(plugin->has_extension(PJRT_Extension_Type_Profiler));
  EXPECT_EQ(PluginProfiler::create(*plugin), nullptr);
}

TEST(PluginProfiler, RoundTripOnAPluginThatHasOne) {
  const char* path = std::getenv("TORCH_TPU_TEST_PROFILER_PLUGIN");
  if (path == nullptr || *path == '\0') GTEST_SKIP() << "TORCH_TPU_TEST_PROFILER_PLUGIN unset";
  auto plugin = Plugin::load(path);
  ASSERT_TRUE(plugin->has_extension(PJRT_Extension_Type_Profiler));
  for (int round = 0; round < 2; ++round) {  // a second profile in the same process
    auto profiler = PluginProfiler::create(*plugin);
    ASSERT_NE(profiler, nullptr);
    profiler->start();
    profiler->stop();
    const std::string trace = profiler->collect();
    // An XSpace (top-level fields 1-4: planes, errors, warnings, hostnames, each
    // length-delimited), possibly followed by a padding byte; or that byte alone.
    if (trace.size() > 1) {
      const auto tag = static_cast<unsigned char>(trace[0]);
      EXPECT_EQ(tag & 7u, 2u);
      EXPECT_GE(tag >> 3, 1u);
      EXPECT_LE(tag >> 3, 4u);
    }
  }
}

}  // namespace
}  // namespace torch_tpu::pjrt
