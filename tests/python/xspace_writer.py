"""Writes XSpace protobufs (tsl/profiler/protobuf/xplane.proto) by hand for tests, in the shapes
the plugins write: the XLA CUDA plugin's ("/device:GPU:0" with a line per stream holding kernels
and copies whose stats name their module, "/host:CUPTI", "/host:CPU") and libtpu's
("/device:TPU:0" with "XLA Modules" and "XLA Ops" lines)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

# The test plugin (tests/cpp): the CPU plugin wrapped, with a profiler extension whose trace is
# the XSpace file TORCH_TPU_SHIM_TRACE names.
SHIM = (
    Path(os.environ.get("TORCH_TPU_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
    / "node_shim_plugin.so"
)


def shim_trace_env(trace: Path) -> dict[str, str]:
    """The variables that run torch_tpu on the test plugin, handing back `trace` as its XSpace."""
    import torch_tpu

    return {
        "TORCH_TPU_PJRT_PLUGIN": str(SHIM),
        "TORCH_TPU_SHIM_TARGET": str(torch_tpu._plugin.resolve("cpu")[1]),
        "TORCH_TPU_SHIM_TRACE": str(trace),
    }


def varint(value: int) -> bytes:
    out = b""
    while True:
        low, value = value & 0x7F, value >> 7
        out += bytes([low | (0x80 if value else 0)])
        if not value:
            return out


def field(number: int, payload: bytes) -> bytes:  # length-delimited
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def number(field_number: int, value: int) -> bytes:  # a varint field
    return varint(field_number << 3) + varint(value)


@dataclasses.dataclass(frozen=True)
class Ref:
    """A string stat written as a reference to a stat metadata of that name (XLA's way for
    repeated strings, such as a kernel's module)."""

    name: str


@dataclasses.dataclass
class Event:
    name: str
    offset_ps: int  # from the line's timestamp
    duration_ps: int
    stats: dict[str, int | str | Ref] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Line:
    name: str
    timestamp_ns: int
    events: list[Event]


def plane(plane_id: int, name: str, lines: list[Line]) -> bytes:
    """An XPlane, with the event and stat metadata its events use."""
    event_ids: dict[str, int] = {}
    stat_ids: dict[str, int] = {}

    def stat_id(stat_name: str) -> int:
        return stat_ids.setdefault(stat_name, len(stat_ids) + 1)

    def stat(stat_name: str, value: int | str | Ref) -> bytes:
        body = number(1, stat_id(stat_name))
        if isinstance(value, Ref):
            body += number(7, stat_id(value.name))
        elif isinstance(value, str):
            body += field(5, value.encode())
        else:
            body += number(4, value)
        return body

    out = number(1, plane_id) + field(2, name.encode())
    for line_id, line in enumerate(lines, 1):
        body = number(1, line_id) + field(2, line.name.encode()) + number(3, line.timestamp_ns)
        for event in line.events:
            metadata = event_ids.setdefault(event.name, len(event_ids) + 1)
            event_body = number(1, metadata) + number(2, event.offset_ps)
            event_body += number(3, event.duration_ps)
            for stat_name, value in event.stats.items():
                event_body += field(4, stat(stat_name, value))
            body += field(4, event_body)
        out += field(3, body)
    for event_name, event_id in event_ids.items():
        metadata = number(1, event_id) + field(2, event_name.encode())
        out += field(4, number(1, event_id) + field(2, metadata))
    for stat_name, stat_number in stat_ids.items():
        metadata = number(1, stat_number) + field(2, stat_name.encode())
        out += field(5, number(1, stat_number) + field(2, metadata))
    return out


def xspace(planes: list[bytes], hostname: str = "testhost") -> bytes:
    return b"".join(field(1, p) for p in planes) + field(4, hostname.encode())


def kernel(name: str, start_us: float, us: float, module: str | None, correlation: int) -> Event:
    """A GPU kernel as XLA's CUPTI collector writes it: its module and program id come from the
    annotation XLA sets around the launch ("XlaModule:#hlo_module=M,program_id=N#")."""
    stats: dict[str, int | str | Ref] = {"correlation_id": correlation, "context_id": "$$1"}
    if module is not None:
        stats.update(hlo_module=Ref(module), program_id=7, hlo_op=name)
    return Event(name, int(start_us * 1e6), int(us * 1e6), stats)


def gpu_xspace(base_ns: int, kernels: list[Event], copies: list[Event]) -> bytes:
    """The CUDA plugin's shape: a device plane with a compute and a device-to-host stream, and
    the host planes beside it."""
    device = plane(
        1,
        "/device:GPU:0",
        [
            Line("Stream #14(Compute)", base_ns, kernels),
            Line("Stream #16(MemcpyD2H)", base_ns, copies),
        ],
    )
    cupti = plane(
        2,
        "/host:CUPTI",
        [
            Line(
                "Host Threads/5893",
                base_ns,
                [Event("cuLaunchKernel", 0, 5_000_000, {"correlation_id": 1})],
            )
        ],
    )
    cpu = plane(
        3,
        "/host:CPU",
        [Line("python3", base_ns, [Event("PjRtCApiLoadedExecutable::Execute", 0, 9_000_000)])],
    )
    return xspace([device, cupti, cpu])


def tpu_xspace(base_ns: int, runs: list[tuple[str, float, float]], device: int = 0) -> bytes:
    """libtpu's shape: one "XLA Modules" event per run ("aten_mm.default(12)"), and its ops on
    "XLA Ops"."""
    modules = [
        Event(f"{name}(12)", int(start * 1e6), int(us * 1e6), {"run_id": i})
        for i, (name, start, us) in enumerate(runs)
    ]
    ops = [Event("fusion.1", int(start * 1e6), int(us * 1e6) // 2) for _, start, us in runs]
    return xspace(
        [
            plane(
                1,
                f"/device:TPU:{device}",
                [Line("XLA Modules", base_ns, modules), Line("XLA Ops", base_ns, ops)],
            ),
            plane(2, "/host:CPU", [Line("python3", base_ns, [])]),
        ]
    )
