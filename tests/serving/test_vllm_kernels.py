"""The PyTorch stand-ins for vLLM's Triton kernels (rejection sampling, drafting) and the grammar
mask, run on tpu against references on CPU: vLLM's own grammar-mask function with xgrammar's CPU
kernel, and per-request loops that follow each Triton kernel line by line."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from torch_tpu.vllm import draft_kernels, grammar, rejection_kernels

VOCAB = 70  # not a multiple of 32: the mask's last word is partial
MAX_SPEC = 3


def _batch(seed: int) -> tuple[list[int], torch.Tensor]:
    """Draft counts per request (some zero) and their inclusive cumulative sums."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, MAX_SPEC + 1, size=5).tolist()
    counts[0] = MAX_SPEC
    return counts, torch.tensor(np.cumsum(counts), dtype=torch.int32)


def _tpu(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.to("tpu") for t in tensors]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grammar_mask_equals_vllms_on_cpu_with_drafts_and_free_requests(seed: int) -> None:
    from vllm.v1.structured_output.utils import apply_grammar_bitmask

    rng = np.random.default_rng(seed)
    batch = [f"r{i}" for i in range(5)]
    spec = {"r1": [5, 6], "r3": [7]}
    structured = ["r3", "r1", "r4"]  # the scheduler's order, not the batch's
    rows = sum(1 + len(spec.get(r, ())) for r in structured)
    words = -(-VOCAB // 32)
    bitmask = rng.integers(-(2**31), 2**31, size=(rows, words), dtype=np.int64).astype(np.int32)
    logit_rows = len(batch) + sum(len(v) for v in spec.values()) + 2  # and two padding rows
    logits = torch.randn(logit_rows, VOCAB)
    scheduler = SimpleNamespace(scheduled_spec_decode_tokens=spec)
    output = SimpleNamespace(grammar_bitmask=bitmask, structured_output_request_ids=structured)

    expected = logits.clone()
    apply_grammar_bitmask(scheduler, output, SimpleNamespace(req_ids=batch), expected)
    (on_tpu,) = _tpu(logits)
    grammar.apply_grammar_bitmask(scheduler, output, batch, on_tpu)
    torch.testing.assert_close(on_tpu.cpu(), expected, rtol=0, atol=0)


def _loop_rejection(
    counts: list[int],
    drafts: torch.Tensor,
    accept: list[bool],
    chosen: list[int],
    bonus: torch.Tensor,
    rows: list[bool],
    out: torch.Tensor,
) -> torch.Tensor:
    """The kernels' loop: per selected request, write `chosen` at each draft position up to
    and including the first rejection, then the bonus token if nothing was rejected."""
    out = out.clone()
    start = 0
    for r, n in enumerate(counts):
        if rows[r]:
            rejected = False
            for pos in range(n):
                if not rejected:
                    out[r, pos] = chosen[start + pos]
                    rejected = not accept[start + pos]
            if not rejected:
                out[r, n] = int(bonus[r])
        start += n
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_greedy_rejection_equals_the_kernels_loop(seed: int) -> None:
    counts, cu = _batch(seed)
    tokens = int(cu[-1])
    gen = torch.Generator().manual_seed(seed)
    argmax = torch.randint(0, 4, (tokens,), generator=gen)
    drafts = torch.where(torch.rand(tokens, generator=gen) < 0.6, argmax, argmax + 1).int()
    bonus = torch.randint(0, VOCAB, (len(counts), 1), generator=gen)
    is_greedy = torch.tensor([True, False, True, True, False])
    out = torch.full((len(counts), MAX_SPEC + 1), -1, dtype=torch.int32)

    accept = (drafts.long() == argmax).tolist()
    expected = _loop_rejection(
        counts, drafts, accept, argmax.tolist(), bonus, is_greedy.tolist(), out
    )
    got = out.to("tpu")
    rejection_kernels.rejection_greedy_sample_kernel(
        got, *_tpu(cu, drafts, argmax, bonus, is_greedy), MAX_SPEC, None, None, False
    )
    assert torch.equal(got.cpu(), expected)


@pytest.mark.parametrize("no_draft_probs", [False, True])
def test_random_rejection_and_recovered_tokens_equal_the_kernels_loops(
    no_draft_probs: bool,
) -> None:
    counts, cu = _batch(7)
    tokens = int(cu[-1])
    gen = torch.Generator().manual_seed(7)
    target = torch.softmax(torch.randn(tokens, VOCAB, generator=gen) * 3, dim=-1)
    draft = None if no_draft_probs else torch.softmax(torch.randn(tokens, VOCAB, generator=gen), -1)
    drafts = torch.randint(0, VOCAB, (tokens,), generator=gen).int()
    drafts[1] = -1  # a padded draft: always rejected
    uniform = torch.rand(tokens, generator=gen, dtype=torch.float64)
    inv_q = 1 / torch.empty(len(counts), VOCAB).exponential_(generator=gen)
    bonus = torch.randint(0, VOCAB, (len(counts), 1), generator=gen)
    is_greedy = torch.tensor([False, True, False, False, False])
    out = torch.full((len(counts), MAX_SPEC + 1), -1, dtype=torch.int32)

    # sample_recovered_tokens_kernel's loop: argmax over v of residual(v) * inv_q[request](v).
    request_of = np.repeat(np.arange(len(counts)), counts)
    recovered = []
    for t in range(tokens):
        if draft is None:
            residual = target[t].clone()
            if drafts[t] >= 0:
                residual[drafts[t]] = 0
        else:
            residual = (target[t] - draft[t]).clamp(min=0)
        recovered.append(int((residual * inv_q[request_of[t]]).argmax()))
    got_recovered = torch.empty(tokens, dtype=torch.int32, device="tpu")
    tpu_draft = None if draft is None else draft.to("tpu")
    rejection_kernels.sample_recovered_tokens_kernel(
        got_recovered, *_tpu(cu, drafts), tpu_draft, *_tpu(target, inv_q), VOCAB, 8192,
        no_draft_probs, False,
    )  # fmt: skip
    assert got_recovered.cpu().tolist() == recovered

    accept = []
    for t in range(tokens):
        d = int(drafts[t])
        p_draft = 1.0 if draft is None else float(draft[t, max(d, 0)])
        ok = d >= 0 and p_draft > 0 and float(target[t, max(d, 0)]) / p_draft >= float(uniform[t])
        accept.append(ok)
    chosen = [int(drafts[t]) if accept[t] else recovered[t] for t in range(tokens)]
    rows = (~is_greedy).tolist()
    expected = _loop_rejection(counts, drafts, accept, chosen, bonus, rows, out)
    got = out.to("tpu")
    rejection_kernels.rejection_random_sample_kernel(
        got, *_tpu(cu, drafts), tpu_draft, *_tpu(target, bonus),
        torch.tensor(recovered, dtype=torch.int32, device="tpu"), *_tpu(uniform, is_greedy),
        MAX_SPEC, VOCAB, None, no_draft_probs, False,
    )  # fmt: skip
    assert torch.equal(got.cpu(), expected)


def test_expand_repeats_each_requests_value_over_its_tokens() -> None:
    counts, cu = _batch(4)
    values = torch.tensor([0.5, -1.0, 2.0, -1.0, 3.0])
    expected = torch.tensor(
        [1.0 if v == -1.0 else v for v, n in zip(values.tolist(), counts, strict=True)
         for _ in range(n)]
    )  # fmt: skip
    out = torch.zeros(int(cu[-1]), device="tpu")
    rejection_kernels.expand_kernel(out, *_tpu(values, cu), -1.0, 1.0, MAX_SPEC)
    assert torch.equal(out.cpu(), expected)


def test_next_token_and_padded_inputs_equal_the_kernels_loops() -> None:
    sampled = torch.tensor([[4, 5, -1, -1], [-1, -1, -1, -1], [7, 8, 9, 10], [3, 99, -1, -1]])
    discard = torch.tensor([False, False, False, True])
    backup = torch.tensor([40, 41, 42, 43], dtype=torch.int32)
    expected_next, expected_count = [], []
    for row, dropped, fallback in zip(sampled.tolist(), discard, backup.tolist(), strict=True):
        valid = [t for t in row if t != -1 and t < 64]
        expected_count.append(0 if dropped else len(valid))
        expected_next.append(fallback if dropped or not valid else valid[-1])
    next_ids = torch.zeros(4, dtype=torch.int32, device="tpu")
    count = torch.zeros(4, dtype=torch.int32, device="tpu")
    draft_kernels.eagle_prepare_next_token_padded_kernel(
        *_tpu(sampled, discard, backup), next_ids, count, 64, 4, 4, 4, 4
    )
    assert next_ids.cpu().tolist() == expected_next
    assert count.cpu().tolist() == expected_count

    cu = torch.tensor([3, 3, 6, 9], dtype=torch.int32)
    starts = torch.tensor([0, 4, 5, 9, 13], dtype=torch.int32)
    indices = torch.zeros(4, dtype=torch.int32, device="tpu")
    rejected = torch.zeros(4, dtype=torch.int32, device="tpu")
    draft_kernels.eagle_prepare_inputs_padded_kernel(
        *_tpu(cu, count.cpu(), starts), indices, rejected, 4
    )
    drafts = [3, 0, 3, 3]
    want_rejected = [d + 1 - c if d else 0 for d, c in zip(drafts, expected_count, strict=True)]
    assert rejected.cpu().tolist() == want_rejected
    ends = starts[1:].tolist()
    assert indices.cpu().tolist() == [e - 1 - r for e, r in zip(ends, want_rejected, strict=True)]
