#include "csrc/device/generator.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "csrc/device/runtime.h"

namespace torch_tpu {

DeviceGenerator::DeviceGenerator(c10::DeviceIndex device)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(c10::detail::getNonDeterministicRandom()) {}

void DeviceGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t DeviceGenerator::seed() {
  set_current_seed(c10::detail::getNonDeterministicRandom());
  return seed_;
}

// The state is 16 bytes: seed then offset, as a CPU uint8 tensor (like CUDA's generator).
c10::intrusive_ptr<c10::TensorImpl> DeviceGenerator::get_state() const {
  at::Tensor state = at::empty({16}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(state.data_ptr(), &seed_, 8);
  std::memcpy(static_cast<char*>(state.data_ptr()) + 8, &offset_, 8);
  return state.getIntrusivePtr();
}

void DeviceGenerator::set_state(const c10::TensorImpl& state) {
  TORCH_CHECK_TYPE(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == 16,
                   "torch_tpu: RNG state must be a uint8 tensor of 16 bytes, got ", state.numel(),
                   " elements of ", state.dtype());
  const char* bytes = static_cast<const char*>(state.data());
  std::memcpy(&seed_, bytes, 8);
  std::memcpy(&offset_, bytes + 8, 8);
}

std::array<uint64_t, 2> DeviceGenerator::next_state(uint64_t blocks) {
  std::array<uint64_t, 2> state{seed_, offset_};
  offset_ += blocks + 1;
  return state;
}

DeviceGenerator* DeviceGenerator::clone_impl() const {
  auto* copy = new DeviceGenerator(device().index());
  copy->seed_ = seed_;
  copy->offset_ = offset_;
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::deque<at::Generator> generators;
  std::lock_guard<std::mutex> lock(mutex);
  if (device < 0) device = static_cast<c10::DeviceIndex>(current_device());
  while (static_cast<c10::DeviceIndex>(generators.size()) <= device) {
    generators.push_back(
        at::make_generator<DeviceGenerator>(static_cast<c10::DeviceIndex>(generators.size())));
  }
  return generators[device];
}

}  // namespace torch_tpu
