// The pieces every size-bucket path shares (size_buckets.h): when a shape runs at its bucket,
// which tensors a bucket's buffer can stand in for, and the stand-ins themselves.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "csrc/device/storage.h"
#include "csrc/pjrt/buffer.h"

namespace torch_tpu {

// A fill runs a shape at its bucket where, when it first met the shape, the bucket had met two
// lengths of this (op, dtype): a sweep over lengths then shares the bucket's executables, and
// a shape keeps how it first ran, so that a program repeating its shapes compiles nothing new.
bool fill_uses_bucket(const std::string& op_name, c10::ScalarType dtype, int64_t bucket,
                      c10::IntArrayRef sizes, int64_t length);

// A tensor a bucket can stand in for: dense, on the device, read as stored.
bool plain(const at::Tensor& tensor, int64_t length);

// The bucket holding the tensor's elements, where it is one of `bucket` elements of its dtype.
std::shared_ptr<pjrt::Buffer> bucket_of(const at::Tensor& tensor, int64_t bucket);

// The bucket holding a storage's contents (of `type`) at its start, whatever its length.
std::shared_ptr<pjrt::Buffer> any_bucket(const DeviceStorage& storage, hlo::ElementType type);

// A flat tensor of the bucket's length, holding `contents` where given (else never written).
// Its storage is the dispatcher's own, so the allocator's counts and memory history, which
// tell what the program allocates, leave it out.
at::Tensor stand_in(const at::Tensor& like, int64_t bucket, std::shared_ptr<pjrt::Buffer> contents);

}  // namespace torch_tpu
