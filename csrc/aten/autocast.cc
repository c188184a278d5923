// torch.autocast("tpu"): the op policy CUDA uses, from ATen's shared lists. Matrix products,
// convolutions and attention run in the autocast dtype; numerically sensitive ops (exp, log,
// norms, losses, softmax, sums) in float32; ops with mixed inputs promote them to the widest.
#include <ATen/autocast_mode.h>
#include <torch/library.h>
// Named-tensor overloads: in torch 2.11's lists, gone from 2.13's.
#if __has_include(<ATen/core/Dimname.h>)
#include <ATen/core/Dimname.h>
#define TORCH_TPU_HAS_DIMNAME 1
#endif

namespace torch_tpu::aten {
namespace {

// The shared lists spell signatures with unqualified ATen names.
#ifdef TORCH_TPU_HAS_DIMNAME
using at::DimnameList;
#endif
using at::Scalar;
using at::ScalarType;
using at::Tensor;
using c10::IntArrayRef;

// Ops without an autocast rule pass straight through to the tpu kernels.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

#define TORCH_TPU_AUTOCAST_LOW(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TORCH_TPU_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TORCH_TPU_AUTOCAST_FP32_OPT(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TORCH_TPU_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(TORCH_TPU_AUTOCAST_LOW)
  AT_FORALL_FP32(TORCH_TPU_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TORCH_TPU_AUTOCAST_FP32_OPT)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TORCH_TPU_AUTOCAST_PROMOTE)
}

}  // namespace
}  // namespace torch_tpu::aten
