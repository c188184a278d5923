#include "csrc/pjrt/buffer.h"

#include <cstddef>
#include <cstring>

namespace torch_tpu::pjrt {
namespace {

std::atomic<int64_t> bytes_in_use{0};
std::atomic<int64_t> peak_bytes{0};
std::atomic<int64_t> retired_bytes{0};

// Whether the plugin's function table reaches the slot at `offset` and fills it (older plugins
// have shorter tables).
bool api_has(const PJRT_Api* api, std::size_t offset) {
  return api->struct_size >= offset + sizeof(void*) &&
         *reinterpret_cast<void* const*>(reinterpret_cast<const char*>(api) + offset) != nullptr;
}

void raise_peak(int64_t bytes) {
  int64_t seen = peak_bytes.load(std::memory_order_relaxed);
  while (bytes > seen && !peak_bytes.compare_exchange_weak(seen, bytes)) {
  }
}

}  // namespace

Buffer::Buffer(const PJRT_Api* api, PJRT_Buffer* buffer, int64_t bytes)
    : api_(api), buffer_(buffer) {
  if (buffer_ == nullptr) return;
  counted_bytes_ = bytes >= 0 ? bytes : static_cast<int64_t>(on_device_size_in_bytes());
  raise_peak(bytes_in_use.fetch_add(counted_bytes_, std::memory_order_relaxed) + counted_bytes_);
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    api_ = other.api_;
    buffer_ = other.buffer_;
    counted_bytes_ = other.counted_bytes_;
    retired_.store(other.retired_.exchange(false));
    viewed_ = std::move(other.viewed_);
    other.buffer_ = nullptr;
    other.counted_bytes_ = 0;
  }
  return *this;
}

void release(std::shared_ptr<Buffer> buffer) {
  // Only this owner besides executions in flight, so no other can start reading it: the
  // count cannot rise again. Marked before the reference drops, so that its reset (here or on
  // the thread finishing the last execution) takes the bytes back off.
  if (buffer && buffer->in_flight_reads_.load(std::memory_order_acquire) > 0 &&
      held_only_by(buffer, 1) && !buffer->retired_.exchange(true)) {
    retired_bytes.fetch_add(buffer->counted_bytes_);
  }
}

int64_t retired_device_bytes() { return retired_bytes.load(); }

void Buffer::donate() {
  bytes_in_use.fetch_sub(counted_bytes_, std::memory_order_relaxed);
  counted_bytes_ = 0;
}

int64_t device_bytes_in_use() { return bytes_in_use.load(std::memory_order_relaxed); }

int64_t peak_device_bytes() { return peak_bytes.load(std::memory_order_relaxed); }

void note_launch(int64_t temp_bytes) {
  if (temp_bytes > 0) raise_peak(bytes_in_use.load(std::memory_order_relaxed) + temp_bytes);
}

void reset_peak_device_bytes() {
  peak_bytes.store(bytes_in_use.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

Buffer::~Buffer() { reset(); }

InFlightReads::InFlightReads(std::vector<std::shared_ptr<Buffer>> buffers)
    : buffers_(std::move(buffers)) {
  for (const auto& buffer : buffers_) {
    if (buffer) buffer->in_flight_reads_.fetch_add(1, std::memory_order_release);
  }
}

InFlightReads::~InFlightReads() {
  // Uncounted before released: a concurrent held_only_by() then sees one holder too many at
  // worst, never one too few.
  for (const auto& buffer : buffers_) {
    if (buffer) buffer->in_flight_reads_.fetch_sub(1, std::memory_order_release);
  }
}

bool held_only_by(const std::shared_ptr<Buffer>& buffer, long owners) {
  // The count first: an execution finishing between the two reads is then still counted among
  // the holders (or already released), never missed.
  const long in_flight = buffer->in_flight_reads_.load(std::memory_order_acquire);
  return buffer.use_count() - in_flight <= owners && !buffer->viewed_;
}

void Buffer::reset() {
  if (buffer_ == nullptr) return;
  if (retired_.exchange(false)) retired_bytes.fetch_sub(counted_bytes_);
  bytes_in_use.fetch_sub(counted_bytes_, std::memory_order_relaxed);
  counted_bytes_ = 0;
  auto args = make_args<PJRT_Buffer_Destroy_Args>();
  args.buffer = buffer_;
  PJRT_Error* error = api_->PJRT_Buffer_Destroy(&args);
  if (error != nullptr) (void)to_exception(api_, error, "PJRT_Buffer_Destroy");  // destructor
  buffer_ = nullptr;
  viewed_.reset();  // only once the view over its memory is gone
}

std::vector<int64_t> Buffer::dims() const {
  auto args = make_args<PJRT_Buffer_Dimensions_Args>();
  args.buffer = buffer_;
  check(api_, api_->PJRT_Buffer_Dimensions(&args), "PJRT_Buffer_Dimensions");
  return std::vector<int64_t>(args.dims, args.dims + args.num_dims);
}

PJRT_Buffer_Type Buffer::element_type() const {
  auto args = make_args<PJRT_Buffer_ElementType_Args>();
  args.buffer = buffer_;
  check(api_, api_->PJRT_Buffer_ElementType(&args), "PJRT_Buffer_ElementType");
  return args.type;
}

std::size_t Buffer::on_device_size_in_bytes() const {
  auto args = make_args<PJRT_Buffer_OnDeviceSizeInBytes_Args>();
  args.buffer = buffer_;
  check(api_, api_->PJRT_Buffer_OnDeviceSizeInBytes(&args), "PJRT_Buffer_OnDeviceSizeInBytes");
  return args.on_device_size_in_bytes;
}

Event Buffer::copy_to_host(void* dst, std::size_t size) const {
  auto args = make_args<PJRT_Buffer_ToHostBuffer_Args>();
  args.src = buffer_;
  args.dst = dst;
  args.dst_size = size;
  check(api_, api_->PJRT_Buffer_ToHostBuffer(&args), "PJRT_Buffer_ToHostBuffer");
  return Event(api_, args.event);
}

bool Buffer::read_in_place(void* dst, std::size_t size, const char* what) const {
  if (!api_has(api_, offsetof(PJRT_Api, PJRT_Buffer_IsOnCpu)) ||
      !api_has(api_, offsetof(PJRT_Api, PJRT_Buffer_OpaqueDeviceMemoryDataPointer))) {
    return false;
  }
  auto on_cpu = make_args<PJRT_Buffer_IsOnCpu_Args>();
  on_cpu.buffer = buffer_;
  check(api_, api_->PJRT_Buffer_IsOnCpu(&on_cpu), "PJRT_Buffer_IsOnCpu");
  if (!on_cpu.is_on_cpu) return false;
  // An array of rank 0 or 1 is dense whatever its layout; its size rules out packed types.
  auto shape = make_args<PJRT_Buffer_Dimensions_Args>();
  shape.buffer = buffer_;
  check(api_, api_->PJRT_Buffer_Dimensions(&shape), "PJRT_Buffer_Dimensions");
  if (shape.num_dims > 1 || on_device_size_in_bytes() != size) return false;
  ready_event().await(what);
  auto pointer = make_args<PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args>();
  pointer.buffer = buffer_;
  check(api_, api_->PJRT_Buffer_OpaqueDeviceMemoryDataPointer(&pointer),
        "PJRT_Buffer_OpaqueDeviceMemoryDataPointer");
  std::memcpy(dst, pointer.device_memory_ptr, size);
  return true;
}

Buffer Buffer::copy_to_device(PJRT_Device* dst) const {
  if (!api_has(api_, offsetof(PJRT_Api, PJRT_Buffer_CopyToDevice))) {
    throw Error("PJRT_Buffer_CopyToDevice: the plugin does not provide it",
                PJRT_Error_Code_UNIMPLEMENTED);
  }
  auto args = make_args<PJRT_Buffer_CopyToDevice_Args>();
  args.buffer = buffer_;
  args.dst_device = dst;
  check(api_, api_->PJRT_Buffer_CopyToDevice(&args), "PJRT_Buffer_CopyToDevice");
  return Buffer(api_, args.dst_buffer);
}

Event Buffer::ready_event() const {
  auto args = make_args<PJRT_Buffer_ReadyEvent_Args>();
  args.buffer = buffer_;
  check(api_, api_->PJRT_Buffer_ReadyEvent(&args), "PJRT_Buffer_ReadyEvent");
  return Event(api_, args.event);
}

}  // namespace torch_tpu::pjrt
