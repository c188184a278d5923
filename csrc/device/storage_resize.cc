#include "csrc/device/storage_resize.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "csrc/device/allocator.h"
#include "csrc/device/storage.h"

namespace torch_tpu {
namespace {

// A uint8 tensor over the first `nbytes` of `storage`.
at::Tensor bytes_of(const c10::Storage& storage, std::size_t nbytes) {
  auto options = at::TensorOptions().dtype(at::kByte).device(storage.device());
  return at::empty({0}, options).set_(storage, 0, {static_cast<int64_t>(nbytes)}, {1});
}

}  // namespace

void resize_storage_bytes(const c10::Storage& storage, std::size_t nbytes) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl->resizable(), "torch_tpu: this storage is not resizable");
  const std::size_t old_nbytes = impl->nbytes();
  if (old_nbytes == nbytes) return;
  c10::DataPtr old_data = impl->set_data_ptr(device_allocator()->allocate(nbytes));
  impl->set_nbytes(nbytes);
  const std::size_t kept = std::min(old_nbytes, nbytes);
  if (kept == 0) return;  // freeing (resize_(0)) or growing from nothing: no copy
  c10::Storage old_storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), old_nbytes, std::move(old_data), nullptr, false));
  bytes_of(storage, kept).copy_(bytes_of(old_storage, kept));
}

}  // namespace torch_tpu
