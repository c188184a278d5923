"""Script mode only: which Python line caused each host sync, upload, download, compile and
device run.

The profiler's trace names the Python *functions* running (by their first line), not the line
inside them, and a compile or a sync happens in C++ where no Python runs. So while the script's
steps run a second time, a ``TorchFunctionMode`` watches every torch call made from Python
(operators, methods such as ``.item()``, ``.cpu()``, ``.to()``, ``__repr__`` when printing,
``torch.*`` functions): it reads torch_tpu's counters before and after the call and charges
what changed to the innermost frame of the user's own code. Inside a function being compiled by
``torch.compile`` the mode does nothing (Dynamo folds the check away), so compiled graphs run as
they would. A compile's arguments are kept (shapes, dtypes, strides, storage offsets, Python
scalar values) so that consecutive compiles at one line say which part of the key changed.
Dynamo's own recompiles are caught with their guard failures (:func:`dynamo_recompiles`, which
costs nothing until Dynamo recompiles, so it also runs while the steps are profiled).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import sysconfig
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any, cast

import torch
from torch.overrides import TorchFunctionMode

# cache_misses: an op or graph whose executable was not in memory: compiled, or loaded from
# the persistent cache (a cheaper miss, but one all the same).
COUNTERS = ("host_syncs", "uploads", "downloads", "cache_misses", "executions")

_LIBRARY_DIRS = tuple(
    os.path.join(path, "")
    for path in {
        os.path.dirname(torch.__file__),
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # torch_tpu
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
    }
)


def _is_user_code(code: CodeType, cache: dict[CodeType, bool] = {}) -> bool:  # noqa: B006
    known = cache.get(code)
    if known is None:
        name = code.co_filename
        known = not (name.startswith("<") or name.startswith(_LIBRARY_DIRS))
        cache[code] = known
    return known


def user_frame(frame: FrameType | None) -> FrameType | None:
    while frame is not None and not _is_user_code(frame.f_code):
        frame = frame.f_back
    return frame


# One argument of a compiling call as far as the executable cache could care: a tensor's
# ("tensor", shape, dtype, strides, storage offset), a Python scalar's ("scalar", value).
ArgKey = tuple[Any, ...]


def _arg_key(value: Any) -> ArgKey:
    if isinstance(value, torch.Tensor):
        return (
            "tensor",
            tuple(value.shape),
            str(value.dtype),
            value.stride(),
            value.storage_offset(),
        )
    if isinstance(value, (bool, int, float, complex)):
        return ("scalar", value)
    if isinstance(value, (list, tuple)) and len(value) <= 8:
        return ("sequence", tuple(_arg_key(v) for v in value))
    return ("other", type(value).__name__)


PYTHON_SCALAR = "a Python scalar baked in as a constant"

# What a compiling call's executable could have been keyed on: its arguments and its result.
CallKey = tuple[tuple[ArgKey, ...], ArgKey]


def key_change(before: CallKey, after: CallKey) -> list[tuple[str, str]]:
    """Which parts of a call's key differ between two compiles at the same line, as
    (kind, detail) pairs: kind is "shape", "dtype", "view offset", "strides", PYTHON_SCALAR or
    "arguments"."""
    (old_args, old_result), (new_args, new_result) = before, after
    if len(old_args) != len(new_args):
        return [("arguments", f"{len(old_args)} -> {len(new_args)} arguments")]
    parts = _differences(old_args, new_args)
    if parts and all(kind == PYTHON_SCALAR for kind, _ in parts):
        if old_result[0] == new_result[0] == "tensor" and old_result[1] != new_result[1]:
            # A Python int that sets the result's size (torch.ones(n), x.view(n, -1)).
            values = ", ".join(detail for _, detail in parts)
            return [
                (
                    "shape",
                    f"{_dims(old_result[1])} -> {_dims(new_result[1])}, "
                    f"set by a Python int ({values})",
                )
            ]
    return list(dict.fromkeys(parts))


def _differences(
    old_args: tuple[ArgKey, ...], new_args: tuple[ArgKey, ...]
) -> list[tuple[str, str]]:
    parts: list[tuple[str, str]] = []
    for old, new in zip(old_args, new_args, strict=True):
        if old == new:
            continue
        if old[0] == new[0] == "tensor":
            if old[1] != new[1]:
                parts.append(("shape", f"{_dims(old[1])} -> {_dims(new[1])}"))
            elif old[2] != new[2]:
                parts.append(("dtype", f"{old[2]} -> {new[2]}"))
            elif old[4] != new[4]:
                parts.append(("view offset", f"{old[4]} -> {new[4]}"))
            else:
                parts.append(("strides", f"{old[3]} -> {new[3]}"))
        elif old[0] == new[0] == "scalar":
            parts.append((PYTHON_SCALAR, f"{old[1]!r} -> {new[1]!r}"))
        elif old[0] == new[0] == "sequence" and len(old[1]) == len(new[1]):
            parts += _differences(old[1], new[1])
        else:
            parts.append(("arguments", f"{old[0]} -> {new[0]}"))
    return parts


def _dims(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


@dataclasses.dataclass
class Site:
    """One line of the user's code and what its torch calls cost."""

    file: str
    line: int
    function: str
    counts: Counter[str] = dataclasses.field(default_factory=Counter)
    # per counter, the torch calls at this line that moved it ("item", "__mul__", "to")
    calls: dict[str, Counter[str]] = dataclasses.field(default_factory=dict)
    # per call name, the argument keys of each call that compiled, in order
    compile_keys: dict[str, list[CallKey]] = dataclasses.field(default_factory=dict)

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


@dataclasses.dataclass
class Recompile:
    """A Dynamo recompile of a compiled function, with the guards that failed."""

    file: str
    line: int
    function: str
    reasons: list[str]


class Attribution:
    def __init__(self) -> None:
        self.sites: dict[tuple[str, int], Site] = {}
        self.recompiles: list[Recompile] = []
        self.steps = 0

    def charge(
        self,
        frame: FrameType,
        call: str,
        delta: dict[str, int],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        result: Any,
    ) -> None:
        key = (frame.f_code.co_filename, frame.f_lineno)
        site = self.sites.get(key)
        if site is None:
            site = self.sites[key] = Site(key[0], key[1], frame.f_code.co_name)
        for counter, amount in delta.items():
            site.counts[counter] += amount
            site.calls.setdefault(counter, Counter())[call] += amount
        if delta.get("cache_misses"):
            flat = tuple(_arg_key(a) for a in args) + tuple(
                _arg_key(v) for _, v in sorted(kwargs.items())
            )
            site.compile_keys.setdefault(call, []).append((flat, _arg_key(result)))


def _call_name(func: Callable[..., Any]) -> str:
    name = getattr(func, "__name__", None) or repr(func)
    return str(name)


class _Watch(TorchFunctionMode):
    def __init__(self, record: Attribution) -> None:
        super().__init__()
        # The counters as the extension returns them, without metrics()'s copy.
        extension = importlib.import_module("torch_tpu._C")
        self._metrics = cast(Callable[[], dict[str, int]], extension._metrics)
        self._record = record

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if torch.compiler.is_compiling():
            return func(*args, **kwargs)
        before = self._metrics()
        result = func(*args, **kwargs)
        after = self._metrics()
        delta = {c: after[c] - before[c] for c in COUNTERS if after[c] != before[c]}
        if delta:
            frame = user_frame(sys._getframe(1))
            if frame is not None:
                self._record.charge(frame, _call_name(func), delta, args, kwargs, result)
        return result


# Dynamo's function that evaluates the failed guards of a frame about to recompile.
_REASONS = "get_and_maybe_log_recompilation_reasons"


@contextmanager
def dynamo_recompiles(record: Attribution) -> Iterator[None]:
    """Records Dynamo's recompiles with the guard failures that caused them."""
    try:
        from torch._dynamo import convert_frame
    except ImportError:  # pragma: no cover - torch without Dynamo
        yield
        return
    original = getattr(convert_frame, _REASONS, None)
    if original is None:
        yield
        return

    def wrapped(cache_entries: Any, frame: Any, *args: Any, **kwargs: Any) -> list[str]:
        reasons: list[str] = original(cache_entries, frame, *args, **kwargs)
        code = frame.f_code
        # The watch itself is a torch function mode, which Dynamo's guards see: a recompile
        # for that reason alone is the diagnosis's doing, not the script's.
        ours = [r for r in reasons if "torch_function_mode_stack" not in r]
        if ours and _is_user_code(code):
            record.recompiles.append(
                Recompile(code.co_filename, code.co_firstlineno, code.co_name, ours)
            )
        return reasons

    namespace = vars(convert_frame)
    namespace[_REASONS] = wrapped
    try:
        yield
    finally:
        namespace[_REASONS] = original


@contextmanager
def watching(record: Attribution) -> Iterator[None]:
    with _Watch(record):
        yield
