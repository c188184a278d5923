"""vLLM's piecewise compilation, compiled for ``tpu``.

With ``TORCH_TPU_VLLM_COMPILE=1`` the platform turns on vLLM's own compilation path
(``CompilationMode.VLLM_COMPILE``, no CUDA graphs): Dynamo traces the model once with the
token count symbolic, vLLM splits the graph at its attention ops (one opaque custom op per
layer, ``vllm::unified_attention_with_output``) and hands every piece between them to
:class:`TpuCompiler`, found through ``TpuPlatform.get_compile_backend``.

A piece runs as one fused executable per input signature (``torch_tpu._C._GraphReplay``):
recorded on its first call at a token bucket, replayed after with no op dispatched again. The
runner pads every step's token count to a bucket (padding.py), so a piece meets a handful of
signatures and the warm-up (warm_up.py) records them all. The attention between the pieces
replays its own graph (attention.py), so a step dispatches no op of the model on the host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from vllm.compilation.compiler_interface import CompilerInterface

from torch_tpu import _C

# Allocations that a piece returns for the attention op to fill: a tensor without contents
# is made beside a fused graph, not in it, and a graph that returns one is not replayable.
# Zero-filled, it is one of the graph's results (a fill costs next to nothing).
_ZEROED = {
    torch.empty: torch.zeros,
    torch.empty_like: torch.zeros_like,
    "new_empty": "new_zeros",
}


def zero_fill_allocations(graph: fx.GraphModule) -> int:
    """Rewrites the piece's empty allocations as zero-filled ones; returns how many."""
    count = 0
    for node in graph.graph.nodes:
        if node.op in ("call_function", "call_method") and node.target in _ZEROED:
            node.target = _ZEROED[node.target]
            count += 1
    if count:
        graph.recompile()
    return count


def _attention_ops(graph: fx.GraphModule) -> list[str]:
    return [
        str(node.target)
        for node in graph.graph.nodes
        if node.op == "call_function" and "attention" in str(node.target)
    ]


class _ReplaysBySize:
    """One graph replay per value of the piece's size arguments (the token bucket): a replay
    keeps a few signatures, least recently used out, and one evicted and recorded again is a
    new graph to the pending graph it joins, whose executable then compiles again. Kept apart,
    each replay holds its one signature for good."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.by_size: dict[tuple[int, ...], Any] = {}

    def __call__(self, args: tuple[Any, ...]) -> Any:
        size = tuple(a for a in args if type(a) is int)
        replay = self.by_size.get(size)
        if replay is None:
            replay = self.by_size[size] = _C._GraphReplay(self.fn)
        return replay(*args)


def _returns_sequence(graph: fx.GraphModule) -> bool:
    output = graph.graph.output_node()
    return isinstance(output.args[0], (tuple, list))


class TpuCompiler(CompilerInterface):
    """vLLM's compiler interface for tpu: each piece becomes a replayed fused executable."""

    name = "torch_tpu"

    def compile(
        self,
        graph: fx.GraphModule,
        example_inputs: list[Any],
        compiler_config: dict[str, Any],
        compile_range: Any,
        key: str | None = None,
    ) -> tuple[Callable[..., Any] | None, Any | None]:
        inside = _attention_ops(graph)
        if inside:
            # An attention op inside a piece would read the step's metadata (held by vLLM's
            # forward context, not passed in) from the step it was recorded at.
            raise RuntimeError(
                f"torch_tpu: a compiled piece contains attention ({inside}); the tpu platform "
                "needs vLLM's splitting_ops to split the graph at every attention op"
            )
        zero_fill_allocations(graph)
        if _returns_sequence(graph):
            fn: Callable[..., Any] = graph
        else:  # a replay rebuilds a tuple of results: one result goes in and out of one
            fn = lambda *args: (graph(*args),)  # noqa: E731
        replays = _ReplaysBySize(fn)
        single = not _returns_sequence(graph)

        def run(*args: Any) -> Any:
            out = replays(args)
            return out[0] if single else out

        run.replays = replays  # type: ignore[attr-defined]
        # No handle: the executables persist in torch_tpu's own compile cache.
        return run, None
