"""Shape rules for torch.compile's fake tensors where torch's Meta kernel is narrower than the
op on tpu.

``_grouped_mm``'s Meta kernel copies CUDA's fast path and takes only bfloat16, while CPU, CUDA's
fallback and our lowering take any float dtype: a float32 mixture-of-experts model would
compile for no device. For tpu inputs the output is shaped by the same rule without the dtype
check; other devices keep the Meta kernel.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._meta_registrations import _create_grouped_mm_output_tensor
from torch._subclasses.fake_impls import register_op_impl
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, in_kernel_invocation_manager


def _on_tpu(*tensors: Any) -> bool:
    return any(isinstance(t, FakeTensor) and t.fake_device.type == "tpu" for t in tensors)


@register_op_impl(torch.ops.aten._grouped_mm.default)
def _grouped_mm(
    fake_mode: FakeTensorMode,
    func: torch._ops.OpOverload,
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    offs: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> Any:
    if not _on_tpu(mat_a, mat_b) or not mat_a.dtype.is_floating_point:
        return NotImplemented  # the Meta kernel, with its checks
    torch._check(bias is None, lambda: "Bias not supported yet")
    torch._check(
        mat_a.dtype == mat_b.dtype,
        lambda: f"Expected mat_a and mat_b of one dtype, got {mat_a.dtype} and {mat_b.dtype}",
    )
    torch._check(
        mat_a.dim() in (2, 3) and mat_b.dim() in (2, 3),
        lambda: f"Multiplicands must be 2D or 3D but got {mat_a.dim()}D and {mat_b.dim()}D",
    )
    torch._check(
        (offs is not None) == (mat_a.dim() == 2 or mat_b.dim() == 2),
        lambda: "offs is required exactly when one of the multiplicands is 2D",
    )
    with in_kernel_invocation_manager(fake_mode):
        out = _create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype)
    return FakeTensor(fake_mode, out, mat_a.fake_device)


def register() -> None:
    """Registration happens at import; this names the step in torch_tpu's initialisation."""
