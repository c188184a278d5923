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
  // Takes ownership of `buffer` and counts its bytes as in use (device_bytes_in_use); `bytes`
  // where the caller knows them, otherwise the plugin is asked.
  Buffer(const PJRT_Api* api, PJRT_Buffer* buffer, int64_t bytes = -1);
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
  // Where the buffer is a dense array in host memory (the CPU plugin's), waits for its producer
  // and copies its `size` bytes into `dst` straight from that memory: the plugin's transfer
  // would take a trip through its worker threads, most of a small read's time (an .item()).
  // False, having done nothing, elsewhere. Throws Error as awaiting the transfer would.
  bool read_in_place(void* dst, std::size_t size, const char* what) const;
  // A copy of the buffer on another device of the same client, device to device (the plugin
  // orders it after the producer). Throws Error where the plugin lacks the call.
  Buffer copy_to_device(PJRT_Device* dst) const;
  // Completes when the buffer's contents are defined (its producing computation finished).
  Event ready_event() const;
  // Called before an execution takes the buffer over (donation): its memory is counted from
  // then on as the execution's output's.
  void donate();

 private:
  friend class InFlightReads;
  friend class Client;
  friend bool held_only_by(const std::shared_ptr<Buffer>& buffer, long owners);
  friend void release(std::shared_ptr<Buffer> buffer);
  void reset();
  const PJRT_Api* api_ = nullptr;
  PJRT_Buffer* buffer_ = nullptr;
  int64_t counted_bytes_ = 0;            // its share of device_bytes_in_use()
  std::atomic<int> in_flight_reads_{0};  // InFlightReads holding it
  std::atomic<bool> retired_{false};     // counted in retired_device_bytes()
  // Set for a view of another buffer's memory (Client::prefix_view): it keeps that buffer
  // alive (released after buffer_, see reset), counts no bytes of its own, and is never
  // donated (the memory is not its own).
  std::shared_ptr<Buffer> viewed_;
};

// Bytes of the device buffers this process holds (tensors' contents, buffers still read by
// executions in flight, cached scalars), on all its devices: what the device really holds, where
// tensor counts also see storages a deferred graph has not produced yet.
int64_t device_bytes_in_use();
// The most device memory held at once since the last reset: buffers in use plus the
// temporaries of the execution being launched, sampled at each launch.
int64_t peak_device_bytes();
void note_launch(int64_t temp_bytes);
void reset_peak_device_bytes();

// Drops an owner's reference (a storage's): when only executions in flight still read the
// buffer, its memory is "retired" from then until they finish, held for them alone. The host
// running ahead of the device retires a buffer at every one of its last uses, and the plugin
// allocates each launch's outputs at once, so without a bound these would add up to several
// steps' worth of memory (see bound_run_ahead).
void release(std::shared_ptr<Buffer> buffer);
// Bytes of retired buffers (all devices of the process).
int64_t retired_device_bytes();

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
