// untyped_storage().resize_() for tpu storages (FSDP2 frees a parameter's unsharded storage
// with resize_(0) after each use and regrows it before the next all-gather).
#pragma once

#include <c10/core/Storage.h>

#include <cstddef>

namespace torch_tpu {

// Gives `storage` a fresh device storage of `nbytes`, keeping the first min(old, new) bytes.
void resize_storage_bytes(const c10::Storage& storage, std::size_t nbytes);

}  // namespace torch_tpu
