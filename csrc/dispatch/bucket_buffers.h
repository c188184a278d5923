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

// A flat tensor of the bucket's length, holding `contents` where given (else never written).
// Its storage is the dispatcher's own, so the allocator's counts and memory history, which
// tell what the program allocates, leave it out.
at::Tensor stand_in(const at::Tensor& like, int64_t bucket, std::shared_ptr<pjrt::Buffer> contents);

// The length of the bucket a storage's contents (of `type`) are the start of, whatever it is:
// held, or pending in a fused graph (DeferAndFuse); 0 where they are the start of none.
int64_t bucket_length_of(const DeviceStorage& storage, hlo::ElementType type);

// A stand-in over the bucket `source` starts (bucket_length_of is not 0), in `like`'s dtype:
// the bucket's buffer, or the pending value that will be it.
at::Tensor bucket_stand_in(const at::Tensor& like, const DeviceStorage& source);

// `result`'s storage becomes the start of the bucket `flat` (a flat tensor of the bucket's
// length) holds, or will hold when its value is pending.
void take_as_bucket(const at::Tensor& flat, const at::Tensor& result, GrownLength grown = {});

}  // namespace torch_tpu
