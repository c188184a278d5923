"""vLLM on ``tpu``: the platform plugin vLLM finds through its ``vllm.platform_plugins`` entry
point.

vLLM asks every installed platform plugin whether it applies and activates the one that says
yes; an out-of-tree plugin (this one) wins over vLLM's built-in platforms, including its own TPU
platform that libtpu activates. ``VLLM_PLUGINS`` (a comma-separated list of plugin names) limits
which plugins vLLM loads: leave ``tpu`` out of it to run vLLM's built-in platform instead.
"""

from __future__ import annotations

PLATFORM = "torch_tpu.vllm.platform.TpuPlatform"


def register() -> str | None:
    """The platform's qualified name when torch_tpu has a device to run on, else None."""
    try:
        import torch

        import torch_tpu  # noqa: F401  (registers the device)

        available = bool(torch.tpu.is_available())
    except Exception:  # noqa: BLE001 - a plugin that cannot load must not stop vLLM
        return None
    return PLATFORM if available else None
