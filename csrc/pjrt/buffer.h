// RAII over PJRT_Buffer: an immutable array in device memory.
#pragma once

#include <cstdint>
#include <vector>

#include "csrc/pjrt/c_api.h"
#include "csrc/pjrt/event.h"

namespace torch_tpu::pjrt {

class Buffer {
 public:
  Buffer() = default;
  Buffer(const PJRT_Api* api, PJRT_Buffer* buffer) : api_(api), buffer_(buffer) {}
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  explicit operator bool() const { return buffer_ != nullptr; }
  PJRT_Buffer* raw() const { return buffer_; }

  std::vector<int64_t> dims() const;
  PJRT_Buffer_Type element_type() const;
  std::size_t on_device_size_in_bytes() const;

  // Starts copying the whole buffer (dense, row-major) into `dst`, which must hold `size`
  // bytes and stay alive until the returned event completes. Waits for the producer first.
  Event copy_to_host(void* dst, std::size_t size) const;
  // Completes when the buffer's contents are defined (its producing computation finished).
  Event ready_event() const;

 private:
  void reset();
  const PJRT_Api* api_ = nullptr;
  PJRT_Buffer* buffer_ = nullptr;
};

}  // namespace torch_tpu::pjrt
