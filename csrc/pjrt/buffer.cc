#include "csrc/pjrt/buffer.h"

namespace torch_tpu::pjrt {

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    api_ = other.api_;
    buffer_ = other.buffer_;
    other.buffer_ = nullptr;
  }
  return *this;
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
  return buffer.use_count() - in_flight <= owners;
}

void Buffer::reset() {
  if (buffer_ == nullptr) return;
  auto args = make_args<PJRT_Buffer_Destroy_Args>();
  args.buffer = buffer_;
  PJRT_Error* error = api_->PJRT_Buffer_Destroy(&args);
  if (error != nullptr) (void)to_exception(api_, error, "PJRT_Buffer_Destroy");  // destructor
  buffer_ = nullptr;
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

Event Buffer::ready_event() const {
  auto args = make_args<PJRT_Buffer_ReadyEvent_Args>();
  args.buffer = buffer_;
  check(api_, api_->PJRT_Buffer_ReadyEvent(&args), "PJRT_Buffer_ReadyEvent");
  return Event(api_, args.event);
}

}  // namespace torch_tpu::pjrt
