// The device random generator: a (seed, offset) pair that every random op turns into the
// u64[2] three-fry state of stablehlo.rng_bit_generator, passed as a runtime input.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <array>
#include <cstdint>

namespace torch_tpu {

class DeviceGenerator final : public c10::GeneratorImpl {
 public:
  explicit DeviceGenerator(c10::DeviceIndex device);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override;
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  void set_state(const c10::TensorImpl& state) override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The state for one random op that consumes `blocks` 128-bit blocks; advances the offset
  // so that the next op draws fresh numbers. Call with the generator's mutex held.
  std::array<uint64_t, 2> next_state(uint64_t blocks);

 private:
  DeviceGenerator* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device);

}  // namespace torch_tpu
