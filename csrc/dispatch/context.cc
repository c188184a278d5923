// LoweringContext: turns an op's arguments into executable parameters.
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include "csrc/device/types.h"
#include "csrc/dispatch/lowering.h"
#include "csrc/dispatch/size_buckets.h"
#include "csrc/dispatch/view_io.h"

namespace torch_tpu {

hlo::Value LoweringContext::storage_param(const at::Tensor& tensor, int index, int list_index) {
  hlo::ElementType type = to_element_type(tensor.scalar_type());
  params.push_back({ParamSource::Kind::Storage, index, list_index, type});
  return b.parameter({storage_elements(tensor)}, type);
}

std::optional<hlo::Value> LoweringContext::view_offset(const at::Tensor& tensor, int index,
                                                       int list_index) {
  if (!needs_view_offset(tensor)) return std::nullopt;
  params.push_back({ParamSource::Kind::ViewOffset, index, list_index, hlo::ElementType::S64});
  return b.parameter({}, hlo::ElementType::S64);
}

using hlo::Value;

hlo::Value LoweringContext::tensor_at(const at::Tensor& tensor, int index, int list_index) {
  if (tensor.device().is_cpu()) {
    // Only 0-dim CPU tensors (Python numbers, torch.tensor(2.)) mix with device tensors;
    // the dispatcher has already rejected any other CPU tensor. A double scalar only takes
    // part in float64 math when a device tensor is float64 (torch's promotion rules), so it
    // travels as f32 otherwise: TPUs have no f64.
    hlo::ElementType type = to_element_type(tensor.scalar_type());
    if (type == hlo::ElementType::F64 && !has_double_device_tensor()) type = hlo::ElementType::F32;
    params.push_back({ParamSource::Kind::CpuScalarTensor, index, list_index, type});
    return b.parameter({}, type);
  }
  Value flat = storage_param(tensor, index, list_index);
  Value value = read_view(b, flat, view_offset(tensor, index, list_index), tensor);
  // A lazily conjugated (x.conj()) or negated view holds the plain values: apply the bit.
  if (tensor.is_conj()) value = b.conj(value);
  if (tensor.is_neg()) value = b.negate(value);
  return value;
}

bool LoweringContext::has_double_device_tensor() const {
  auto is_double = [](const at::Tensor& t) {
    // complex128's parts are float64: its scalars need float64 too (pi * z in sinc).
    return t.defined() && !t.device().is_cpu() &&
           (t.scalar_type() == c10::ScalarType::Double ||
            t.scalar_type() == c10::ScalarType::ComplexDouble);
  };
  for (const c10::IValue& value : args_) {
    if (value.isTensor() && is_double(value.toTensor())) return true;
    if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList().vec()) {
        if (is_double(t)) return true;
      }
    }
  }
  return false;
}

hlo::Value LoweringContext::tensor(int index) {
  return tensor_at(args_.at(index).toTensor(), index, -1);
}

std::vector<hlo::Value> LoweringContext::tensors(int index) {
  std::vector<hlo::Value> values;
  auto list = args_.at(index).toTensorList();
  for (size_t i = 0; i < list.size(); ++i) {
    values.push_back(tensor_at(list.get(i), index, static_cast<int>(i)));
  }
  return values;
}

std::optional<hlo::Value> LoweringContext::optional_tensor(int index) {
  const c10::IValue& value = args_.at(index);
  if (value.isNone() || !value.toTensor().defined()) return std::nullopt;
  return tensor(index);
}

hlo::Value LoweringContext::scalar(int index, hlo::ElementType type) {
  params.push_back({ParamSource::Kind::Scalar, index, -1, type});
  return b.parameter({}, type);
}

hlo::Value LoweringContext::rng_state() {
  if (!rng_state_) {
    params.push_back({ParamSource::Kind::RngState, -1, -1, hlo::ElementType::U64});
    rng_state_ = b.parameter({2}, hlo::ElementType::U64);
  }
  return *rng_state_;
}

hlo::Value LoweringContext::random_bits(const hlo::Shape& shape, hlo::ElementType type) {
  // Drawn as one run of numbers, and the generator advanced as for the length's size bucket:
  // element i's bits then depend only on the state and i, so that a fill run at the bucket's
  // length begins with the numbers the exact fill draws (size_buckets.h).
  const int64_t count = hlo::num_elements(shape);
  auto [next_state, bits] = b.rng_bit_generator(rng_state(), {count}, type);
  rng_state_ = next_state;
  rng_blocks += static_cast<uint64_t>(bucket_length(count) * hlo::byte_size(type) / 16 + 1);
  return b.reshape(bits, shape);
}

}  // namespace torch_tpu
