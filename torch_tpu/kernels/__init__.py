"""jax and Pallas functions as PyTorch ops on tpu.

    @torch_tpu.kernels.jax_op                       # or jax_op(fn, name="mylib::rmsnorm")
    def rmsnorm(x, w, eps=1e-6):
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * w

    y = rmsnorm(x_tpu, w_tpu)                        # a tpu tensor; y.sum().backward() works

Each call's tensor arguments become jax arrays of the same shapes and dtypes; every other
argument is static (a literal: number, string, bool, None, or a tuple/list/dict of them) and
part of the cache key. jax lowers the function once per static arguments, shapes and dtypes,
and its StableHLO runs as one op: enqueued in Strict mode, fused with its neighbours under
DeferAndFuse, recorded into ``torch.compile(backend="tpu")`` graphs without a graph break (the
op is a ``torch.library`` custom op whose fake implementation is ``jax.eval_shape``). The
function returns one array (the op returns a tensor) or a tuple/list of arrays (a tuple).

The backward is ``jax.vjp`` of the same function, lowered the same way, unless
``backward=`` is given: ``backward(cotangents, *args, **kwargs)`` written in jax, taking the
forward's arguments and a tuple with one cotangent per output, returning one gradient (or
None) per tensor argument. On CPU tensors the op runs the jax function with jax's own CPU
runtime, so the same op serves both devices. ``op.runs`` counts the op's eager runs (its
backward's: ``op.backward_op.runs``). Ready layer kernels live in ``torch_tpu.kernels.layers``.
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
from collections.abc import Callable, Sequence
from typing import Any, overload

import torch

from . import _lowering
from ._lowering import KernelError

__all__ = ["JaxOp", "KernelError", "jax_op"]

_SCHEMA = "(Tensor[] inputs, str spec) -> Tensor[]"
_TENSOR = b"\0tensor"  # a tensor's place in a call's spec
_names = itertools.count()


class JaxOp:
    """A jax function registered as the custom op ``name`` (see the module's docstring)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        backward: Callable[..., Any] | None = None,
        *,
        axis_name: str | None = None,
        differentiable: bool = True,
    ) -> None:
        self.fn = fn
        self.axis_name = axis_name
        self.name = name or _default_name(fn)
        if "::" not in self.name:
            raise ValueError(f"torch_tpu.kernels: an op name is 'namespace::name', got {name!r}")
        functools.update_wrapper(self, fn)
        self._kernels: dict[tuple[Any, ...], _lowering.LoweredKernel] = {}
        # How many times the op ran eagerly (a compiled graph's replays run it without this
        # count); tests read it to tell that a configured kernel really took a layer's place.
        self.runs = 0
        self.backward_op: JaxOp | None = None
        self._op = torch.library.custom_op(self.name, mutates_args=(), schema=_SCHEMA)(self._run)
        self._op.register_fake(self._fake)
        if differentiable:
            self._backward = _BackwardOp(
                functools.partial(_backward_kernel, fn, backward),
                self.name + "_backward",
                differentiable=False,
            )
            self.backward_op = self._backward
            self._op.register_autograd(self._autograd_backward, setup_context=_save_for_backward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tensors = [a for a in itertools.chain(args, kwargs.values()) if isinstance(a, torch.Tensor)]
        spec = _spec(args, kwargs)
        if _plain_eager_call(tensors):
            outputs = self._run(tensors, spec)  # what the op would run, without its layers
        else:
            outputs = self._op(tensors, spec)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def on_devices(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Runs fn once per device, as one program whose named axis (``axis_name``) spans the
        devices: a ``jax.lax.psum(x, axis_name)`` in fn is an all-reduce across them. Each
        tensor argument is a list with one tensor per device (distinct tpu devices, in the
        same order for every argument); returns one result per device, in that order."""
        if self.axis_name is None:
            raise ValueError(f"torch_tpu.kernels: {self.name} has no axis_name to run across")
        lists = [a for a in itertools.chain(args, kwargs.values()) if _is_tensor_list(a)]
        if not lists or len({len(a) for a in lists}) != 1:
            raise ValueError(
                f"torch_tpu.kernels: {self.name}.on_devices takes lists of tensors, one per "
                "device, all of one length"
            )
        count = len(lists[0])
        # The spec of one device's call: each list stands where its tensor would.
        spec = _spec(
            tuple(a[0] if _is_tensor_list(a) else a for a in args),
            {k: v[0] if _is_tensor_list(v) else v for k, v in kwargs.items()},
        )
        avals = _avals([a[0] for a in lists], self.name)
        kernel = self._kernels.get((spec, avals, count))
        if kernel is None:
            bound = self._bound(spec)
            kernel = _lowering.lower_on_devices(bound, self.name, avals, self.axis_name, count)
            self._register(kernel)
            self._kernels[(spec, avals, count)] = kernel
        from .. import _C

        inputs = [[a[r].reshape(1, *a[r].shape) for a in lists] for r in range(count)]
        results = _C._run_jax_kernel_on_devices(kernel.key, inputs)
        outputs = [[t.reshape(t.shape[1:]) for t in device] for device in results]
        return [out[0] if len(out) == 1 else tuple(out) for out in outputs]

    # -- the op's implementations ------------------------------------------------------------

    def _run(self, inputs: list[torch.Tensor], spec: str) -> list[torch.Tensor]:
        device = _device_of(inputs, self.name)
        self.runs += 1
        if device.type == "tpu":
            kernel = self._kernel(inputs, spec)
            return torch.ops.torch_tpu.jax_call(inputs, kernel.key)
        if device.type == "cpu":
            return self._run_with_jax(inputs, spec)
        raise NotImplementedError(
            f"torch_tpu.kernels: {self.name} runs on tpu and cpu tensors, not on {device.type}"
        )

    def _fake(self, inputs: list[torch.Tensor], spec: str) -> list[torch.Tensor]:
        device = _device_of(inputs, self.name)
        jax = _lowering.import_jax()
        specs = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in _avals(inputs, self.name)]
        with jax.enable_x64(True):
            outs = _output_leaves(jax.eval_shape(self._bound(spec), *specs), self.name)
        return [
            torch.empty(tuple(out.shape), dtype=_lowering.torch_dtype(out.dtype), device=device)
            for out in outs
        ]

    def _run_with_jax(self, inputs: list[torch.Tensor], spec: str) -> list[torch.Tensor]:
        jax = _lowering.import_jax()
        arrays = [jax.dlpack.from_dlpack(t.detach().contiguous()) for t in inputs]
        with jax.enable_x64(True):
            outs = _output_leaves(jax.jit(self._bound(spec))(*arrays), self.name)
        return [torch.from_dlpack(out).clone() for out in outs]

    def _kernel(self, inputs: list[torch.Tensor], spec: str) -> _lowering.LoweredKernel:
        avals = _avals(inputs, self.name)
        found = self._kernels.get((spec, avals))
        if found is None:
            found = _lowering.lower(self._bound(spec), self.name, avals)
            self._register(found)
            self._kernels[(spec, avals)] = found
        return found

    @staticmethod
    def _register(kernel: _lowering.LoweredKernel) -> None:
        from .. import _C

        _C._register_jax_kernel(
            kernel.key, kernel.functions, kernel.entry, kernel.params, kernel.results
        )

    @functools.cache  # noqa: B019 (ops live as long as their library)
    def _bound(self, spec: str) -> Callable[..., Any]:
        """fn as a function of its tensor arguments alone, its static arguments filled in."""

        def bound(*arrays: Any) -> Any:
            args, kwargs = _arguments(spec, arrays)
            return _as_output(self.fn(*args, **kwargs), self.name)

        return bound

    def _autograd_backward(self, ctx: Any, grads: Sequence[torch.Tensor | None]) -> Any:
        inputs = list(ctx.saved_tensors)
        cotangents = [
            g if g is not None else torch.zeros(shape, dtype=dtype, device=inputs[0].device)
            for g, (shape, dtype) in zip(grads, ctx.output_meta, strict=True)
        ]
        spec = repr((ctx.spec, len(inputs)))
        gradients = list(self._backward._op(inputs + cotangents, spec))
        differentiable = [_is_differentiable(t.dtype) for t in inputs]
        return [gradients.pop(0) if d else None for d in differentiable], None


class _BackwardOp(JaxOp):
    """The gradients of a JaxOp: its spec is (the forward's spec, how many inputs it had)."""

    @functools.cache  # noqa: B019
    def _bound(self, spec: str) -> Callable[..., Any]:
        return lambda *arrays: _as_output(self.fn(*arrays, spec=spec), self.name)


def _save_for_backward(ctx: Any, inputs: tuple[Any, ...], output: Sequence[torch.Tensor]) -> None:
    tensors, spec = inputs
    ctx.save_for_backward(*tensors)
    ctx.spec = spec
    ctx.output_meta = [(tuple(o.shape), o.dtype) for o in output]


def _backward_kernel(
    fn: Callable[..., Any], backward: Callable[..., Any] | None, *arrays: Any, spec: str
) -> tuple[Any, ...]:
    """The gradients of fn's floating tensor arguments (jax.vjp, or the user's backward)."""
    import jax
    import numpy as np

    forward_spec, count = ast.literal_eval(spec)
    primals, cotangents = arrays[:count], arrays[count:]

    def call(f: Callable[..., Any], values: Sequence[Any], *extra: Any) -> Any:
        args, kwargs = _arguments(forward_spec, values)
        return f(*extra, *args, **kwargs)

    wanted = [i for i, p in enumerate(primals) if _is_differentiable(p.dtype)]
    if backward is not None:
        grads = call(backward, primals, tuple(cotangents))
        grads = [grads] if not isinstance(grads, (tuple, list)) else list(grads)
        return tuple(
            jax.numpy.zeros_like(primals[i]) if grads[i] is None else grads[i] for i in wanted
        )

    def of_differentiable(*values: Any) -> Any:
        merged = list(primals)
        for i, value in zip(wanted, values, strict=True):
            merged[i] = value
        return call(fn, merged)

    outputs, pullback = jax.vjp(of_differentiable, *(primals[i] for i in wanted))
    leaves, tree = jax.tree_util.tree_flatten(outputs)
    cts = [
        c if _is_differentiable(leaf.dtype) else np.zeros(leaf.shape, jax.dtypes.float0)
        for c, leaf in zip(cotangents, leaves, strict=True)
    ]
    return tuple(pullback(jax.tree_util.tree_unflatten(tree, cts)))


def _is_tensor_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and isinstance(value[0], torch.Tensor)


def _plain_eager_call(tensors: Sequence[torch.Tensor]) -> bool:
    """A call the custom op's layers (autograd, dispatch modes, tracing) would only pass
    through: plain tpu tensors, nothing to record for autograd, no mode or tracer active. It
    runs the implementation directly (a cached call costs a third as much)."""
    if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0:
        return False
    grad = torch.is_grad_enabled()
    return all(
        type(t) is torch.Tensor and t.device.type == "tpu" and not (grad and t.requires_grad)
        for t in tensors
    )


def _is_differentiable(dtype: Any) -> bool:
    name = str(dtype).removeprefix("torch.")
    return name.startswith(("float", "bfloat", "complex"))


def _spec(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    if not kwargs and all(isinstance(a, torch.Tensor) for a in args):
        return _tensors_only_spec(len(args))

    def slot(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return _TENSOR
        _check_literal(value)
        return value

    return repr((tuple(slot(a) for a in args), {k: slot(v) for k, v in sorted(kwargs.items())}))


@functools.cache
def _tensors_only_spec(count: int) -> str:
    """The spec of a call whose arguments are `count` tensors (the common call), built once."""
    return repr(((_TENSOR,) * count, {}))


def _arguments(spec: str, arrays: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
    """A call's arguments back from its spec, the tensors' places filled with `arrays`."""
    args_template, kwargs_template = ast.literal_eval(spec)
    it = iter(arrays)
    args = [next(it) if a == _TENSOR else a for a in args_template]
    kwargs = {k: next(it) if v == _TENSOR else v for k, v in kwargs_template.items()}
    return args, kwargs


def _check_literal(value: Any) -> None:
    if isinstance(value, (tuple, list)):
        for item in value:
            _check_literal(item)
    elif isinstance(value, dict):
        for item in itertools.chain(value.keys(), value.values()):
            _check_literal(item)
    elif not (value is None or isinstance(value, (bool, int, float, complex, str, bytes))):
        raise TypeError(
            "torch_tpu.kernels: a jax op's arguments are tensors or literals (numbers, strings, "
            f"None, and tuples/lists/dicts of them), got {type(value).__name__}"
        )


def _avals(inputs: Sequence[torch.Tensor], name: str) -> tuple[tuple[tuple[int, ...], str], ...]:
    try:
        return tuple((tuple(t.shape), _lowering.jax_dtype_name(t.dtype)) for t in inputs)
    except TypeError as error:  # symbolic sizes (dynamic=True) have no fixed kernel
        raise KernelError(
            f"torch_tpu.kernels: {name} needs static shapes; compile without dynamic=True"
        ) from error


def _device_of(inputs: Sequence[torch.Tensor], name: str) -> torch.device:
    if not inputs:
        raise ValueError(f"torch_tpu.kernels: {name} needs at least one tensor argument")
    devices = {t.device for t in inputs}
    if len(devices) > 1:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found {sorted(map(str, devices))}"
            f" (when calling {name})"
        )
    return inputs[0].device


def _as_output(value: Any, name: str) -> Any:
    """An array, or a tuple of arrays (the only output structures an op returns)."""
    if isinstance(value, (tuple, list)):
        return tuple(value)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return value
    raise TypeError(
        f"torch_tpu.kernels: {name} must return an array or a tuple/list of arrays, "
        f"got {type(value).__name__}"
    )


def _output_leaves(value: Any, name: str) -> list[Any]:
    leaves = list(value) if isinstance(value, tuple) else [value]
    for leaf in leaves:
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise TypeError(f"torch_tpu.kernels: {name} returned a {type(leaf).__name__}")
    if not leaves:
        raise TypeError(f"torch_tpu.kernels: {name} returned no arrays")
    return leaves


def _default_name(fn: Callable[..., Any]) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", getattr(fn, "__name__", "kernel"))
    return f"torch_tpu_jax::{base}_{next(_names)}"


@overload
def jax_op(fn: Callable[..., Any], /) -> JaxOp: ...
@overload
def jax_op(
    fn: None = None, /, *, name: str | None = None, backward: Callable[..., Any] | None = None
) -> Callable[[Callable[..., Any]], JaxOp]: ...
@overload
def jax_op(
    fn: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    backward: Callable[..., Any] | None = None,
) -> JaxOp: ...


def jax_op(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    backward: Callable[..., Any] | None = None,
    axis_name: str | None = None,
) -> JaxOp | Callable[[Callable[..., Any]], JaxOp]:
    """Registers a jax function as a PyTorch op (see the module's docstring)."""
    if fn is None:
        return lambda f: JaxOp(f, name, backward, axis_name=axis_name)
    return JaxOp(fn, name, backward, axis_name=axis_name)
