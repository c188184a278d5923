"""PyTorch versions of the Triton kernels of vLLM's rejection sampler (speculative decoding),
registered through vLLM's kernel-override hook like kernels.py's.

The Triton kernels run one program per request and walk its draft tokens in a loop that stops
at the first rejection. Here each request's drafts are a row of a [requests, max drafts] grid
(positions past a request's drafts masked), and "stops at the first rejection" is a cumulative
count of the rejections before each position: a position is written when none came before it,
so the first rejected position still gets its replacement token, as in the loop. The parameter
names are the kernels' own: vLLM forwards a launch's arguments to these by name.
"""

from __future__ import annotations

import torch

# vLLM's names for the kernels these functions replace.
MODULE = "vllm.v1.sample.rejection_sampler"
GREEDY = f"{MODULE}.rejection_greedy_sample_kernel"
RANDOM = f"{MODULE}.rejection_random_sample_kernel"
EXPAND = f"{MODULE}.expand_kernel"
RECOVERED = f"{MODULE}.sample_recovered_tokens_kernel"


def _draft_grid(
    cu_num_draft_tokens: torch.Tensor, num_tokens: int, max_spec_len: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per (request, position): the flat draft index (clamped into range), whether the
    position holds a draft, and each request's draft count ([requests, 1])."""
    ends = cu_num_draft_tokens.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    counts = (ends - starts)[:, None]
    position = torch.arange(max_spec_len, device=ends.device)[None, :]
    index = (starts[:, None] + position).clamp(0, max(num_tokens - 1, 0))
    return index, position < counts, counts


def _first_rejection_prefix(rejected: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Whether each position is reached: no valid position before it was rejected."""
    rejected = (rejected & valid).to(torch.int32)
    before = torch.cumsum(rejected, dim=1) - rejected
    return before == 0


def _write(
    output_token_ids: torch.Tensor,
    requests: torch.Tensor,
    drafts: torch.Tensor,
    reached: torch.Tensor,
    valid: torch.Tensor,
    tokens: torch.Tensor,
    counts: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    rejected: torch.Tensor,
) -> None:
    """Writes the reached drafts' tokens, and the bonus token after the last draft of each
    request with no rejection, for the `requests` rows only (others keep their values)."""
    max_spec_len = drafts.shape[1]
    width = output_token_ids.shape[1]
    columns = torch.arange(width, device=output_token_ids.device)[None, :]
    written = torch.zeros_like(output_token_ids, dtype=torch.bool)
    values = torch.zeros_like(output_token_ids)
    written[:, :max_spec_len] = reached & valid
    values[:, :max_spec_len] = tokens.to(output_token_ids.dtype)
    all_accepted = ~(rejected & valid).any(dim=1, keepdim=True)
    bonus_here = all_accepted & (columns == counts)
    bonus = bonus_token_ids.reshape(-1, 1).to(output_token_ids.dtype)
    values = torch.where(bonus_here, bonus, values)
    written = (written | bonus_here) & requests[:, None]
    output_token_ids.copy_(torch.where(written, values, output_token_ids))


def rejection_greedy_sample_kernel(
    output_token_ids_ptr: torch.Tensor,
    cu_num_draft_tokens_ptr: torch.Tensor,
    draft_token_ids_ptr: torch.Tensor,
    target_argmax_ptr: torch.Tensor,
    bonus_token_ids_ptr: torch.Tensor,
    is_greedy_ptr: torch.Tensor | None,
    max_spec_len: int,
    uniform_probs_ptr: torch.Tensor | None,
    synthetic_conditional_rates_ptr: torch.Tensor | None,
    SYNTHETIC_MODE: bool,  # noqa: N803 - the kernel's parameter names
) -> None:
    """Greedy requests: each draft is accepted while it equals the target's argmax; the
    argmax is written at every reached position (at the first mismatch it is the correction),
    then the bonus token when all drafts were accepted."""
    out = output_token_ids_ptr
    num_tokens = draft_token_ids_ptr.shape[0]
    index, valid, counts = _draft_grid(cu_num_draft_tokens_ptr, num_tokens, max_spec_len)
    drafts = draft_token_ids_ptr.to(torch.int64)[index]
    argmax = target_argmax_ptr.to(torch.int64)[index]
    if SYNTHETIC_MODE:
        assert uniform_probs_ptr is not None and synthetic_conditional_rates_ptr is not None
        rate = synthetic_conditional_rates_ptr[: index.shape[1]][None, :]
        accepted = (uniform_probs_ptr[index] < rate) & (drafts >= 0)
        tokens = torch.where(accepted, drafts, argmax)
    else:
        accepted = drafts == argmax
        tokens = argmax
    rejected = ~accepted
    reached = _first_rejection_prefix(rejected, valid)
    requests = (
        torch.ones(out.shape[0], dtype=torch.bool, device=out.device)
        if is_greedy_ptr is None
        else is_greedy_ptr.bool()
    )
    _write(out, requests, drafts, reached, valid, tokens, counts, bonus_token_ids_ptr, rejected)


def rejection_random_sample_kernel(
    output_token_ids_ptr: torch.Tensor,
    cu_num_draft_tokens_ptr: torch.Tensor,
    draft_token_ids_ptr: torch.Tensor,
    draft_probs_ptr: torch.Tensor | None,
    target_probs_ptr: torch.Tensor,
    bonus_token_ids_ptr: torch.Tensor,
    recovered_token_ids_ptr: torch.Tensor,
    uniform_probs_ptr: torch.Tensor,
    is_greedy_ptr: torch.Tensor,
    max_spec_len: int,
    vocab_size: int,
    synthetic_conditional_rates_ptr: torch.Tensor | None,
    NO_DRAFT_PROBS: bool,  # noqa: N803 - the kernel's parameter names
    SYNTHETIC_MODE: bool,  # noqa: N803
) -> None:
    """Random requests: draft x is accepted with probability min(1, p_target(x) / p_draft(x))
    (p_draft = 1 without draft probabilities); the first rejected position gets the
    recovered token, and the bonus token follows when all were accepted."""
    out = output_token_ids_ptr
    num_tokens = draft_token_ids_ptr.shape[0]
    index, valid, counts = _draft_grid(cu_num_draft_tokens_ptr, num_tokens, max_spec_len)
    drafts = draft_token_ids_ptr.to(torch.int64)[index]
    uniform = uniform_probs_ptr[index]
    if SYNTHETIC_MODE:
        assert synthetic_conditional_rates_ptr is not None
        accepted = uniform < synthetic_conditional_rates_ptr[: index.shape[1]][None, :]
    else:
        column = drafts.clamp(min=0)
        target = target_probs_ptr[index, column].to(torch.float64)
        if NO_DRAFT_PROBS:
            draft = torch.ones_like(target)
        else:
            assert draft_probs_ptr is not None
            draft = draft_probs_ptr[index, column].to(torch.float64)
        # A zero draft probability is rejected, as the kernel does, rather than divided by.
        accepted = (draft > 0) & (target / torch.where(draft > 0, draft, 1.0) >= uniform)
    accepted = accepted & (drafts >= 0)  # -1 marks padded drafts, always rejected
    recovered = recovered_token_ids_ptr.to(torch.int64)[index]
    tokens = torch.where(accepted, drafts, recovered)
    rejected = ~accepted
    reached = _first_rejection_prefix(rejected, valid)
    requests = ~is_greedy_ptr.bool()
    _write(out, requests, drafts, reached, valid, tokens, counts, bonus_token_ids_ptr, rejected)


def expand_kernel(
    output_ptr: torch.Tensor,
    input_ptr: torch.Tensor,
    cu_num_tokens_ptr: torch.Tensor,
    replace_from: float,
    replace_to: float,
    MAX_NUM_TOKENS: int,  # noqa: N803 - the kernel's parameter names
) -> None:
    """Each request's value repeated over its tokens (`replace_from` values replaced by
    `replace_to`); output slots past the last request's tokens keep their values."""
    ends = cu_num_tokens_ptr.to(torch.int64)
    token = torch.arange(output_ptr.shape[0], device=output_ptr.device)
    request = torch.searchsorted(ends, token, right=True)
    values = input_ptr[request.clamp(max=max(ends.shape[0] - 1, 0))]
    values = torch.where(values == replace_from, replace_to, values).to(output_ptr.dtype)
    covered = token < ends[-1]
    output_ptr.copy_(torch.where(covered, values, output_ptr))


def sample_recovered_tokens_kernel(
    output_token_ids_ptr: torch.Tensor,
    cu_num_draft_tokens_ptr: torch.Tensor,
    draft_token_ids_ptr: torch.Tensor,
    draft_probs_ptr: torch.Tensor | None,
    target_probs_ptr: torch.Tensor,
    inv_q_ptr: torch.Tensor,
    vocab_size: int,
    BLOCK_SIZE: int,  # noqa: N803 - the kernel's parameter names
    NO_DRAFT_PROBS: bool,  # noqa: N803
    USE_FP64_GUMBEL: bool,  # noqa: N803
) -> None:
    """Each draft position's replacement token, argmax_v residual(v) / q_v (an exponential
    race: a sample of the residual distribution max(p_target - p_draft, 0), or p_target
    without the draft token when there are no draft probabilities)."""
    num_tokens = draft_token_ids_ptr.shape[0]
    if num_tokens == 0:
        return
    ends = cu_num_draft_tokens_ptr.to(torch.int64)
    token = torch.arange(num_tokens, device=ends.device)
    request = torch.searchsorted(ends, token, right=True).clamp(max=ends.shape[0] - 1)
    target = target_probs_ptr[:num_tokens]
    if NO_DRAFT_PROBS:
        vocab = torch.arange(target.shape[1], device=target.device)[None, :]
        residual = torch.where(vocab != draft_token_ids_ptr.to(torch.int64)[:, None], target, 0.0)
    else:
        assert draft_probs_ptr is not None
        residual = (target - draft_probs_ptr[:num_tokens]).clamp(min=0.0)
    score = residual.to(inv_q_ptr.dtype) * inv_q_ptr[request]
    recovered = score.argmax(dim=1).clamp(max=vocab_size - 1)
    output_token_ids_ptr.copy_(recovered.to(output_token_ids_ptr.dtype))


KERNELS = {
    GREEDY: rejection_greedy_sample_kernel,
    RANDOM: rejection_random_sample_kernel,
    EXPAND: expand_kernel,
    RECOVERED: sample_recovered_tokens_kernel,
}
