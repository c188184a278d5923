"""The hook Ray Train calls on each TPU worker before it creates a ``tpu_dist`` group.

``load()`` makes sure the backend is initialised (device, ``torch.tpu`` and ``tpu_dist``
registered) in that worker process; it is idempotent and cheap after the first call.
"""

from __future__ import annotations


def load() -> None:
    import torch_tpu

    torch_tpu._initialize()
