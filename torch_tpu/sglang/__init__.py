"""SGLang on ``tpu``: the platform plugin SGLang's runtime (``sglang.srt``) finds through its
``sglang.srt.platforms`` entry point.

SGLang activates every installed platform plugin whose function returns a class name and uses
it over its built-in platforms (CUDA, CPU, ...); ``SGLANG_PLATFORM=tpu`` selects this one by
name when several are installed. The adaptation to SGLang 0.5.23 lives in ``platform.py`` (what
SGLang's plugin interface asks for) and ``compat.py`` (what it does not cover yet).
"""

from __future__ import annotations

PLATFORM = "torch_tpu.sglang.platform.TpuSRTPlatform"


def activate() -> str | None:
    """The platform's qualified name when torch_tpu has a device to run on, else None."""
    try:
        import torch

        import torch_tpu  # noqa: F401  (registers the device)

        available = bool(torch.tpu.is_available())
    except Exception:  # noqa: BLE001 - a plugin that cannot load must not stop SGLang
        return None
    return PLATFORM if available else None
