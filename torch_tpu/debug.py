"""Finding where a model on tpu leaves CPU's numbers.

``compare_with_cpu(model, *inputs)`` runs the model on tpu and a copy on the CPU with a forward
hook on every submodule, then (when the output is differentiable) the backward of the outputs'
sum on both, and reports the first submodule, in execution order, whose output leaves
tolerance: its name, type, shapes, worst element, and the aten ops it ran on tpu. It also lists
the ops that had no native tpu kernel (run through the CPU fallback) and the parameters whose
gradients differ.

``python -m torch_tpu compare script.py`` runs a script that defines ``model`` and ``inputs``
(a tuple) at module level and prints the report.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from ._flight_recorder import FlightEntry, dump_flight_record, flight_record

__all__ = [
    "Divergence",
    "FlightEntry",
    "Report",
    "compare_with_cpu",
    "dump_flight_record",
    "flight_record",
]


@dataclasses.dataclass
class Divergence:
    module: str  # the submodule's qualified name ("" is the model itself)
    module_type: str
    output_shapes: list[tuple[int, ...]]
    max_abs_error: float
    worst_index: tuple[int, ...]
    tpu_value: float
    cpu_value: float
    ops: list[str]  # the aten ops the module ran on tpu, in order (nested modules included)


@dataclasses.dataclass
class Report:
    first_divergence: Divergence | None
    gradient_mismatches: list[str]  # parameter names whose gradients leave tolerance
    fallback_ops: list[str]  # ops that ran on the CPU fallback, without a tpu kernel
    modules_checked: int

    def __str__(self) -> str:
        lines = [f"compare_with_cpu: {self.modules_checked} modules checked"]
        d = self.first_divergence
        if d is None:
            lines.append("every module's output is within tolerance of CPU's")
        else:
            lines += [
                f"first module leaving tolerance: {d.module or '(the model)'} ({d.module_type})",
                f"  output shapes {d.output_shapes}; worst element {list(d.worst_index)}: "
                f"tpu {d.tpu_value:.6g}, cpu {d.cpu_value:.6g} (|diff| {d.max_abs_error:.3g})",
                f"  ops it ran: {', '.join(d.ops) or '(none)'}",
            ]
        if self.gradient_mismatches:
            lines.append(f"gradients leaving tolerance: {', '.join(self.gradient_mismatches)}")
        if self.fallback_ops:
            lines.append(f"ops without a tpu kernel (CPU fallback): {', '.join(self.fallback_ops)}")
        return "\n".join(lines)


class _OpLog(TorchDispatchMode):
    """The aten ops dispatched while active, per module on the module stack."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[list[str]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        for ops in self.stack:
            ops.append(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _record(
    model: torch.nn.Module, log: _OpLog | None
) -> tuple[dict[str, Any], list[str], dict[str, list[str]], list]:
    """Hooks that keep each module's output (detached, on CPU) and, with `log`, its ops."""
    outputs: dict[str, Any] = {}
    order: list[str] = []
    ops: dict[str, list[str]] = {}
    handles = []
    for name, module in model.named_modules():

        def before(_module: Any, _args: Any, name: str = name) -> None:
            if log is not None:
                ops[name] = []
                log.stack.append(ops[name])

        def after(_module: Any, _args: Any, output: Any, name: str = name) -> None:
            if log is not None:
                log.stack.pop()
            if name not in outputs:  # a module called twice: its first call is compared
                outputs[name] = tree_map(
                    lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, output
                )
                order.append(name)

        handles.append(module.register_forward_pre_hook(before))
        handles.append(module.register_forward_hook(after))
    return outputs, order, ops, handles


def _worst(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> tuple | None:
    """(|diff|, index, got, want) of the element furthest out of tolerance, or None."""
    if got.shape != want.shape:
        return (float("inf"), (), float("nan"), float("nan"))
    if got.is_complex():  # compared part by part
        got, want = torch.view_as_real(got.resolve_conj()), torch.view_as_real(want.resolve_conj())
    g, w = got.double(), want.double()
    excess = (g - w).abs() - (atol + rtol * w.abs())
    excess = torch.where(torch.isnan(g) != torch.isnan(w), torch.inf, excess.nan_to_num(0.0))
    if excess.numel() == 0 or excess.max() <= 0:
        return None
    flat = int(excess.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), g.shape))
    return (
        float((g - w).abs().flatten()[flat]),
        index,
        float(g.flatten()[flat]),
        float(w.flatten()[flat]),
    )


def _fallback_ops(run: Any) -> list[str]:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    found = []
    for w in caught:
        text = str(w.message)
        if "has no tpu kernel" in text:  # the fallback's warning names the op in quotes
            found.append(text.split("'")[1])
    return sorted(set(found))


def compare_with_cpu(
    model: torch.nn.Module, *inputs: Any, rtol: float = 1e-4, atol: float = 1e-5
) -> Report:
    """Runs `model` (on tpu) and a CPU copy on `inputs`, compares every submodule's output and
    every parameter's gradient, and returns the report (``print(report)`` for text)."""
    device = next((p.device for p in model.parameters()), torch.device("tpu"))
    cpu_model = copy.deepcopy(model).cpu()
    cpu_inputs = tree_map(lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, inputs)
    tpu_inputs = tree_map(
        lambda t: t.detach().to(device) if isinstance(t, torch.Tensor) else t, inputs
    )

    want, _, _, handles = _record(cpu_model, None)
    try:
        cpu_out = cpu_model(*cpu_inputs)
    finally:
        for h in handles:
            h.remove()
    log = _OpLog()
    got, order, ops_of, handles = _record(model, log)
    tpu_out: Any = None

    def run_tpu() -> None:
        nonlocal tpu_out
        with log:
            tpu_out = model(*tpu_inputs)

    try:
        fallback = _fallback_ops(run_tpu)
    finally:
        for h in handles:
            h.remove()

    first: Divergence | None = None
    for name in order:
        for g, w in zip(_tensors(got[name]), _tensors(want.get(name)), strict=False):
            worst = _worst(g, w, rtol, atol)
            if worst is not None:
                first = Divergence(
                    module=name,
                    module_type=type(model.get_submodule(name)).__name__,
                    output_shapes=[tuple(t.shape) for t in _tensors(got[name])],
                    max_abs_error=worst[0],
                    worst_index=worst[1],
                    tpu_value=worst[2],
                    cpu_value=worst[3],
                    ops=ops_of.get(name, []),
                )
                break
        if first is not None:
            break

    mismatched: list[str] = []
    outs = [t for t in _tensors(tpu_out) if t.requires_grad]
    if outs:
        sum(t.float().sum() for t in outs).backward()  # type: ignore[union-attr]
        sum(t.float().sum() for t in _tensors(cpu_out) if t.requires_grad).backward()  # type: ignore[union-attr]
        cpu_params = dict(cpu_model.named_parameters())
        for name, p in model.named_parameters():
            q = cpu_params[name]
            if p.grad is None or q.grad is None:
                continue
            if _worst(p.grad.cpu(), q.grad, rtol, atol) is not None:
                mismatched.append(name)
    return Report(first, mismatched, fallback, len(order))
