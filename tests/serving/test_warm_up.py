"""The worker's warm-up covers every step shape traffic can make, and only real ones."""

from __future__ import annotations

import pytest

from torch_tpu.vllm.attention import pages_for
from torch_tpu.vllm.padding import padded_count
from torch_tpu.vllm.warm_up import step_shapes

CONFIGS = [
    # max tokens, max requests, max model length, block size, block-table width
    (256, 8, 256, 16, 16),
    (64, 5, 100, 16, 7),  # limits that are not powers of two
    (1024, 32, 512, 16, 32),  # bench/serving.py's server
]


@pytest.mark.parametrize(("tokens", "requests", "model_len", "block", "width"), CONFIGS)
def test_warm_up_steps_are_real_and_cover_every_reachable_bucket_pair(
    tokens: int, requests: int, model_len: int, block: int, width: int
) -> None:
    # Every step the scheduler could hand over: T tokens over R requests, the longest sequence
    # L at least T / R tokens and short enough to sample one more.
    # pages_at_least[n]: the page buckets of every length from n up.
    pages_at_least: list[set[int]] = [set() for _ in range(model_len + 1)]
    for length in range(model_len - 1, 0, -1):
        pages_at_least[length] = {pages_for(length, block, width)} | pages_at_least[length + 1]
    forward, logits = set(), set()
    for t in range(1, tokens + 1):
        for r in range(1, min(t, requests) + 1):
            shortest_longest = -(-t // r)
            if shortest_longest >= model_len:
                continue
            token_bucket = padded_count(t, tokens)
            forward |= {(token_bucket, pages) for pages in pages_at_least[shortest_longest]}
            logits.add((token_bucket, padded_count(r, requests)))

    warmed_forward, warmed_logits = set(), set()
    for step in step_shapes(tokens, requests, model_len, block, width):
        assert 1 <= len(step.requests) <= requests
        assert step.tokens <= tokens
        for cached, scheduled in step.requests:
            assert cached >= 0 and scheduled >= 1 and cached + scheduled < model_len
        longest = max(cached + scheduled for cached, scheduled in step.requests)
        token_bucket = padded_count(step.tokens, tokens)
        warmed_forward.add((token_bucket, pages_for(longest, block, width)))
        warmed_logits.add((token_bucket, padded_count(len(step.requests), requests)))

    assert warmed_forward == forward
    assert warmed_logits == logits


def test_the_bench_servers_warm_up_runs_each_step_once() -> None:
    steps = step_shapes(1024, 32, 512, 16, 32)
    # 47 reachable (token, page) pairs and 21 (token, request) pairs; 9 steps serve both.
    assert len(steps) == len(set(steps)) == 59
