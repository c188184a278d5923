// Reading and writing tensors that are views: a view's elements are gathered out of its flat
// storage, and written back by scattering into it. Whole-storage tensors skip both.
#pragma once

#include <ATen/core/TensorBase.h>

#include "csrc/hlo/builder.h"

namespace torch_tpu {

// Contiguous, offset 0, and covering every byte of its storage.
bool covers_whole_storage(const at::TensorBase& tensor);
// The storage's length in elements of the tensor's dtype.
int64_t storage_elements(const at::TensorBase& tensor);

// The tensor's value (shape = its sizes) from `flat`, the whole storage as a rank-1 value.
hlo::Value read_view(hlo::Builder& b, const hlo::Value& flat, const at::TensorBase& tensor);
// `flat` with the tensor's elements replaced by `values` (shape = the tensor's sizes).
hlo::Value write_view(hlo::Builder& b, const hlo::Value& flat, const hlo::Value& values,
                      const at::TensorBase& tensor);

}  // namespace torch_tpu
