"""``torch.tpu``: device queries, synchronisation, RNG and memory statistics (torch.cuda parity)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from . import _C


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    description: str
    platform_name: str
    platform_version: str
    pjrt_api_version: str
    plugin_path: str
    ffi_custom_calls: bool
    total_memory: int


def _index(device: Any = None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "tpu":
        raise ValueError(f"expected a tpu device, got {device}")
    return current_device() if device.index is None else device.index


def is_available() -> bool:
    return _C._device_count() > 0


def is_initialized() -> bool:
    return bool(_C._is_initialized())


def init() -> None:
    """Present for torch.cuda parity: the runtime starts when torch_tpu loads."""


def device_count() -> int:
    return int(_C._device_count())


def current_device() -> int:
    return int(_C._current_device())


def _local_device_indices() -> list[int]:
    """The indices of the devices this process drives: all of them, except under torchrun with
    one chip per process, where device_count() is LOCAL_WORLD_SIZE and only LOCAL_RANK is its
    own."""
    return list(_C._local_device_indices())


def set_device(device: Any) -> None:
    # Raises torch.AcceleratorError for an index out of range or another process's chip.
    _C._set_device(_index(device))


class device:  # noqa: N801 - mirrors torch.cuda.device
    """Context manager that changes the current tpu device."""

    def __init__(self, device: Any) -> None:
        self.index = _index(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        set_device(self.index)

    def __exit__(self, *exc: object) -> None:
        set_device(self.previous)


def synchronize(device: Any = None) -> None:
    """Waits until every computation enqueued on the device has finished."""
    _C._synchronize(_index(device))


class Stream(torch.Stream):
    """A tpu stream (``torch.cuda.Stream`` parity). Streams are logical: PJRT orders every
    buffer's readers after its writer, so work is correctly ordered whichever stream issued
    it; they exist so that code written for streams (FSDP2, DDP, torch.Event) runs unchanged."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        if kwargs:  # wrapping an existing stream: stream_id, device_index, device_type
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("tpu", _index(device)), priority=priority)

    def record_event(self, event: torch.Event | None = None) -> torch.Event:
        # torch.Stream.record_event takes only a plain torch.Event as argument.
        if event is None:
            return super().record_event()
        event.record(self)
        return event


class Event(torch.Event):
    """A tpu event (``torch.cuda.Event`` parity): record() stamps the host time (for
    elapsed_time); synchronize() waits for the device's pending work."""

    _recorded_at: float | None = None

    def __new__(
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> Event:
        return super().__new__(
            cls,
            device=torch.device("tpu", current_device()),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )

    def record(self, stream: torch.Stream | None = None) -> None:
        super().record(stream)
        self._recorded_at = time.perf_counter()

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds between the two records, after the device work between them is done.
        (torch.Event.elapsed_time takes only a plain torch.Event as argument.)"""
        end = getattr(end_event, "_recorded_at", None)
        if self._recorded_at is None or end is None:
            raise RuntimeError("elapsed_time needs both tpu events to have been recorded")
        end_event.synchronize()
        return (end - self._recorded_at) * 1000.0


def _wrap(stream: torch.Stream) -> Stream:
    return Stream(
        stream_id=stream.stream_id,
        device_index=stream.device_index,
        device_type=stream.device_type,
    )


def current_stream(device: Any = None) -> Stream:
    return _wrap(torch.accelerator.current_stream(torch.device("tpu", _index(device))))


def default_stream(device: Any = None) -> Stream:
    return Stream(
        stream_id=0, device_index=_index(device), device_type=current_stream().device_type
    )


def set_stream(stream: torch.Stream | None) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """``with torch.tpu.stream(s):`` makes `s` the current stream for the block."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self.previous: Stream | None = None

    def __enter__(self) -> None:
        if self.stream is not None:
            self.previous = current_stream(self.stream.device)
            set_stream(self.stream)

    def __exit__(self, *exc: object) -> None:
        set_stream(self.previous)


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)


def get_device_name(device: Any = None) -> str:
    return str(_C._device_name(_index(device)))


def get_device_properties(device: Any = None) -> DeviceProperties:
    return DeviceProperties(**_C._device_properties(_index(device)))


def get_device_capability(device: Any = None) -> tuple[int, int]:
    return (0, 0)


def manual_seed(seed: int) -> None:
    """Seeds the current device's generator."""
    default_generators[current_device()].manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for generator in default_generators:
        generator.manual_seed(int(seed))


def seed() -> None:
    default_generators[current_device()].seed()


def seed_all() -> None:
    for generator in default_generators:
        generator.seed()


def initial_seed() -> int:
    return int(default_generators[current_device()].initial_seed())


def get_rng_state(device: Any = None) -> torch.Tensor:
    return default_generators[_index(device)].get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
    default_generators[_index(device)].set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [g.get_state() for g in default_generators]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for generator, state in zip(default_generators, new_states, strict=True):
        generator.set_state(state)


def memory_stats(device: Any = None) -> dict[str, Any]:
    """The allocator's statistics under CUDA's keys ("allocated_bytes.all.current", ...), and
    the plugin's own figures as "device.*" where it reports them."""
    index = _index(device)
    stats = dict(torch.accelerator.memory_stats(index))
    stats.update(_C._plugin_memory_stats(index))
    return stats


def memory_allocated(device: Any = None) -> int:
    """Bytes held by live tpu tensors' storages."""
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: Any = None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: Any = None) -> int:
    """Equal to memory_allocated: buffers return to the plugin when their last tensor goes."""
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: Any = None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes: from the plugin's memory statistics where it reports a limit,
    otherwise the host's available and total memory (the CPU plugin's buffers live there)."""
    return torch.accelerator.get_memory_info(_index(device))


def reset_peak_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))
    _C._reset_device_memory_peaks()


def reset_max_memory_allocated(device: Any = None) -> None:
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A short table of the allocator's statistics, in the spirit of torch.cuda.memory_summary."""
    del abbreviated
    stats = memory_stats(device)
    free, total = mem_get_info(device)
    rows = [
        ("Allocated memory", "allocated_bytes.all"),
        ("Reserved memory", "reserved_bytes.all"),
        ("Allocations", "allocation.all"),
        ("Device buffers", "device_buffer_bytes"),
    ]
    lines = [f"tpu:{_index(device)} memory summary", f"{'':<18}{'current':>16}{'peak':>16}"]
    for title, key in rows:
        lines.append(f"{title:<18}{stats[key + '.current']:>16}{stats[key + '.peak']:>16}")
    lines.append(f"{'Free / total':<18}{free:>16}{total:>16}")
    return "\n".join(lines)


def empty_cache() -> None:
    """Device buffers are freed as soon as their last tensor goes; this returns the cached
    pinned host blocks (staging buffers, ``pin_memory()``) to the system."""
    _C._empty_host_cache()


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Dtypes torch.autocast("tpu", dtype=...) accepts."""
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    del including_emulation
    return True


def _is_in_bad_fork() -> bool:
    """torch.random asks this before seeding; PJRT clients do not survive fork either way."""
    return False


def _lazy_init() -> None:
    """Called by torch's generic device code (e.g. torch.random.fork_rng)."""


class _DefaultGenerators:
    """torch.tpu.default_generators: the backend's generator of each device."""

    def __getitem__(self, index: int) -> torch.Generator:
        if not 0 <= index < device_count():
            raise IndexError(f"tpu device index {index} out of range")
        return _C._default_generator(index)

    def __iter__(self) -> Iterator[torch.Generator]:
        # This process's devices (manual_seed_all): under torchrun, not its peers' chips.
        return (self[i] for i in _local_device_indices())

    def __len__(self) -> int:
        return device_count()


default_generators = _DefaultGenerators()
