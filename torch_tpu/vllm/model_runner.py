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

import numpy as np
import torch
from vllm.config import CompilationMode
from vllm.v1.worker import gpu_input_batch
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from torch_tpu import _C
from torch_tpu.vllm import grammar, host_inputs, padded_sampling, warm_up
from torch_tpu.vllm.padding import padded_count


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


_copy_slice = gpu_input_batch.copy_slice


def _copy_whole(source: torch.Tensor, target: torch.Tensor, length: int) -> torch.Tensor:
    # vLLM copies the batch's rows of a sampling parameter (`target[:length]`), an update
    # whose shape follows the request count; the whole buffer is one upload of one shape.
    if source.shape != target.shape:
        return _copy_slice(source, target, length)
    return target.copy_(source)[:length]


@contextmanager
def whole_parameter_copies() -> Iterator[None]:
    """The input batch's sampling parameters upload whole inside the block."""
    gpu_input_batch.copy_slice = _copy_whole
    try:
        yield
    finally:
        gpu_input_batch.copy_slice = _copy_slice


class TpuModelRunner(GPUModelRunner):
    def __init__(self, vllm_config: Any, device: torch.device) -> None:
        with cuda_names_on_tpu():
            super().__init__(vllm_config, device)
        self._staging = host_inputs.HostStaging(self)

    def execute_model(self, *args: Any, **kwargs: Any) -> Any:
        with cuda_names_on_tpu(), whole_parameter_copies():
            return super().execute_model(*args, **kwargs)

    def sample_tokens(self, grammar_output: Any) -> Any:
        if grammar_output is not None and self.execute_model_state is not None:
            # Structured output's token masks, applied here with tpu ops (grammar.py) rather
            # than by vLLM through xgrammar's kernels, which have none for tpu.
            scheduler_output, logits = self.execute_model_state[:2]
            grammar.apply_grammar_bitmask(
                scheduler_output, grammar_output, self.input_batch.req_ids, logits
            )
            grammar_output = None
        with cuda_names_on_tpu():
            return super().sample_tokens(grammar_output)

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        super().load_model(*args, **kwargs)
        # The forward's shapes follow the token and page buckets; the logits and sampling
        # after it, the token and request buckets. Fused into one graph, every combination of
        # the three would compile: the model's forward runs as a graph of its own.
        self.model.register_forward_pre_hook(lambda *_: _C._materialize_pending())
        self.model.register_forward_hook(lambda *_: _C._materialize_pending())

    def initialize_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        super().initialize_kv_cache(*args, **kwargs)
        _type_replayed_caches(self.compilation_config.static_forward_context)

    def warm_up(self) -> int:
        """Runs a step of every shape traffic can make (warm_up.py); returns how many."""
        steps = warm_up.step_shapes(
            max_tokens=self.max_num_tokens,
            max_requests=self.max_num_reqs,
            max_model_len=self.max_model_len,
            block_size=self.cache_config.block_size,
            page_width=self.input_batch.block_table[0].max_num_blocks_per_req,
        )
        if self.compilation_config.mode == CompilationMode.VLLM_COMPILE:
            # Compiled (compiler.py), a step's first run records its pieces' and attention's
            # graphs, each run on its own; only a second run replays them all, joined into the
            # one graph of the forward, whose executable then compiles.
            steps = [step for step in steps for _ in range(2)]
        return warm_up.run(self, steps)

    def _determine_batch_execution_and_padding(
        self, num_tokens: int, num_reqs: int, *args: Any, **kwargs: Any
    ) -> Any:
        mode, descriptor, *rest = super()._determine_batch_execution_and_padding(
            num_tokens, num_reqs, *args, **kwargs
        )
        padded = padded_count(descriptor.num_tokens, self.max_num_tokens)
        if padded != descriptor.num_tokens:
            descriptor = dataclasses.replace(descriptor, num_tokens=padded)
        return (mode, descriptor, *rest)

    def _prepare_inputs(
        self, scheduler_output: Any, num_scheduled_tokens: np.ndarray
    ) -> tuple[torch.Tensor, Any, int]:
        if not host_inputs.applies(self):
            return super()._prepare_inputs(scheduler_output, num_scheduled_tokens)
        last_rows = host_inputs.prepare(
            self,
            self._staging,
            scheduler_output.total_num_scheduled_tokens,
            num_scheduled_tokens,
        )
        return last_rows, None, 1

    def _prepare_padding_mask(self, num_tokens_unpadded: int, num_tokens_padded: int) -> Any:
        return host_inputs.padding_mask(self, self._staging, num_tokens_unpadded, num_tokens_padded)

    def _preprocess(
        self, scheduler_output: Any, num_input_tokens: int, *args: Any, **kwargs: Any
    ) -> Any:
        if self.supports_mm_inputs or not host_inputs.applies(self):
            return super()._preprocess(scheduler_output, num_input_tokens, *args, **kwargs)
        # vLLM zeroes the positions of the padding tokens, a write whose offset follows the
        # real token count; host_inputs.prepare uploaded them zeroed already.
        padded = dataclasses.replace(scheduler_output, total_num_scheduled_tokens=num_input_tokens)
        return super()._preprocess(padded, num_input_tokens, *args, **kwargs)

    def _sample(self, logits: torch.Tensor | None, spec_decode_metadata: Any) -> Any:
        if logits is None or spec_decode_metadata is not None:
            return super()._sample(logits, spec_decode_metadata)
        # The logits follow the token and request buckets, sampling only the request bucket
        # and the sampling parameters in use: computed apart, the warm-up's greedy steps
        # compile every logits shape, and each kind of sampling compiles once per bucket.
        _C._materialize_pending()
        num_reqs = self.input_batch.num_reqs
        if len(logits) == num_reqs:
            return super()._sample(logits, None)
        metadata = self.input_batch.sampling_metadata
        padded = padded_sampling.padded_metadata(metadata, len(logits))
        if padded is None:
            return super()._sample(logits[:num_reqs], None)
        self.input_batch.sampling_metadata = padded
        try:
            output = super()._sample(logits, None)
        finally:
            self.input_batch.sampling_metadata = metadata
        # Computed before the padding rows are dropped: the executable's shapes are the
        # bucket's, and reads of the requests' rows copy them out without a compile.
        _C._materialize_pending()
        return padded_sampling.first_rows(output, num_reqs)

    def _to_list(self, sampled_token_ids: torch.Tensor) -> list[list[int]]:
        # The GPU runner copies through a pinned buffer and a CUDA event; one device-to-host
        # read is the same here.
        return sampled_token_ids.tolist()


def _type_replayed_caches(layers: dict[str, Any]) -> None:
    """vLLM allocates each KV cache as int8 bytes that attention reads as its own dtype. The
    first read in another dtype converts the buffer in an execution of its own, and a replayed
    attention graph (compiled mode) whose recording ran two executions is recorded at every
    call after. Zero-filled here in the dtype attention reads, the buffers are of that dtype
    before any graph is recorded."""
    done: set[int] = set()
    for layer in layers.values():
        impl = getattr(layer, "impl", None)
        cache = getattr(layer, "kv_cache", None)
        if not getattr(impl, "replayed", False) or not isinstance(cache, torch.Tensor):
            continue
        if cache.numel() == 0 or cache.untyped_storage().data_ptr() in done:
            continue
        done.add(cache.untyped_storage().data_ptr())
        fp8 = getattr(impl, "fp8_format", None)
        typed = cache.view(fp8) if fp8 is not None else cache
        elements = typed.untyped_storage().nbytes() // typed.element_size()
        typed.as_strided((elements,), (1,), 0).zero_()
