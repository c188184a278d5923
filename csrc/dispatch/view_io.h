// Reading and writing tensors that are views: a view's elements are gathered out of its flat
// storage, and written back by scattering into it. Whole-storage tensors skip both. A view's
// storage offset is a runtime input (an s64 scalar), never part of the executable: x[i] for
// every i, or a KV cache read at a moving position, shares one executable.
#pragma once

#include <ATen/core/TensorBase.h>

#include <optional>

#include "csrc/hlo/builder.h"

namespace torch_tpu {

// Contiguous, offset 0, and covering every byte of its storage.
bool covers_whole_storage(const at::TensorBase& tensor);
// Every stride as a contiguous tensor of its sizes has it, size-1 dims' included (is_contiguous
// ignores those: they change no element read, but TensorIterator orders an output's dims by them).
bool has_default_strides(const at::TensorBase& tensor);
// The storage's length in elements of the tensor's dtype.
int64_t storage_elements(const at::TensorBase& tensor);

// Whether reading or writing the tensor needs its storage offset (as an `offset` argument below).
bool needs_view_offset(const at::TensorBase& tensor);

// The tensor's value (shape = its sizes) from `flat`, the whole storage as a rank-1 value;
// `offset` is the tensor's storage offset where needs_view_offset() says so.
hlo::Value read_view(hlo::Builder& b, const hlo::Value& flat,
                     const std::optional<hlo::Value>& offset, const at::TensorBase& tensor);
// `flat` with the tensor's elements replaced by `values` (shape = the tensor's sizes).
hlo::Value write_view(hlo::Builder& b, const hlo::Value& flat, const hlo::Value& values,
                      const std::optional<hlo::Value>& offset, const at::TensorBase& tensor);

}  // namespace torch_tpu
