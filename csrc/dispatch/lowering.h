// What a kernel sees: its arguments as StableHLO builder values. A kernel (a "lowering")
// never touches PJRT; the dispatcher decides what happens to the computation it describes.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "csrc/hlo/builder.h"

namespace torch_tpu {

// Where an executable parameter comes from when the executable runs.
struct ParamSource {
  enum class Kind { Storage, ViewOffset, Scalar, CpuScalarTensor, RngState };
  Kind kind;
  int arg = -1;         // schema argument index
  int list_index = -1;  // position within a Tensor[] argument
  hlo::ElementType type = hlo::ElementType::F32;
};

class LoweringContext {
 public:
  LoweringContext(hlo::Builder& builder, const std::vector<c10::IValue>& args)
      : b(builder), args_(args) {}

  hlo::Builder& b;

  const c10::IValue& arg(int index) const { return args_.at(index); }
  int num_args() const { return static_cast<int>(args_.size()); }
  // The tensor itself (metadata only: sizes, dtype; never its data).
  const at::Tensor& tensor_meta(int index) const { return args_.at(index).toTensor(); }

  // The argument's value, read from its storage (strided views are gathered).
  hlo::Value tensor(int index);
  std::vector<hlo::Value> tensors(int index);
  std::optional<hlo::Value> optional_tensor(int index);
  hlo::Value tensor_at(const at::Tensor& tensor, int index, int list_index);

  // A Scalar argument as a runtime input of `type` (never baked into the executable).
  hlo::Value scalar(int index, hlo::ElementType type);
  // `count` random bits of `type` (u32 or u64) from the device generator.
  hlo::Value random_bits(const hlo::Shape& shape, hlo::ElementType type);
  // The generator state ([2] u64) the next random_bits call draws from: an op that must draw
  // the same bits again later (attention's dropout, in its backward) returns it.
  hlo::Value rng_state();
  hlo::Value storage_param(const at::Tensor& tensor, int index, int list_index);
  // The tensor's storage offset as a runtime input, where reading or writing it needs one.
  std::optional<hlo::Value> view_offset(const at::Tensor& tensor, int index, int list_index);

  std::vector<ParamSource> params;
  uint64_t rng_blocks = 0;  // 128-bit blocks of random bits the computation draws

 private:
  bool has_double_device_tensor() const;
  const std::vector<c10::IValue>& args_;
  std::optional<hlo::Value> rng_state_;
};

using Lowering = std::function<std::vector<hlo::Value>(LoweringContext&)>;
// Runs on every call, cache hits included, before anything else: for what CPU does on each
// call and a cached executable cannot (a warning about the arguments' layout).
using EachCall = std::function<void(const std::vector<c10::IValue>&)>;

struct LoweringEntry {
  Lowering fn;
  // Scalar arguments whose value shapes the computation (a norm's order): these are part of
  // the cache key. Every other Scalar is a runtime input.
  std::vector<int> static_scalars;
  EachCall each_call;
};

// Registers `lowering` for each named aten overload ("add.Tensor", "add_.Tensor", "add.out").
// Arguments are read by their schema position; in-place and out= variants share a lowering with
// the functional form, and the dispatcher writes results into the mutated arguments.
void register_lowering(std::initializer_list<const char*> names, Lowering lowering,
                       std::vector<int> static_scalars = {}, EachCall each_call = {});

struct LoweringRegistrar {
  LoweringRegistrar(std::initializer_list<const char*> names, Lowering lowering,
                    std::vector<int> static_scalars = {}, EachCall each_call = {}) {
    register_lowering(names, std::move(lowering), std::move(static_scalars), std::move(each_call));
  }
};

#define TORCH_TPU_CONCAT_INNER(a, b) a##b
#define TORCH_TPU_CONCAT(a, b) TORCH_TPU_CONCAT_INNER(a, b)
// LOWER({"exp", "exp_", "exp.out"}, [](LoweringContext& ctx) {...});
#define LOWER(...) \
  static ::torch_tpu::LoweringRegistrar TORCH_TPU_CONCAT(lowering_, __COUNTER__)(__VA_ARGS__)

}  // namespace torch_tpu
