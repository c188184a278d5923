"""Bounded dynamic shapes for ``torch.compile(backend="tpu")`` by padding to buckets.

When Dynamo hands over a graph with symbolic sizes (``dynamic=True``, ``mark_dynamic`` or
automatic dynamism after a shape change), every symbol's actual value ``n`` is rounded up to a
bucket (the next power of two, capped by the symbol's declared maximum), the inputs are padded
with zeros to the bucket's sizes, and the graph runs at the padded shapes, so every length in a
bucket reuses one executable.

Results stay exact because padding never reaches a real position: a boolean validity mask is
carried (on the host) for every value. Ops that compute each position from the same position of
their inputs (pointwise ops) and ops that only move positions (views, permutes, cats) just carry
the mask along. Ops that mix positions (reductions, softmax, matrix products, losses) first
overwrite the padded positions of their inputs with the op's neutral element (0 for a sum,
-inf for a max or a softmax, ``ignore_index`` for a loss target), and ``mean`` divides by the
number of real elements. Outputs are cut back to their actual sizes. A graph that uses an op
outside these tables with a padded input runs at its exact shapes instead (one executable per
shape, still exact).

Masks depend only on the actual sizes, so they are computed once per size combination and kept
on the device in a small LRU; the executable never sees ``n`` as a constant.
"""

from __future__ import annotations

import functools
import math
import operator
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from . import _C

aten = torch.ops.aten
Mask = torch.Tensor | None

# Size combinations whose masks stay cached on the device.
MASK_CACHE_SIZE = 16
# Forward calls whose saved-tensor masks wait for their backward.
SAVED_MASKS_SIZE = 256


NO_SYMBOLS = "no symbolic sizes"


class Unsupported(Exception):
    """The graph cannot run padded; it runs at exact shapes."""


def _name(target: Any) -> str:
    schema = getattr(target, "_schema", None)
    return schema.name.removeprefix("aten::") if schema is not None else ""


# How each op treats padding, in compiled graphs: the one table both bucketing paths read
# (csrc/dispatch/op_padding.cc). {op: kind} for the ops with a rule here.
OP_PADDING: dict[str, str] = {
    op: compiled for op, (_eager, compiled) in _C._op_padding().items() if compiled != "none"
}


def _ops(*kinds: str) -> set[str]:
    return {op for op, kind in OP_PADDING.items() if kind in kinds}


POINTWISE = _ops("pointwise")
LAYOUT = _ops("layout")
FACTORIES = _ops("fill")
# Reductions: padded positions read as the reduction's neutral element (_neutral).
REDUCTIONS = _ops("reduce")
MATMULS = _ops("contract")
# Ops with a rule of their own in _Run.
OTHER_RULES = _ops("own", "scan")


@functools.cache
def _neutral(op: str, dtype: torch.dtype) -> int | float | bool:
    """What padding reads as for `op` (a reduction or scan) over `dtype` to ignore it."""
    value = _C._padding_neutral(op, dtype)
    if value is None:
        raise Unsupported(f"{op} of {dtype} has no neutral element")
    return value


@dataclass(frozen=True)
class PadInt:
    """A size: its value in the padded run and its actual value."""

    padded: int
    actual: int


def _is_symint_type(arg_type: Any) -> bool:
    # Python schemas spell SymInt as int; a Scalar ("number") is arithmetic, not a size.
    return "number" not in str(arg_type)


def _free_symbols(value: Any) -> set[sympy.Symbol]:
    if isinstance(value, torch.SymInt):
        return set(value.node.expr.free_symbols)
    if isinstance(value, torch.Tensor):
        found: set[sympy.Symbol] = set()
        for size in value.shape:
            found |= _free_symbols(size)
        return found
    if isinstance(value, (list, tuple)):
        found = set()
        for item in value:
            found |= _free_symbols(item)
        return found
    return set()


def _node_inputs(node: torch.fx.Node) -> list[torch.fx.Node]:
    return list(node.all_input_nodes)


def check_bucketable(gm: torch.fx.GraphModule) -> str | None:
    """None if every op that touches a symbolic size has a padding rule, else the reason."""
    symbolic = False
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            value = node.meta.get("val")
            if value is None:
                return f"placeholder {node.name} has no metadata"
            if _free_symbols(value):
                symbolic = True
            continue
        if node.op != "call_function":
            continue
        value = node.meta.get("val")
        if isinstance(value, torch.SymInt) or node.target is operator.getitem:
            continue
        touches = bool(_free_symbols(value)) or any(
            _free_symbols(n.meta.get("val")) for n in _node_inputs(node)
        )
        name = _name(node.target)
        if touches and name not in OP_PADDING:
            return f"{node.target} has no padding rule"
    return None if symbolic else NO_SYMBOLS


def _finite_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None  # unbounded (sympy's or torch's infinity)


def _bucket(actual: int, upper: int | None) -> int:
    """The bucket of a symbolic size by the one rule both paths share (bucket_rule.h)."""
    return _C._compiled_bucket_size(actual, upper)


class _Run:
    """One padded execution of a graph: values, masks and the sizes of this call."""

    def __init__(
        self,
        owner: BucketedGraph,
        padded: dict[sympy.Symbol, int],
        actual: dict[sympy.Symbol, int],
        device_masks: dict[str, torch.Tensor],
    ) -> None:
        self.owner = owner
        self.padded = padded
        self.actual = actual
        self.masks: dict[str, Any] = {}
        self.device_masks = device_masks
        self.values: dict[str, Any] = {}
        self.key: tuple[int, ...] = ()

    # Sizes ------------------------------------------------------------------------------------
    def eval_size(self, size: Any, padded: bool) -> int:
        if isinstance(size, int):
            return size
        table = self.padded if padded else self.actual
        return int(size.node.expr.xreplace({s: sympy.Integer(v) for s, v in table.items()}))

    def shape(self, value: torch.Tensor, padded: bool) -> list[int]:
        return [self.eval_size(size, padded) for size in value.shape]

    def fresh_mask(self, meta: torch.Tensor) -> Mask:
        """The mask of a new tensor whose symbolic dims are bare symbols. Whether a value has a
        mask depends only on its symbolic shape, never on the sizes of a call, so that every
        size in a bucket records the same graph."""
        if not _free_symbols(meta):
            return None
        padded = self.shape(meta, True)
        actual = self.shape(meta, False)
        mask = torch.ones(padded, dtype=torch.bool)
        for dim, size in enumerate(meta.shape):
            if not _free_symbols(size):
                continue
            if not isinstance(size.node.expr, sympy.Symbol):
                raise Unsupported(f"a size {size} that is not a bare symbol")
            mask.narrow(dim, actual[dim], padded[dim] - actual[dim]).fill_(False)
        return mask

    # Arguments --------------------------------------------------------------------------------
    def resolve(self, arg: Any, padded: bool) -> Any:
        if isinstance(arg, torch.fx.Node):
            value = self.values[arg.name]
            if isinstance(value, PadInt):
                return value.padded if padded else value.actual
            return value
        if isinstance(arg, (list, tuple)):
            return type(arg)(self.resolve(item, padded) for item in arg)
        return arg

    def mask_of(self, arg: Any) -> Any:
        if isinstance(arg, torch.fx.Node):
            return self.masks.get(arg.name)
        if isinstance(arg, (list, tuple)):
            return [self.mask_of(item) for item in arg]
        return None

    def call_args(self, node: torch.fx.Node) -> tuple[list[Any], dict[str, Any]]:
        schema = node.target._schema
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        # SymInt arguments (shapes) take padded sizes; Scalars (arithmetic) take actual ones.
        # arange's Scalar end is a length, so it is padded too.
        shape_like = _name(node.target) in FACTORIES
        by_name = {a.name: a for a in schema.arguments}
        for i, arg in enumerate(node.args):
            padded = shape_like or _is_symint_type(schema.arguments[i].type)
            args.append(self.resolve(arg, padded))
        for key, arg in node.kwargs.items():
            padded = shape_like or (key in by_name and _is_symint_type(by_name[key].type))
            kwargs[key] = self.resolve(arg, padded)
        return args, kwargs

    def upload(self, key: str, make: Callable[[], torch.Tensor], device: torch.device) -> Any:
        """A host tensor that depends only on the sizes, uploaded once per size combination."""
        found = self.device_masks.get(key)
        if found is None:
            found = make().to(device)
            self.device_masks[key] = found
        return found

    def fill(self, node: torch.fx.Node, index: int, value: Any, fill: float) -> Any:
        """`value` with its padded positions set to `fill`."""
        mask = self.mask_of(node.args[index])
        if mask is None or not isinstance(value, torch.Tensor):
            return value
        shape = value.shape
        invalid = self.upload(
            f"{node.name}:{index}", lambda: ~torch.broadcast_to(mask, shape), value.device
        )
        return value.masked_fill(invalid, fill)

    # Ops --------------------------------------------------------------------------------------
    def run_node(self, node: torch.fx.Node) -> tuple[Any, Any]:
        meta = node.meta.get("val")
        if isinstance(meta, torch.SymInt):
            return PadInt(self.eval_size(meta, True), self.eval_size(meta, False)), None
        if node.target is operator.getitem:
            source, index = node.args
            value = self.values[source.name][index]
            masks = self.masks.get(source.name)
            return value, (masks[index] if masks is not None else None)
        name = _name(node.target)
        args, kwargs = self.call_args(node)
        in_masks = [self.mask_of(a) for a in node.args]
        any_mask = any(m is not None for m in _flatten(in_masks))

        if name in FACTORIES:
            return node.target(*args, **kwargs), self.fresh_mask(meta)
        if not any_mask:
            out = node.target(*args, **kwargs)
            return out, self.fresh_output_masks(out, meta)
        if name in POINTWISE:
            out = node.target(*args, **kwargs)
            return out, self.pointwise_masks(node, out)
        if name in ("select", "slice"):
            return self.positional(node, name, args, meta)
        if name in ("select_backward", "slice_backward"):
            return self.positional_backward(node, name, args, meta)
        if name in LAYOUT:
            dim_arg = {"split": 2, "split_with_sizes": 2, "unbind": 1}.get(name)
            if dim_arg is not None:
                dim = args[dim_arg] if len(args) > dim_arg else 0
                if _free_symbols(node.args[0].meta["val"].shape[dim]):
                    raise Unsupported(f"{name} along a padded dimension")
            out = node.target(*args, **kwargs)
            mask = self.layout_masks(node, args, kwargs)
            if name in ("view", "_unsafe_view", "reshape"):
                self.check_view(meta, mask)
            return out, mask
        return self.mixing(node, name, args, kwargs, in_masks, meta)

    def fresh_output_masks(self, out: Any, meta: Any) -> Any:
        if isinstance(out, torch.Tensor) and isinstance(meta, torch.Tensor):
            return self.fresh_mask(meta)
        if isinstance(out, (list, tuple)) and isinstance(meta, (list, tuple)):
            return [self.fresh_output_masks(o, m) for o, m in zip(out, meta, strict=True)]
        return None

    def pointwise_masks(self, node: torch.fx.Node, out: Any) -> Any:
        combined: Mask = None
        for mask in _flatten([self.mask_of(a) for a in node.args]):
            if mask is not None:
                combined = mask if combined is None else combined & mask
        if isinstance(out, (list, tuple)):
            return [_fit(combined, o) for o in out]
        return _fit(combined, out)

    def check_view(self, meta: torch.Tensor, mask: torch.Tensor) -> None:
        """A view that splits a padded dimension keeps real elements where the exact tensor has
        them only if its mask is the product of prefix masks; merging dimensions always does."""
        bare = all(
            not isinstance(size, torch.SymInt) or isinstance(size.node.expr, sympy.Symbol)
            for size in meta.shape
        )
        if not bare:
            return
        expected = self.fresh_mask(meta)
        if expected is None:
            expected = torch.ones(self.shape(meta, True), dtype=torch.bool)
        if not torch.equal(torch.broadcast_to(mask, expected.shape), expected):
            raise Unsupported("a view that splits a padded dimension")

    def positional(
        self, node: torch.fx.Node, name: str, args: list[Any], meta: torch.Tensor
    ) -> tuple[Any, Any]:
        """select and slice along a padded dimension: positions (negative ones count from the
        actual end) are taken at runtime by index_select, so no position is compiled in."""
        source = node.args[0].meta["val"]
        x = args[0]
        dim = args[1] % x.dim()
        size = source.shape[dim]
        mask = self.mask_of(node.args[0])
        full = torch.broadcast_to(mask, x.shape) if mask is not None else None
        if not _free_symbols(size):
            out = node.target(*args)
            return out, self.layout_masks(node, args, {})
        if not isinstance(size.node.expr, sympy.Symbol):
            raise Unsupported(f"{name} along a merged padded dimension")
        size_padded, size_actual = self.eval_size(size, True), self.eval_size(size, False)
        if name == "select":
            index = self.resolve(node.args[2], False)
            index = index + size_actual if index < 0 else index
            picked = self.upload(f"{node.name}:index", lambda: torch.tensor([index]), x.device)
            out = x.index_select(dim, picked).squeeze(dim)
            return out, None if full is None else _fit(full.select(dim, index), out)
        raw = [node.args[i] if len(node.args) > i else d for i, d in ((2, None), (3, None))]
        step = node.args[4] if len(node.args) > 4 else 1
        start_p, end_p, _ = slice(*(self.resolve(r, True) for r in raw)).indices(size_padded)
        start_a, end_a, _ = slice(*(self.resolve(r, False) for r in raw)).indices(size_actual)
        length_p = len(range(start_p, end_p, step))
        length_a = len(range(start_a, end_a, step))
        positions = [min(start_a + k * step, size_padded - 1) for k in range(length_p)]
        picked = self.upload(f"{node.name}:index", lambda: torch.tensor(positions), x.device)
        out = x.index_select(dim, picked)
        real = torch.arange(length_p) < length_a
        shape = [1] * out.dim()
        shape[dim] = length_p
        out_mask = real.reshape(shape)
        if full is not None:
            out_mask = out_mask & full.index_select(dim, torch.tensor(positions))
        return out, _fit(out_mask, out)

    def positional_backward(
        self, node: torch.fx.Node, name: str, args: list[Any], meta: torch.Tensor
    ) -> tuple[Any, Any]:
        """The gradient of select/slice: the incoming gradient added at runtime positions into
        zeros of the input's (padded) shape."""
        grad = self.fill(node, 0, args[0], 0.0)
        dim = args[2] % len(args[1])
        size = meta.shape[dim]
        out_mask = self.fresh_mask(meta)
        if not _free_symbols(size):
            return node.target(grad, *args[1:]), out_mask
        if not isinstance(size.node.expr, sympy.Symbol):
            raise Unsupported(f"{name} along a merged padded dimension")
        size_padded, size_actual = self.eval_size(size, True), self.eval_size(size, False)
        zeros = grad.new_zeros(args[1])
        if name == "select_backward":
            index = self.resolve(node.args[3], False)
            index = index + size_actual if index < 0 else index
            picked = self.upload(f"{node.name}:index", lambda: torch.tensor([index]), grad.device)
            return zeros.index_add(dim, picked, grad.unsqueeze(dim)), out_mask
        raw = [node.args[i] if len(node.args) > i else None for i in (3, 4)]
        step = node.args[5] if len(node.args) > 5 else 1
        start_a, _, _ = slice(*(self.resolve(r, False) for r in raw)).indices(size_actual)
        length_p = grad.shape[dim]
        # Padded gradient positions carry zeros (filled above), added anywhere in range.
        positions = [min(start_a + k * step, size_padded - 1) for k in range(length_p)]
        picked = self.upload(f"{node.name}:index", lambda: torch.tensor(positions), grad.device)
        return zeros.index_add(dim, picked, grad), out_mask

    def layout_masks(self, node: torch.fx.Node, args: list[Any], kwargs: dict[str, Any]) -> Any:
        def full(arg: Any, value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                mask = self.mask_of(arg)
                if mask is None:
                    return torch.ones(value.shape, dtype=torch.bool)
                return torch.broadcast_to(mask, value.shape).contiguous()
            if isinstance(value, (list, tuple)):
                return [full(a, v) for a, v in zip(arg, value, strict=True)]
            return value

        mask_args = [full(a, v) for a, v in zip(node.args, args, strict=False)]
        return node.target(*mask_args, **kwargs)

    def mixing(
        self,
        node: torch.fx.Node,
        name: str,
        args: list[Any],
        kwargs: dict[str, Any],
        in_masks: list[Any],
        meta: Any,
    ) -> tuple[Any, Any]:
        target = node.target
        if name in REDUCTIONS:
            filled = [self.fill(node, 0, args[0], _neutral(name, args[0].dtype)), *args[1:]]
            counts = self.real_counts(node, in_masks[0], args, kwargs)
            if name == "mean":
                # The sum over real positions divided by their number, not the padded one.
                total = aten.sum.default if len(args) == 1 else aten.sum.dim_IntList
                summed = total(*filled, **kwargs)
                count = self.upload(
                    f"{node.name}:count", lambda: counts.clamp_min(1), summed.device
                )
                return summed / count.to(summed.dtype), _fit(counts > 0, summed)
            out = target(*filled, **kwargs)
            return out, _fit(counts > 0, out)
        if name in ("_softmax", "_log_softmax"):
            out = target(self.fill(node, 0, args[0], -math.inf), *args[1:], **kwargs)
            return out, in_masks[0]
        if name in ("_softmax_backward_data", "_log_softmax_backward_data", "cumsum"):
            filled = [self.fill(node, i, a, 0.0) if i < 2 else a for i, a in enumerate(args)]
            if name == "cumsum":
                filled = [self.fill(node, 0, args[0], _neutral(name, args[0].dtype))] + args[1:]
            out = target(*filled, **kwargs)
            return out, self.pointwise_masks(node, out)
        if name in MATMULS:
            operands = {"mm": (0, 1), "bmm": (0, 1), "addmm": (1, 2), "baddbmm": (1, 2)}[name]
            filled = [
                self.fill(node, i, a, 0.0) if i in operands else a for i, a in enumerate(args)
            ]
            out = target(*filled, **kwargs)
            a, b = (self.mask_of(node.args[i]) for i in operands)
            shape_a, shape_b = (args[i].shape for i in operands)
            ones_a = torch.ones(shape_a) if a is None else torch.broadcast_to(a, shape_a).float()
            ones_b = torch.ones(shape_b) if b is None else torch.broadcast_to(b, shape_b).float()
            mask = torch.matmul(ones_a, ones_b) > 0
            if name in ("addmm", "baddbmm") and in_masks[0] is not None:
                mask = mask & in_masks[0]
            return out, _fit(mask, out)
        if name == "embedding":
            out = target(*args, **kwargs)
            index_mask = in_masks[1]
            return out, None if index_mask is None else index_mask.unsqueeze(-1)
        if name == "embedding_dense_backward":
            filled = [self.fill(node, 0, args[0], 0.0), self.fill(node, 1, args[1], 0)] + args[2:]
            return target(*filled, **kwargs), None
        if name in ("nll_loss_forward", "nll_loss_backward"):
            target_index = 1 if name == "nll_loss_forward" else 2
            ignore = args[target_index + 3]
            filled = list(args)
            filled[target_index] = self.fill(node, target_index, args[target_index], ignore)
            if name == "nll_loss_forward":
                filled[0] = self.fill(node, 0, args[0], 0.0)
                out = target(*filled, **kwargs)
                reduction = args[3]
                mask = in_masks[1] if reduction == 0 else None
                return out, [mask, None]
            filled[1] = self.fill(node, 1, args[1], 0.0)
            filled[0] = self.fill(node, 0, args[0], 0.0)
            out = target(*filled, **kwargs)
            return out, in_masks[1]
        if name == "native_layer_norm":
            normalized = tuple(range(-len(args[1]), 0))
            if any(_free_symbols(meta[0].shape[d]) for d in normalized):
                raise Unsupported("layer norm over a symbolic dimension")
            out = target(*args, **kwargs)
            x_mask = in_masks[0]
            if x_mask is None:
                return out, [None, None, None]
            stat = torch.broadcast_to(x_mask, args[0].shape).any(dim=normalized, keepdim=True)
            return out, [_fit(x_mask, out[0]), _fit(stat, out[1]), _fit(stat, out[2])]
        if name == "native_layer_norm_backward":
            filled = list(args)
            for i in (0, 1, 3, 4):
                filled[i] = self.fill(node, i, args[i], 0.0)
            out = target(*filled, **kwargs)
            return out, [in_masks[1], None, None]
        raise Unsupported(f"{target} has no padding rule")

    def real_counts(
        self, node: torch.fx.Node, mask: Mask, args: list[Any], kwargs: dict[str, Any]
    ) -> torch.Tensor:
        """How many real elements each output position of a reduction gathers (host)."""
        value = args[0]
        full = torch.ones(value.shape) if mask is None else torch.broadcast_to(mask, value.shape)
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
            dims = list(range(value.dim()))
        if isinstance(dims, int):
            dims = [dims]
        if not dims:
            return full.float().sum()
        return full.float().sum(dim=list(dims), keepdim=keepdim)


def _flatten(items: Any) -> list[Any]:
    if isinstance(items, (list, tuple)):
        out: list[Any] = []
        for item in items:
            out.extend(_flatten(item))
        return out
    return [items]


def _fit(mask: Mask, value: Any) -> Mask:
    """`mask` broadcast to `value`. Never None for a given mask, even when every position is
    real: the recorded graph must not depend on the sizes of a call."""
    if mask is None or not isinstance(value, torch.Tensor):
        return None
    return torch.broadcast_to(mask, value.shape)


def _widen(tensor: torch.Tensor, shape: list[int]) -> torch.Tensor | None:
    """`tensor` viewed at the larger `shape` with its own strides, if its storage holds that
    view (a narrowed padded result does); the extra positions are padding, masked."""
    if list(tensor.shape) == shape:
        return tensor
    if any(size == 0 for size in shape):
        return None
    last = tensor.storage_offset() + sum(
        (size - 1) * stride for size, stride in zip(shape, tensor.stride(), strict=True)
    )
    if last >= tensor.untyped_storage().nbytes() // tensor.element_size():
        return None
    return tensor.as_strided(shape, tensor.stride(), tensor.storage_offset())


class BucketedGraph:
    """Runs an aten graph with symbolic sizes padded to buckets (see the module docstring)."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        exact_outputs: int | None = None,
        forward: BucketedGraph | None = None,
    ) -> None:
        self.gm = gm
        # Static-shape and exact-shape calls replay the recorded executable (see _C._GraphReplay).
        self.replay = _C._GraphReplay(gm)
        # Outputs from this index on are saved for the backward graph, not seen by the user:
        # they stay padded, and their masks stay here for the backward (by size combination).
        self.exact_outputs = exact_outputs if exact_outputs is not None else 1 << 30
        self.saved_masks: OrderedDict[tuple[int, ...], dict[str, Mask]] = OrderedDict()
        # The forward graph whose padded saved tensors this (backward) graph takes.
        self.forward = forward
        self.nodes = list(gm.graph.nodes)
        self.placeholders = [n for n in self.nodes if n.op == "placeholder"]
        self.output = next(n for n in self.nodes if n.op == "output")
        self.saved_names = {
            node.name
            for index, node in enumerate(self.output.args[0])
            if index >= self.exact_outputs and isinstance(node, torch.fx.Node)
        }
        self.reason: str | None = None
        reason = check_bucketable(gm)
        if reason is not None:
            self._give_up(reason)
        self.upper: dict[sympy.Symbol, int | None] = {}
        # Symbols that size a tensor somewhere in the graph are bucketed; the rest are integers
        # used as values (an offset, a vocabulary range: `x - start` with dynamic=True), which
        # padding would change, so they run at their actual value.
        self.size_symbols: set[sympy.Symbol] = {
            symbol
            for node in gm.graph.nodes
            for value in _flatten(node.meta.get("val"))
            if isinstance(value, torch.Tensor)
            for symbol in _free_symbols(value)
        }
        self.mask_cache: OrderedDict[tuple[int, ...], dict[str, Any]] = OrderedDict()
        if self.reason is None:
            self._read_bounds()

    def _read_bounds(self) -> None:
        for node in self.placeholders:
            for symbol in _free_symbols(node.meta["val"]):
                self.upper.setdefault(symbol, None)
        env = None
        for node in self.placeholders:
            value = node.meta["val"]
            sizes = value.shape if isinstance(value, torch.Tensor) else [value]
            for size in sizes:
                if isinstance(size, torch.SymInt):
                    env = size.node.shape_env
                    break
        if env is None:
            return
        for symbol in self.upper:
            bound = env.var_to_range.get(symbol)
            self.upper[symbol] = None if bound is None else _finite_int(bound.upper)

    def actual_sizes(self, args: Sequence[Any]) -> dict[sympy.Symbol, int]:
        sizes: dict[sympy.Symbol, int] = {}
        for node, arg in zip(self.placeholders, args, strict=True):
            value = node.meta["val"]
            if self._saved_padded(node):
                continue
            if isinstance(value, torch.SymInt):
                pairs = [(value, arg)]
            elif isinstance(value, torch.Tensor):
                pairs = list(zip(value.shape, arg.shape, strict=True))
            else:
                continue
            for size, actual in pairs:
                if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                    sizes[size.node.expr] = int(actual)
        missing = set(self.upper) - set(sizes)
        if missing:
            raise Unsupported(f"sizes {sorted(map(str, missing))} appear only in expressions")
        return sizes

    def _give_up(self, reason: str) -> None:
        self.reason = reason
        if reason == NO_SYMBOLS:
            return
        warnings.warn(
            f"torch_tpu: a compiled graph with dynamic sizes runs at exact shapes (one executable"
            f" per shape) because {reason}",
            stacklevel=2,
        )

    def _saved_padded(self, node: torch.fx.Node) -> bool:
        """Whether a placeholder may be a tensor the forward saved padded."""
        return (
            self.forward is not None
            and node.name in self.forward.saved_names
            and isinstance(node.meta["val"], torch.Tensor)
        )

    def __call__(self, args: list[Any]) -> Any:
        if self.reason is not None and self.forward is None:
            return self.replay(*args)
        try:
            actual = self.actual_sizes(args)
        except Unsupported as error:
            self._give_up(str(error))
            return self.replay(*args)
        key = tuple(actual[s] for s in sorted(actual, key=str))
        if self.reason is not None:
            return self._run_exact(args, actual, key)
        padded = {
            s: _bucket(n, self.upper.get(s)) if s in self.size_symbols else n
            for s, n in actual.items()
        }
        cached = self.mask_cache.get(key)
        if cached is not None:
            self.mask_cache.move_to_end(key)
        run = _Run(self, padded, actual, cached if cached is not None else {})
        run.key = key
        try:
            result = _C._run_recorded(lambda: self._execute(run, args))
        except Unsupported as error:
            self._give_up(str(error))
            return self._run_exact(args, actual, key)
        if cached is None:
            self.mask_cache[key] = run.device_masks
            while len(self.mask_cache) > MASK_CACHE_SIZE:
                self.mask_cache.popitem(last=False)
        if self.saved_names:
            self.saved_masks[key] = {name: run.masks.get(name) for name in self.saved_names}
            self.saved_masks.move_to_end(key)
            while len(self.saved_masks) > SAVED_MASKS_SIZE:
                self.saved_masks.popitem(last=False)
        return result

    def _run_exact(
        self, args: list[Any], actual: dict[sympy.Symbol, int], key: tuple[int, ...]
    ) -> Any:
        """Runs at exact shapes (one executable per shape). Tensors the forward saved padded
        are cut back to their exact shapes first."""
        run = _Run(self, actual, actual, {})
        exact = list(args)
        for i, node in enumerate(self.placeholders):
            if not self._saved_padded(node):
                continue
            shape = run.shape(node.meta["val"], False)
            if list(exact[i].shape) == shape:
                continue
            mask = self._saved_mask(node, key)
            assert mask is not None
            positions = torch.broadcast_to(mask, exact[i].shape).reshape(-1).nonzero()
            flat = exact[i].reshape(-1)
            exact[i] = flat.index_select(0, positions.squeeze(1).to(flat.device)).reshape(shape)
        return self.replay(*exact)

    def _saved_mask(self, node: torch.fx.Node, key: tuple[int, ...]) -> Mask:
        assert self.forward is not None
        masks = self.forward.saved_masks.get(key)
        if masks is None:
            raise RuntimeError(
                f"torch_tpu: the backward of a bucketed graph lost the padding of {node.name}"
                f" (more than {SAVED_MASKS_SIZE} forward calls of other sizes in between)"
            )
        return masks[node.name]

    def _execute(self, run: _Run, args: list[Any]) -> Any:
        args = list(args)
        for node, arg in zip(self.placeholders, args, strict=True):
            run.values[node.name], run.masks[node.name] = self._pad_input(run, node, arg)
        for node in self.nodes:
            if node.op != "call_function":
                continue
            value, mask = run.run_node(node)
            run.values[node.name] = value
            run.masks[node.name] = mask
        outputs = self.output.args[0]
        return [self._cut_output(run, node, i) for i, node in enumerate(outputs)]

    def _pad_input(self, run: _Run, node: torch.fx.Node, arg: Any) -> tuple[Any, Mask]:
        meta = node.meta["val"]
        if isinstance(meta, torch.SymInt):
            return PadInt(run.eval_size(meta, True), int(arg)), None
        if not isinstance(meta, torch.Tensor) or not _free_symbols(meta):
            return arg, None
        padded_shape = run.shape(meta, True)
        saved = self._saved_padded(node)
        widened = _widen(arg, padded_shape)
        if saved and widened is not None:
            # A tensor the forward saved padded; autograd may hand it back narrowed to its
            # actual sizes, a view of the same padded storage.
            return widened, self._saved_mask(node, run.key)
        mask = run.fresh_mask(meta)
        if widened is not None:
            return widened, mask
        pad: list[int] = []
        for dim in reversed(range(arg.dim())):
            pad += [0, padded_shape[dim] - arg.shape[dim]]
        # Padded on the host: a device pad would compile once per input shape.
        return torch.nn.functional.pad(arg.cpu(), pad).to(arg.device), mask

    def _cut_output(self, run: _Run, node: Any, index: int) -> Any:
        if not isinstance(node, torch.fx.Node):
            return node
        value = run.values[node.name]
        if isinstance(value, PadInt):
            return value.actual
        mask = run.masks.get(node.name)
        if not isinstance(value, torch.Tensor):
            return value
        meta = node.meta["val"]
        actual_shape = run.shape(meta, False)
        if list(value.shape) == actual_shape:
            return value
        if mask is None:
            mask = run.fresh_mask(meta)
        full = torch.broadcast_to(mask, value.shape)
        bare = all(
            not isinstance(size, torch.SymInt) or isinstance(size.node.expr, sympy.Symbol)
            for size in meta.shape
        )
        if bare:
            # A view of the padded result: nothing runs, nothing compiles per shape.
            cut = value
            for dim, size in enumerate(actual_shape):
                if cut.shape[dim] != size:
                    cut = cut.narrow(dim, 0, size)
        elif index >= self.exact_outputs:
            return value  # saved for the backward graph only, which takes it padded
        else:
            positions = run.upload(
                f"{node.name}:out", lambda: full.reshape(-1).nonzero().squeeze(1), value.device
            )
            cut = value.reshape(-1).index_select(0, positions).reshape(actual_shape)
        return cut


def bucketed_compiler(
    gm: torch.fx.GraphModule, pair: dict[str, BucketedGraph], forward: bool
) -> Callable[[list[Any]], Any]:
    """Compiles one graph of an AOTAutograd pair (`pair` links a backward to its forward)."""
    if forward:
        exact_outputs = None
        context = torch._guards.TracingContext.try_get()
        if context is not None and context.fw_metadata is not None:
            exact_outputs = context.fw_metadata.num_forward_returns
        graph = BucketedGraph(gm, exact_outputs)
        pair["forward"] = graph
    else:
        graph = BucketedGraph(gm, forward=pair.get("forward"))

    def run(args: list[Any]) -> Any:
        return graph(args)

    run._boxed_call = True  # type: ignore[attr-defined]
    run.bucketed_graph = graph  # type: ignore[attr-defined]
    return run
