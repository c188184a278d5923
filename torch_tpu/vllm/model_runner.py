"""vLLM's GPU model runner, run on ``tpu``.

The runner's bookkeeping (input batch, block tables, sampling, logits processing) is written in
PyTorch and runs on any device; only its CUDA stream and event calls name CUDA. While the runner
is built and steps, those names point at ``torch.tpu``'s streams and events.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from torch_tpu import _C


def _event(*args: Any, blocking: bool | None = None, **kwargs: Any) -> torch.Event:
    # torch.cuda.Event takes `blocking`; tpu events always block the host on synchronize().
    return torch.tpu.Event(*args, **kwargs)


_CUDA_NAMES = {
    "Stream": lambda: torch.tpu.Stream,
    "Event": lambda: _event,
    "current_stream": lambda: torch.tpu.current_stream,
    "default_stream": lambda: torch.tpu.default_stream,
    "stream": lambda: torch.tpu.stream,
    "set_stream": lambda: torch.tpu.set_stream,
    "synchronize": lambda: torch.tpu.synchronize,
}


@contextmanager
def cuda_names_on_tpu() -> Iterator[None]:
    """torch.cuda's stream and event names resolve to torch.tpu's inside the block."""
    saved = {name: getattr(torch.cuda, name) for name in _CUDA_NAMES}
    try:
        for name, target in _CUDA_NAMES.items():
            setattr(torch.cuda, name, target())
        yield
    finally:
        for name, previous in saved.items():
            setattr(torch.cuda, name, previous)


MIN_TOKENS = 8


def padded_token_count(tokens: int, limit: int) -> int:
    """The step's token count rounded up to a power of two (at least MIN_TOKENS, at most
    `limit`): a step's executable is compiled per distinct shape, and traffic makes every
    count."""
    return min(max(MIN_TOKENS, 1 << (tokens - 1).bit_length()), max(limit, tokens))


class TpuModelRunner(GPUModelRunner):
    def __init__(self, vllm_config: Any, device: torch.device) -> None:
        with cuda_names_on_tpu():
            super().__init__(vllm_config, device)

    def execute_model(self, *args: Any, **kwargs: Any) -> Any:
        with cuda_names_on_tpu():
            return super().execute_model(*args, **kwargs)

    def sample_tokens(self, *args: Any, **kwargs: Any) -> Any:
        with cuda_names_on_tpu():
            return super().sample_tokens(*args, **kwargs)

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        super().load_model(*args, **kwargs)
        # The forward's shapes follow the padded token count and pages; the input preparation
        # before it and the logits and sampling after it follow the request count. Fused into
        # one graph, every combination of the two would compile: the model's forward runs as
        # a graph of its own (the same one at every step of the same token and page buckets).
        self.model.register_forward_pre_hook(lambda *_: _C._materialize_pending())
        self.model.register_forward_hook(lambda *_: _C._materialize_pending())

    def _determine_batch_execution_and_padding(
        self, num_tokens: int, num_reqs: int, *args: Any, **kwargs: Any
    ) -> Any:
        mode, descriptor, *rest = super()._determine_batch_execution_and_padding(
            num_tokens, num_reqs, *args, **kwargs
        )
        padded = padded_token_count(descriptor.num_tokens, self.max_num_tokens)
        if padded != descriptor.num_tokens:
            descriptor = dataclasses.replace(descriptor, num_tokens=padded)
        return (mode, descriptor, *rest)

    def _to_list(self, sampled_token_ids: torch.Tensor) -> list[list[int]]:
        # The GPU runner copies through a pinned buffer and a CUDA event; one device-to-host
        # read is the same here.
        return sampled_token_ids.tolist()
