"""Differential sweep of PyTorch's OpInfo database: every op_db entry's samples run on tpu and
on CPU and are compared, forward (float32, bfloat16 where supported) and backward.

Each entry is classified per phase as pass, mismatch (a silently wrong number: the worst
outcome), not_implemented (NotImplementedError), error (another exception) or crash (the worker
process died). ``tools/op_coverage.py`` runs the sweep in worker processes and writes
docs/op_coverage.md and docs/op_coverage.json.
"""

from __future__ import annotations

import inspect
import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

# Ops whose results are random or uninitialized: compared by shape and dtype only.
NONDETERMINISTIC = (
    "bernoulli",
    "normal",
    "rand_like",
    "randn_like",
    "randint_like",
    "multinomial",
    "uniform",
    "exponential",
    "geometric",
    "log_normal",
    "cauchy",
    "nn.functional.dropout",
    "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout",
    "nn.functional.rrelu",
    # Their pooling windows are drawn at random on each device (given the same draws, the tests
    # check them exactly against CPU).
    "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d",
    "svd_lowrank",  # its sketch is a random matrix drawn on the device
    "empty",
    "empty_like",
    "new_empty",
    "empty_strided",
    "new_empty_strided",
    "empty_permuted",
    "randint",
    "randn",
    "rand",
)

# Set aside: layouts and dtypes the device does not offer.
SET_ASIDE = {
    "sparse.": "compressed sparse layouts (CSR, CSC, BSR) are not offered by the tpu device "
    "(COO is)",
    "nested": "nested tensors are not offered by the tpu device",
    "quantized": "quantized dtypes are not offered by the tpu device",
}

DEFAULT_TOLERANCE = {
    torch.float32: (1e-4, 1e-4),
    torch.complex64: (1e-4, 1e-4),
    torch.bfloat16: (2e-2, 2e-2),
}


# Entries whose comparison itself is not meaningful across devices.
NOT_COMPARABLE = {
    "as_strided.partial_views": "reads storage outside its input view; a view copied to another "
    "device does not carry that storage, so CPU and tpu read different memory",
}


def set_aside_reason(op: Any) -> str | None:
    for marker, reason in SET_ASIDE.items():
        if marker in op.name:
            return reason
    if op.name.startswith("jiterator"):
        return "jiterator kernels are CUDA-only"
    if entry_name(op) in NOT_COMPARABLE:
        return NOT_COMPARABLE[entry_name(op)]
    if entry_name(op) == "chalf":
        return "complex32: no PJRT plugin offers a complex half type (complex64/128 are offered)"
    if not op.dtypes:
        return "the entry declares no dtype for CPU builds (a CUDA-only kernel)"
    if not any(dt in op.dtypes for dt in FORWARD_DTYPES):
        offered = ", ".join(sorted(str(dt).removeprefix("torch.") for dt in op.dtypes))
        return f"none of the entry's dtypes is one the sweep runs ({offered or 'none'})"
    return None


# The forward phase runs in float32; an entry without float32 (bitwise and integer ops) runs in
# its first own dtype of these instead, and the report says which.
FORWARD_DTYPES = (torch.float32, torch.int64, torch.int32, torch.bool, torch.uint8, torch.complex64)

# Arguments that the op itself requires on the host (as on CUDA): they stay on CPU.
HOST_ARGUMENTS = {"tensor_split": "tensor_indices_or_sections must be a CPU tensor"}


def forward_dtype(op: Any) -> torch.dtype:
    return next(dt for dt in FORWARD_DTYPES if dt in op.dtypes)


def backward_dtype(op: Any) -> torch.dtype | None:
    """The dtype gradients are checked in (float32, or complex64 for complex-only entries);
    None when the entry has no autograd in either."""
    dtype = forward_dtype(op)
    return dtype if op.supports_autograd and dtype in (torch.float32, torch.complex64) else None


def entry_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def tolerance(op: Any, dtype: torch.dtype) -> tuple[float, float]:
    """The entry's own tolerance for comparing devices, where it declares one."""
    atol, rtol = DEFAULT_TOLERANCE.get(dtype, (0.0, 0.0))
    for info in getattr(op, "decorators", ()):
        test_name = getattr(info, "test_name", None)
        if test_name not in (None, "test_compare_cpu", "test_variant_consistency_eager"):
            continue
        for decorator in getattr(info, "decorators", ()):
            overrides = getattr(decorator, "d", None)
            if isinstance(overrides, dict) and dtype in overrides:
                tol = overrides[dtype]
                atol, rtol = max(atol, tol.atol), max(rtol, tol.rtol)
    return atol, rtol


def to_tpu(value: Any, keep_args_on_host: bool = False) -> Any:
    if keep_args_on_host:
        self, args, kwargs = value
        return (to_tpu(self), args, to_tpu(kwargs))

    def move(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            moved = x.detach().to("tpu")
            return moved.requires_grad_(x.requires_grad) if x.is_leaf else moved
        return x

    moved = tree_map(move, value)
    # A factory's samples name the device they were made for: without this, linspace, zeros,
    # eye, triu_indices ... ran on the CPU in both calls and passed whatever tpu does.
    if isinstance(moved, tuple) and len(moved) == 3 and isinstance(moved[2], dict):
        if "device" in moved[2]:
            moved = (moved[0], moved[1], {**moved[2], "device": torch.device("tpu")})
    return moved


def fresh_leaves(value: Any) -> Any:
    """The call with each leaf tensor copied, as to_tpu copies it: a sample's leaves may share
    storage with each other (a window and its slice), and autograd's answer for an aliased leaf
    is not the one for the tensor the tpu side receives."""

    def copy(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.is_leaf:
            return x.detach().clone().requires_grad_(x.requires_grad)
        return x

    return tree_map(copy, value)


def to_cpu(value: Any) -> Any:
    return tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, value)


def compare(got: Any, want: Any, atol: float, rtol: float, shape_only: bool) -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"expected a tensor, got {type(got).__name__}"
        assert got.shape == want.shape, f"shape {tuple(got.shape)} != {tuple(want.shape)}"
        assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
        if not shape_only:
            torch.testing.assert_close(got, want, atol=atol, rtol=rtol, equal_nan=True)
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), "structure differs"
        for g, w in zip(got, want, strict=True):
            compare(g, w, atol, rtol, shape_only)
    elif want is None or got is None:
        # An input one device's graph does not reach (no gradient) and the other's does.
        tpu_has = "no" if got is None else "a"
        cpu_has = "none" if want is None else "one"
        assert got is None and want is None, f"tpu gives {tpu_has} gradient, CPU {cpu_has}"
    else:
        assert got == want or (got != got and want != want), f"{got!r} != {want!r}"


def grads_of(fn: Callable[[], Any], inputs: list[torch.Tensor]) -> list[Any]:
    out = fn()
    tensors = [
        t
        for t in (out if isinstance(out, (list, tuple)) else [out])
        if isinstance(t, torch.Tensor)
        and t.requires_grad
        and (t.is_floating_point() or t.is_complex())
    ]
    if not tensors:
        return []
    # A complex output is weighted through its real and imaginary parts.
    tensors = [torch.view_as_real(t.resolve_conj()) if t.is_complex() else t for t in tensors]
    loss = sum(
        (t * torch.linspace(-1, 1, t.numel(), device=t.device).view(t.shape)).sum() for t in tensors
    )
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    return [g.detach().cpu() if g is not None else None for g in grads]


def grad_inputs(call: tuple[Any, Any, Any]) -> list[torch.Tensor]:
    """Tensors of a call's (input, args, kwargs) that require grad."""
    leaves = [call[0], *call[1], *call[2].values()]
    found: list[torch.Tensor] = []
    tree_map(
        lambda x: found.append(x) if isinstance(x, torch.Tensor) and x.requires_grad else None,
        leaves,
    )
    return found


def active_dropout(op: Any, sample: Any) -> bool:
    """Whether the sample asks for dropout (dropout_p > 0 while training), by keyword or by
    position (multi_head_attention_forward takes it positionally; its entry's op is a lambda,
    so the arguments are bound to the torch.nn.functional function of the same name)."""
    arguments = dict(sample.kwargs)
    name = op.name.removeprefix("nn.functional.")
    function = getattr(torch.nn.functional, name, None) if op.name != name else None
    try:
        signature = inspect.signature(function) if function is not None else None
    except (TypeError, ValueError):
        signature = None
    if signature is not None and "dropout_p" in signature.parameters:
        try:
            bound = signature.bind_partial(sample.input, *sample.args, **sample.kwargs)
            arguments.update(bound.arguments)
        except TypeError:
            pass
    return float(arguments.get("dropout_p", 0) or 0) > 0 and bool(arguments.get("training", True))


def run_phase(op: Any, dtype: torch.dtype, backward: bool, max_samples: int = 0) -> tuple[str, str]:
    """(status, reason) of one entry in one phase; with `max_samples`, only that many of its
    samples, evenly spread over the list (a fast subset for CI gates)."""
    shape_only = any(op.name.startswith(n) for n in NONDETERMINISTIC)
    host_args = op.name in HOST_ARGUMENTS
    atol, rtol = tolerance(op, dtype)
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=backward))
    except Exception as error:  # noqa: BLE001 - the database itself may not build samples
        return "skip", f"no samples: {type(error).__name__}"
    if not samples:
        return "skip", "no samples"
    if 0 < max_samples < len(samples):
        stride = -(-len(samples) // max_samples)
        samples = samples[::stride]
    outvoted: list[int] = []
    exact: list[int] = []
    tied: list[int] = []
    for index, sample in enumerate(samples):
        # Results that are unique only up to signs or phases (singular and eigenvectors) are
        # compared by the part the entry names as unique, on each device, as PyTorch's own
        # test_compare_cpu does.
        unique_part = sample.output_process_fn_grad
        # A sample with active dropout is random: compared by shape and dtype.
        random_sample = shape_only or active_dropout(op, sample)
        try:
            if backward:
                call = fresh_leaves((sample.input, sample.args, sample.kwargs))
                inputs = grad_inputs(call)
                if not inputs:
                    continue
                want = grads_of(lambda c=call, u=unique_part: u(op(c[0], *c[1], **c[2])), inputs)
                moved = to_tpu(call, host_args)
                got = grads_of(
                    lambda m=moved, u=unique_part: u(op(m[0], *m[1], **m[2])), grad_inputs(moved)
                )
                try:
                    compare(got, want, atol, rtol, random_sample)
                except AssertionError:
                    if random_sample or not matches_float64_gradients(
                        op, call, unique_part, dtype, got, atol, rtol
                    ):
                        raise
                    exact.append(index)
            else:
                want = unique_part(op(sample.input, *sample.args, **sample.kwargs))
                moved = to_tpu((sample.input, sample.args, sample.kwargs), host_args)
                got = to_cpu(unique_part(op(moved[0], *moved[1], **moved[2])))
                try:
                    compare(got, want, atol, rtol, random_sample)
                except AssertionError:
                    if ties_explain(op, sample, got, want, atol, rtol):
                        tied.append(index)
                    elif cpu_is_the_outlier(op, sample, dtype, got, want, atol, rtol):
                        outvoted.append(index)
                    else:
                        raise
        except NotImplementedError as error:
            return "not_implemented", str(error).splitlines()[0][:200]
        except AssertionError as error:
            text = " ".join(str(error).split())[:200]
            return "mismatch", f"sample {index}: {text}"
        except Exception as error:  # noqa: BLE001 - classified, never hidden
            first = (str(error).splitlines() or [""])[0][:200]
            return "error", f"sample {index}: {type(error).__name__}: {first}"
    notes = [f"{OUTVOTED} on samples {outvoted}"] if outvoted else []
    notes += [f"{EXACT_GRADIENTS} on samples {exact}"] if exact else []
    notes += [f"{TIED} on samples {tied}"] if tied else []
    return "pass", "; ".join(notes)


OUTVOTED = "tpu matches float64 and CPU does not"
TIED = "positions differ from CPU's only among tied values"
EXACT_GRADIENTS = "tpu's gradients match float64 ones within tolerance where CPU's float32 differ"

# Ops returning the positions of selected elements, where any of several tied positions is right
# (they are not stable unless asked): (values, positions), or positions alone for argsort.
TIE_POSITIONS = ("sort", "argsort", "topk", "mode", "median", "nanmedian")


def selection_dim(name: str, sample: Any) -> tuple[int, bool]:
    """(dim, keepdim) of a sort, argsort, topk, mode or median call."""
    args, kwargs = sample.args, sample.kwargs
    if name == "topk":
        return (args[1] if len(args) > 1 else kwargs.get("dim", -1)), True
    dim = args[0] if args else kwargs.get("dim", -1)
    keepdim = name in ("sort", "argsort") or bool(
        args[1] if len(args) > 1 else kwargs.get("keepdim", False)
    )
    return dim, keepdim


def ties_explain(op: Any, sample: Any, got: Any, want: Any, atol: float, rtol: float) -> bool:
    """Whether tpu's positions differ from CPU's only among tied values: its values agree with
    CPU's, and the input read at its positions gives exactly its values. A stable sort must
    match CPU's positions exactly and is never explained this way."""
    x = sample.input
    if op.name not in TIE_POSITIONS or not isinstance(x, torch.Tensor) or x.dim() == 0:
        return False
    if sample.kwargs.get("stable", False):
        return False
    dim, keepdim = selection_dim(op.name, sample)
    try:
        if op.name == "argsort":
            positions, values, want_values = got, x.gather(dim, got), x.gather(dim, want)
        else:
            values, positions, want_values = got[0], got[1], want[0]
        compare(values, want_values, atol, rtol, False)
        if not keepdim:
            positions, values = positions.unsqueeze(dim), values.unsqueeze(dim)
        torch.testing.assert_close(x.gather(dim, positions), values, atol=0, rtol=0, equal_nan=True)
    except (AssertionError, IndexError, RuntimeError, TypeError):
        return False
    return True


def cpu_is_the_outlier(
    op: Any, sample: Any, dtype: torch.dtype, got: Any, want: Any, atol: float, rtol: float
) -> bool:
    """Whether a float32 or bfloat16 disagreement is CPU's rounding: the same computation in
    float64 on CPU agrees with tpu's result within the entry's tolerances, and not with CPU's
    own result in `dtype`."""
    if dtype not in (torch.float32, torch.bfloat16):
        return False
    if torch.float64 not in op.supported_dtypes("cpu"):
        return False

    def widen(x: Any) -> Any:
        return x.double() if isinstance(x, torch.Tensor) and x.dtype == dtype else x

    call = tree_map(widen, (sample.input, sample.args, sample.kwargs))
    reference = sample.output_process_fn_grad(op(call[0], *call[1], **call[2]))
    try:
        compare(tree_map(widen, got), reference, atol, rtol, False)
    except AssertionError:
        return False
    try:
        compare(tree_map(widen, want), reference, atol, rtol, False)
    except AssertionError:
        return True
    return False


def matches_float64_gradients(
    op: Any,
    call: tuple[Any, Any, Any],
    unique_part: Callable[[Any], Any],
    dtype: torch.dtype,
    got: list[Any],
    atol: float,
    rtol: float,
) -> bool:
    """Whether tpu's float32 gradients are within the entry's tolerances of the same gradients
    computed in float64 on CPU: a disagreement with CPU's float32 gradients is then rounding
    in both, which varies with the host's vector units (the XLA CPU plugin compiles for the
    machine it runs on)."""
    if dtype != torch.float32 or torch.float64 not in op.supported_dtypes("cpu"):
        return False

    def widen(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype == dtype:
            return x.detach().double().requires_grad_(x.requires_grad)
        return x

    def to_double(x: Any) -> Any:
        return x.double() if isinstance(x, torch.Tensor) else x

    wide = tree_map(widen, call)
    try:
        reference = grads_of(
            lambda: unique_part(op(wide[0], *wide[1], **wide[2])), grad_inputs(wide)
        )
        compare(tree_map(to_double, got), reference, atol, rtol, False)
    except (AssertionError, RuntimeError):
        return False
    return True


def sweep(indices: list[int]) -> list[dict[str, Any]]:
    from torch.testing._internal.common_methods_invocations import op_db

    results = []
    for i in indices:
        op = op_db[i]
        result: dict[str, Any] = {"index": i, "name": entry_name(op)}
        reason = set_aside_reason(op)
        if reason:
            result["set_aside"] = reason
            results.append(result)
            continue
        dtype = forward_dtype(op)
        result["float32"] = run_phase(op, dtype, backward=False)
        if dtype != torch.float32:
            result["forward_dtype"] = str(dtype).removeprefix("torch.")
        if torch.bfloat16 in op.dtypes:
            result["bfloat16"] = run_phase(op, torch.bfloat16, backward=False)
        grad_dtype = backward_dtype(op)
        if grad_dtype is not None:
            result["backward"] = run_phase(op, grad_dtype, backward=True)
        results.append(result)
    return results


def main() -> None:
    # "start:stop" or a comma-separated list of op_db indices.
    spec = sys.argv[1]
    if ":" in spec:
        start, stop = (int(x) for x in spec.split(":"))
        indices = list(range(start, stop))
    else:
        indices = [int(x) for x in spec.split(",")]
    try:
        results = sweep(indices)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        raise
    print(json.dumps(results))


if __name__ == "__main__":
    main()
