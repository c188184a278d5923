"""The PJRT plugin's own device trace, next to torch.profiler's.

Where the plugin has a profiler (libtpu, the XLA CUDA plugin; the CPU plugin has none), it runs
for the length of every torch.profiler profile that records the tpu activity, and its trace, a
serialized XSpace, is what XProf (TensorBoard's profile plugin) reads. torch.profiler's
``tensorboard_trace_handler(dir)`` then writes it beside the Chrome trace, as
``dir/plugins/profile/<run>/<worker>.xplane.pb``, the layout XProf looks for under a log dir.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.profiler

_original_handler = torch.profiler.tensorboard_trace_handler


def plugin_trace() -> bytes:
    """The plugin's trace of the last profile (a serialized XSpace); empty where the plugin has
    no profiler."""
    from . import _C

    return bytes(_C._plugin_trace())


def export_xplane(path: str | os.PathLike[str]) -> bool:
    """Writes the last profile's plugin trace to `path` (``.xplane.pb``); False if there is
    none."""
    trace = plugin_trace()
    if not trace:
        return False
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(trace)
    return True


def tensorboard_trace_handler(
    dir_name: str, worker_name: str | None = None, *args: Any, **kwargs: Any
) -> Callable[[torch.profiler.profile], None]:
    """torch.profiler's handler, which also writes the plugin's trace for XProf."""
    write_chrome_trace = _original_handler(dir_name, worker_name, *args, **kwargs)
    worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"

    def handler(prof: torch.profiler.profile) -> None:
        write_chrome_trace(prof)
        run = time.strftime("%Y_%m_%d_%H_%M_%S") + f"_{time.time_ns() % 1_000_000:06d}"
        export_xplane(Path(dir_name) / "plugins" / "profile" / run / f"{worker}.xplane.pb")

    return handler


def install() -> None:
    """Puts the handler above in torch.profiler's place (where users import it from)."""
    torch.profiler.tensorboard_trace_handler = tensorboard_trace_handler
    torch.profiler.profiler.tensorboard_trace_handler = tensorboard_trace_handler  # type: ignore[attr-defined]
