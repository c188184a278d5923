// Transfers between tpu tensors and host tensors that the caller owns outright (staging
// buffers), where the general copy_ must assume the host side may be reused.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_tpu::aten {

// dst = host, where `host` is a staging tensor nobody writes again: when it fills dst's whole
// storage in dst's dtype, dst's storage takes it over without a copy where the plugin allows
// (the CPU plugin aliases it), and the host memory is released when the device buffer is.
// Otherwise an ordinary copy.
void adopt_host_values(const at::Tensor& dst, at::Tensor host);

}  // namespace torch_tpu::aten
