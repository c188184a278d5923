// RAII over PJRT_Buffer: an immutable array in device memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
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
  friend class InFlightReads;
  friend bool held_only_by(const std::shared_ptr<Buffer>& buffer, long owners);
  void reset();
  const PJRT_Api* api_ = nullptr;
  PJRT_Buffer* buffer_ = nullptr;
  std::atomic<int> in_flight_reads_{0};  // InFlightReads holding it
};

// Holds the buffers an enqueued execution reads until it finishes, counted on each buffer:
// PJRT orders a donated buffer's reuse after its pending reads, so these holders never stop a
// donation, while any other holder (a storage sharing the buffer) does.
class InFlightReads {
 public:
  explicit InFlightReads(std::vector<std::shared_ptr<Buffer>> buffers);
  ~InFlightReads();
  InFlightReads(const InFlightReads&) = delete;
  InFlightReads& operator=(const InFlightReads&) = delete;

 private:
  std::vector<std::shared_ptr<Buffer>> buffers_;
};

// Whether at most `owners` holders besides executions in flight keep `buffer`: donating it
// then cannot pull it from under anyone.
bool held_only_by(const std::shared_ptr<Buffer>& buffer, long owners);

}  // namespace torch_tpu::pjrt
