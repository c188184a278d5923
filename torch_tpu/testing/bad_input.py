"""Differential bad-input fuzz: each OpInfo entry's first valid sample, perturbed the way users
get calls wrong, runs on CPU (the oracle) and on tpu.

Perturbations (each applied where it changes the call):
- ``bool_input`` / ``int_input`` / ``double_other``: the first tensor as bool or int64, or the
  second tensor as float64 (dtype mistakes, mixed dtypes);
- ``extra_dims`` / ``zero_dim`` / ``empty``: the first tensor with two leading dimensions added,
  as a 0-d tensor, or with no elements (rank and shape mistakes);
- ``other_shape``: the second tensor one longer in its last dimension (shape mismatch);
- ``dim_out_of_range``: an integer ``dim`` argument set past the rank;
- ``int_last``: the last tensor as int64 (a weight, bias or source of the wrong dtype);
- ``nan_input``: the first floating tensor all NaN (values LAPACK or a loss refuses).

Each case has one outcome:
- ``agree``: both raise the same exception class, or both succeed with equal results;
- ``different_error``: both raise, with different classes;
- ``silent``: CPU raises and tpu answers (the worst: an answer to a call CPU refuses);
- ``refused``: CPU answers and tpu raises (``NotImplementedError``: a gap, not a wrong answer);
- ``mismatch``: both answer, with different results.

``tools/bad_input.py`` runs every entry in worker processes (a crash is an outcome too) and
prints the agreement table; ``tests/python/test_bad_input.py`` asserts agreement per entry.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from torch_tpu.testing import op_sweep

Call = tuple[Any, tuple[Any, ...], dict[str, Any]]  # (input, args, kwargs)


def _tensors(call: Call) -> list[torch.Tensor]:
    return [x for x in tree_flatten(call)[0] if isinstance(x, torch.Tensor)]


def _replace_tensor(
    call: Call, position: int, make: Callable[[torch.Tensor], torch.Tensor]
) -> Call:
    """`call` with its `position`-th tensor (in flattening order) replaced by `make(tensor)`."""
    seen = -1

    def visit(x: Any) -> Any:
        nonlocal seen
        if not isinstance(x, torch.Tensor):
            return x
        seen += 1
        return make(x) if seen == position else x

    return tree_map(visit, call)


def _with_dim(call: Call, value: int) -> Call | None:
    first, args, kwargs = call
    if isinstance(kwargs.get("dim"), int):
        return first, args, {**kwargs, "dim": value}
    return None


def _longer_last_dim(t: torch.Tensor) -> torch.Tensor:
    if t.dim() == 0:
        return torch.zeros(2, dtype=t.dtype)
    return torch.zeros(*t.shape[:-1], t.shape[-1] + 1, dtype=t.dtype)


def _last_as_int(call: Call) -> Call:
    return _replace_tensor(call, len(_tensors(call)) - 1, lambda t: t.to(torch.int64))


def _nan_filled(t: torch.Tensor) -> torch.Tensor:
    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return t
    return torch.full_like(t, float("nan"))


PERTURBATIONS: dict[str, Callable[[Call], Call | None]] = {
    "bool_input": lambda c: _replace_tensor(c, 0, lambda t: t.bool()),
    "int_input": lambda c: _replace_tensor(c, 0, lambda t: t.to(torch.int64)),
    "double_other": lambda c: _replace_tensor(c, 1, lambda t: t.to(torch.float64)),
    "extra_dims": lambda c: _replace_tensor(
        c, 0, lambda t: t[None, None].expand(2, 3, *t.shape).clone()
    ),
    "zero_dim": lambda c: _replace_tensor(
        c, 0, lambda t: t.reshape(-1)[0].clone() if t.numel() else t.sum()
    ),
    "empty": lambda c: _replace_tensor(
        c, 0, lambda t: t.new_zeros((0, *t.shape[1:])) if t.dim() else t.new_zeros(0)
    ),
    "other_shape": lambda c: _replace_tensor(c, 1, _longer_last_dim),
    "dim_out_of_range": lambda c: _with_dim(c, 7),
    "int_last": _last_as_int,
    "nan_input": lambda c: _replace_tensor(c, 0, _nan_filled),
}


def _changed(original: Call, perturbed: Call | None) -> bool:
    if perturbed is None:
        return False
    a, b = _tensors(original), _tensors(perturbed)
    if len(a) != len(b):
        return True
    return any(
        x.shape != y.shape or x.dtype != y.dtype or (x is not y and not torch.equal(x, y))
        for x, y in zip(a, b, strict=True)
    ) or (original[2] != perturbed[2])


# Perturbed calls that crash CPU's own kernel, the oracle (not run).
CPU_CRASHES = {
    ("_segment_reduce.offsets", "empty"): "SIGSEGV in torch's CPU kernel",
    ("linalg.eigvals", "nan_input"): "SIGSEGV in MKL's gebal (balancing a NaN matrix)",
}


def cases(op: Any) -> Iterator[tuple[str, Call]]:
    """(perturbation, call) for the entry's first valid float32 (or own-dtype) sample."""
    if op_sweep.set_aside_reason(op) is not None or op.name in op_sweep.NONDETERMINISTIC:
        return
    try:
        sample = next(
            iter(op.sample_inputs("cpu", op_sweep.forward_dtype(op), requires_grad=False))
        )
    except Exception:  # noqa: BLE001 - the database may not build samples
        return
    original: Call = (sample.input, tuple(sample.args), dict(sample.kwargs))
    for name, perturb in PERTURBATIONS.items():
        try:
            perturbed = perturb(original)
        except Exception:  # noqa: BLE001 - this perturbation does not apply to the sample
            continue
        if (op_sweep.entry_name(op), name) in CPU_CRASHES:
            continue
        if _changed(original, perturbed):
            assert perturbed is not None
            yield name, perturbed


def _run(op: Any, call: Call) -> tuple[Any, BaseException | None]:
    first, args, kwargs = call
    try:
        result = op(first, *args, **kwargs)
        if isinstance(result, torch.Tensor) or isinstance(result, (list, tuple)):
            result = op_sweep.to_cpu(result)  # a sync point: deferred errors surface here
        torch.tpu.synchronize()
        return result, None
    except Exception as error:  # noqa: BLE001 - the error is the outcome
        return None, error


def outcome(op: Any, call: Call) -> tuple[str, str]:
    """(outcome, detail) of one perturbed call on CPU and on tpu."""
    want, cpu_error = _run(op, op_sweep.fresh_leaves(call))
    got, tpu_error = _run(op, op_sweep.to_tpu(call, op.name in op_sweep.HOST_ARGUMENTS))
    if cpu_error is not None and tpu_error is not None:
        if type(cpu_error) is type(tpu_error):
            return "agree", type(cpu_error).__name__
        classes = f"cpu {type(cpu_error).__name__}, tpu {type(tpu_error).__name__}"
        return "different_error", f"{classes}: {str(tpu_error)[:120]}"
    if cpu_error is not None:
        return "silent", f"cpu {type(cpu_error).__name__}: {str(cpu_error)[:120]}"
    if tpu_error is not None:
        return "refused", f"{type(tpu_error).__name__}: {str(tpu_error)[:120]}"
    try:
        atol, rtol = op_sweep.tolerance(op, torch.float32)
        # A grown resize_ leaves memory uninitialized on both devices: only shapes compare.
        op_sweep.compare(got, want, atol, rtol, shape_only=op.name.startswith("resize"))
    except AssertionError as error:
        return "mismatch", str(error)[:160]
    return "agree", "both answer"


def entries() -> list[Any]:
    from torch.testing._internal.common_methods_invocations import op_db

    return list(op_db)


def fuzz(indices: list[int]) -> Iterator[dict[str, Any]]:
    ops = entries()
    for i in indices:
        op = ops[i]
        for name, call in cases(op):
            result, detail = outcome(op, call)
            yield {
                "index": i,
                "entry": op_sweep.entry_name(op),
                "perturbation": name,
                "outcome": result,
                "detail": detail,
            }


def main() -> None:
    import json
    import warnings

    warnings.filterwarnings("ignore")
    start, stop = (int(x) for x in sys.argv[1].split(":"))
    for record in fuzz(list(range(start, min(stop, len(entries()))))):
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
