"""Compiled graphs that hold collectives: ``torch.ops._c10d_functional`` ops (what DTensor
redistributes, SimpleFSDP's all-gathers and reduce-scatters, and functional collectives written
by hand become when traced) in a graph handed to ``backend="tpu"`` or to TorchTitan's whole-step
path.

A collective is not a kernel that records into a program: it runs through ``tpu_dist``. So a
graph is cut at its collectives: the runs of compute between them are compiled graphs (recorded
once, replayed, and joined into the pending graph like any other compiled graph), and each
collective runs eagerly between them on the engine ``tpu_dist`` chose:

- the host engine (the CPU plugin, and what the XLA engine does not take): the collective's
  inputs are materialized, which runs the pending graph before it as one execution, the values
  go through Gloo and come back as device buffers. A step costs one execution per stretch of
  compute that ends at a collective, plus the last stretch.
- the XLA engine (libtpu, the CUDA plugin): the collective is a program over every rank's
  device of its own; the compute before it runs first, as with the host engine.

Bucketing decides how many cuts there are: one all-gather of all parameters before the forward
and one reduce-scatter of all gradients after the backward leave three stretches (before the
all-gather, forward and backward, after the reduce-scatter). Putting the collectives inside
the program itself (``stablehlo.all_gather`` in the recorded module, compiled for every rank's
device) would leave one; see docs/design/distributed.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.fx.passes.split_module import split_module

from . import _C

_functional = torch.ops._c10d_functional


def _collective_ops() -> frozenset[Any]:
    names = (
        "all_gather_into_tensor",
        "all_gather_into_tensor_coalesced",
        "all_gather_into_tensor_out",
        "reduce_scatter_tensor",
        "reduce_scatter_tensor_coalesced",
        "all_reduce",
        "all_reduce_",
        "all_reduce_coalesced",
        "all_reduce_coalesced_",
        "all_to_all_single",
        "broadcast",
        "broadcast_",
        "wait_tensor",
    )
    ops = set()
    for name in names:
        packet = getattr(_functional, name, None)
        if packet is not None:
            ops.update(getattr(packet, overload) for overload in packet.overloads())
    return frozenset(ops)


COLLECTIVES = _collective_ops()


def is_collective(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target in COLLECTIVES


def has_collectives(gm: torch.fx.GraphModule) -> bool:
    return any(is_collective(node) for node in gm.graph.nodes)


class _Compiled(torch.nn.Module):
    """A stretch of compute, called as the FX module it replaces: one compiled graph."""

    def __init__(self, run: Callable[..., Any], single: bool) -> None:
        super().__init__()
        self.run = run
        self.single = single

    def forward(self, *args: Any) -> Any:
        out = self.run(*args)
        return out[0] if self.single else out


def _as_tuple(gm: torch.fx.GraphModule) -> bool:
    """Makes ``gm`` return a tuple (a compiled graph's results are a sequence); True where it
    returned one value."""
    output = next(node for node in reversed(gm.graph.nodes) if node.op == "output")
    result = output.args[0]
    if isinstance(result, (tuple, list)):
        return False
    output.args = ((result,),)
    gm.recompile()
    return True


def split_at_collectives(
    gm: torch.fx.GraphModule,
    compile_stretch: Callable[[torch.fx.GraphModule], Callable[..., Any]] | None = None,
) -> torch.fx.GraphModule:
    """``gm`` as stretches of compute, each compiled by ``compile_stretch`` (default: recorded
    once and replayed, ``torch_tpu._C._GraphReplay``), with its collectives run eagerly between
    them. Node order decides the stretches: a compute node goes with the stretch after the last
    collective before it, so the graph's own schedule (a bucketing pass's) is kept."""
    compile_stretch = compile_stretch or (lambda sub: _C._GraphReplay(sub))
    part: dict[torch.fx.Node, int] = {}
    index, collective = 0, False
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        if is_collective(node) != collective:
            index += 1
            collective = not collective
        part[node] = index
    collective_parts = {part[node] for node in part if is_collective(node)}
    split = split_module(gm, None, lambda node: part[node], keep_original_order=True)
    for name, sub in list(split.named_children()):
        if int(name.removeprefix("submod_")) in collective_parts:
            continue
        assert isinstance(sub, torch.fx.GraphModule)
        single = _as_tuple(sub)
        setattr(split, name, _Compiled(compile_stretch(sub), single))
    return split


def stretches(gm: torch.fx.GraphModule) -> list[str]:
    """What each child of a split graph is, in call order: ``"compute"`` or the collectives'
    op names (for tests and docs)."""
    kinds = []
    for node in gm.graph.nodes:
        if node.op != "call_module":
            continue
        sub = getattr(gm, node.target)
        if isinstance(sub, _Compiled):
            kinds.append("compute")
        else:
            names = [
                getattr(n.target, "_opname", str(n.target))
                for n in sub.graph.nodes
                if n.op == "call_function"
            ]
            kinds.append("+".join(dict.fromkeys(names)))
    return kinds
