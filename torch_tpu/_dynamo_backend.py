"""``torch.compile(model, backend="tpu")``.

Dynamo captures the graph and AOTAutograd splits it into forward and backward aten graphs.
Each graph is lowered by running torch_tpu's own eager kernels in the dispatcher's record mode:
its ops are recorded into one pending graph and emitted as a single StableHLO module, compiled
once and cached in memory and on disk (``TORCH_TPU_CACHE_DIR``). There is no second kernel
library, so compiled and eager numerics are the same. Later calls with the same input layouts
replay that executable without dispatching the graph's ops again (``_C._GraphReplay``;
``TORCH_TPU_GRAPH_REPLAY=0`` records every call).

A graph holding functional collectives (DTensor's redistributes, SimpleFSDP's all-gathers and
reduce-scatters) is cut at them: the stretches of compute between them are compiled as above,
the collectives run through ``tpu_dist`` between them (``torch_tpu._graph_collectives``).

The backend is found through the ``torch_dynamo_backends`` entry point, so importing torch does
not import Dynamo. Options (``torch.compile(..., options={...})``):

- ``"record": False`` runs each graph op by op in the current eager mode instead of as one
  executable (for debugging a compiled model).
- ``"buckets": False`` runs graphs with symbolic sizes at their exact shapes (one executable per
  shape) instead of padding each size up to a bucket (see ``torch_tpu._bucketing``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch._functorch.config as functorch_config
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition

from . import _C
from ._bucketing import bucketed_compiler
from ._graph_collectives import has_collectives, split_at_collectives


def _graph_compiler(
    record: bool, buckets: bool, pair: dict[str, Any], forward: bool
) -> Callable[[torch.fx.GraphModule, Sequence[Any]], Any]:
    def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        if not record:
            return make_boxed_func(gm)
        if has_collectives(gm):
            # Collectives run through tpu_dist between the compiled stretches around them.
            return make_boxed_func(split_at_collectives(gm))
        if buckets:
            return bucketed_compiler(gm, pair, forward)

        replay = _C._GraphReplay(gm)

        def run(args: list[Any]) -> Any:
            return replay(*args)

        run._boxed_call = True  # type: ignore[attr-defined]
        return run

    return compile_graph


def _optimizer_state_on_tpu() -> None:
    """Dynamo traces an optimizer's step with ``capturable=True`` semantics, and for CUDA and
    XPU parameters it also sets ``capturable`` on the groups before their state exists, so the
    step counters live on the device. For tpu parameters it does not: the counters stay CPU
    tensors, the traced step computes on them on the host, and the graph, which then takes
    CPU tensors, is recorded op by op on every call instead of replayed (an AdamW step of
    TinyGPT: 400 ops dispatched per call). Groups of tpu parameters get the same treatment as
    CUDA's."""
    from torch._dynamo.variables.optimizer import OptimizerVariable

    original = OptimizerVariable._set_capturable
    if getattr(original, "_torch_tpu", False):
        return

    def set_capturable(self: Any, tx: Any) -> None:
        optimizer = self.value
        for group in optimizer.param_groups:
            params = group.get("params", [])
            if (
                "capturable" in group
                and params
                and all(p.device.type == "tpu" and p not in optimizer.state for p in params)
            ):
                group["capturable"] = True
        original(self, tx)

    set_capturable._torch_tpu = True  # type: ignore[attr-defined]
    OptimizerVariable._set_capturable = set_capturable  # type: ignore[method-assign]


def _partition(joint: torch.fx.GraphModule, joint_inputs: Sequence[Any], **kwargs: Any) -> Any:
    """Splits the joint graph as inductor does (a min cut of the bytes the backward waits for),
    and also recomputes pointwise ops whose result the backward feeds to a matmul: the forward
    and backward are separate executables here, so everything saved between them is alive at
    once when the backward starts, next to all its gradients, where jax's one program frees
    each activation as its gradient is made. Recomputed in the backward, a GELU costs a fused
    elementwise pass; kept, it costs its activation's memory (bench/memory.py: the compiled
    MLP step's peak 10776 -> 10264 KiB, TinyGPT's 6159 -> 5903 KiB, at the same step time)."""
    with functorch_config.patch(ban_recompute_materialized_backward=False):
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)


def tpu_backend(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **options: Any
) -> Callable[..., Any]:
    # torch.compile(..., options={...}) arrives as one "options" keyword.
    options = {**(options.pop("options", None) or {}), **options}
    record = bool(options.pop("record", True))
    buckets = bool(options.pop("buckets", True))
    if options:
        raise ValueError(f"torch_tpu: unknown torch.compile options {sorted(options)}")
    pair: dict[str, Any] = {}  # the forward graph, for its backward
    return aot_autograd(
        fw_compiler=_graph_compiler(record, buckets, pair, forward=True),
        bw_compiler=_graph_compiler(record, buckets, pair, forward=False),
        # An optimizer step (a no-grad graph) writes the parameters inside its executable
        # instead of returning new values that a copy after the graph writes back: old and new
        # parameters are no longer live together (bench/memory.py: the compiled MLP step's
        # peak 13.1 -> 10.8 MB).
        keep_inference_input_mutations=True,
        partition_fn=_partition,
    )(gm, example_inputs)


_optimizer_state_on_tpu()
