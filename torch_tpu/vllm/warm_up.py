"""Compiling every step shape before the server takes traffic.

A step runs two executables whose shapes depend on the batch (input preparation is uploads
only; see host_inputs.py): the model's forward, per (token bucket, page bucket), and logits and
sampling, per (token bucket, request bucket). Traffic reaches these pairs in whatever order
requests arrive, so without a warm-up a server compiles in the middle of serving for minutes.

The warm-up runs real steps through the runner, with made-up requests whose KV-cache blocks
are all the null block (block 0, which vLLM never gives a request): the same code path, so the
same executables, as traffic's. Pairs no real step can make are skipped: a step of T tokens
over at most R requests has a request of at least T / R tokens, so its pages cannot be fewer.
Greedy sampling is warmed; random sampling compiles its executables on first use.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from vllm.distributed.kv_transfer import kv_transfer_state
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import NewRequestData, SchedulerOutput

from torch_tpu.vllm.attention import pages_for
from torch_tpu.vllm.padding import SMALLEST_BUCKET, padded_count

NULL_BLOCK = 0


@dataclass(frozen=True)
class WarmUpStep:
    """One step's shape: each request's (cached tokens, scheduled tokens)."""

    requests: tuple[tuple[int, int], ...]

    @property
    def tokens(self) -> int:
        return sum(scheduled for _, scheduled in self.requests)


def buckets(limit: int) -> list[int]:
    """The padded sizes of counts 1..limit: powers of two from SMALLEST_BUCKET, and limit."""
    sizes = []
    size = SMALLEST_BUCKET
    while size < limit:
        sizes.append(size)
        size *= 2
    return [*sizes, limit]


def step_shapes(
    max_tokens: int, max_requests: int, max_model_len: int, block_size: int, page_width: int
) -> list[WarmUpStep]:
    """A step for every reachable (token bucket, page bucket) and (token bucket, request
    bucket) pair, each step once."""
    # A request keeps room for the token its step samples.
    longest_allowed = max_model_len - 1
    page_buckets = sorted({pages_for(n * block_size, block_size, page_width) for n in
                           range(1, -(-longest_allowed // block_size) + 1)})  # fmt: skip
    steps: dict[WarmUpStep, None] = {}  # insertion-ordered, without repeats
    for tokens in buckets(max_tokens):
        for pages in page_buckets:
            # The longest sequence in the page bucket, within the model's length.
            longest = min(pages * block_size, longest_allowed)
            requests = -(-tokens // longest)
            if requests <= max_requests:
                steps[_step(tokens, requests, longest)] = None
        for request_bucket in buckets(max_requests):
            requests = min(request_bucket, tokens)
            longest = -(-tokens // requests)
            if (
                padded_count(requests, max_requests) == request_bucket
                and longest <= longest_allowed
            ):
                steps[_step(tokens, requests, longest)] = None
    return list(steps)


def _step(tokens: int, requests: int, longest: int) -> WarmUpStep:
    """`requests` requests scheduling `tokens` tokens in all, the first `longest` long (its
    earlier tokens already cached) and none longer."""
    share, extra = divmod(tokens, requests)
    scheduled = [share + (1 if i < extra else 0) for i in range(requests)]
    first = scheduled[0]
    return WarmUpStep(((longest - first, first), *((0, n) for n in scheduled[1:])))


@contextmanager
def _without_kv_connector() -> Iterator[None]:
    """A KV connector (the prefix cache's host tier, say) has nothing to move for made-up
    requests, and its metadata comes from the scheduler, which made none: it sits out."""
    connector = kv_transfer_state._KV_CONNECTOR_AGENT
    kv_transfer_state._KV_CONNECTOR_AGENT = None
    try:
        yield
    finally:
        kv_transfer_state._KV_CONNECTOR_AGENT = connector


def run(runner: Any, steps: list[WarmUpStep]) -> int:
    """Runs each step on `runner` and removes its requests; returns the steps run."""
    with _without_kv_connector():
        return _run(runner, steps)


def _run(runner: Any, steps: list[WarmUpStep]) -> int:
    count = 0
    for step in steps:
        ids = [f"torch-tpu-warm-up-{count}-{i}" for i in range(len(step.requests))]
        new = [
            _request(req_id, cached, scheduled, runner.cache_config.block_size)
            for req_id, (cached, scheduled) in zip(ids, step.requests, strict=True)
        ]
        output = SchedulerOutput.make_empty()
        output.scheduled_new_reqs = new
        output.num_scheduled_tokens = {
            req_id: scheduled for req_id, (_, scheduled) in zip(ids, step.requests, strict=True)
        }
        output.total_num_scheduled_tokens = step.tokens
        runner.execute_model(output)
        runner.sample_tokens(None)
        finish = SchedulerOutput.make_empty()
        finish.finished_req_ids = set(ids)
        runner.execute_model(finish)
        count += 1
    return count


def _request(req_id: str, cached: int, scheduled: int, block_size: int) -> NewRequestData:
    length = cached + scheduled
    return NewRequestData(
        req_id=req_id,
        prompt_token_ids=[0] * length,
        mm_features=[],
        sampling_params=SamplingParams(temperature=0, max_tokens=1),
        pooling_params=None,
        block_ids=([NULL_BLOCK] * -(-length // block_size),),
        num_computed_tokens=cached,
        lora_request=None,
    )
