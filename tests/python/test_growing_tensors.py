"""Tensors that grow by a few elements each step, as generate's input_ids and positions do
(`torch.cat([ids, next], -1)`, then reads of `ids[:, -1:]`): once cats have met two lengths of
a size bucket, the cat writes into a bucket's buffer and reads of views of it key on the
bucket's length, so a loop compiles once per bucket rather than once per length, in every
eager mode, with results equal to CPU's at every step."""

from __future__ import annotations

import pytest
import torch

import torch_tpu

DEVICE = "tpu"
MODES = ("strict", "debug", "defer_and_fuse")


pytestmark = pytest.mark.usefixtures("size_buckets_on")


def compiled() -> int:
    counts = torch_tpu.metrics()
    return counts["compiles"] + counts["disk_cache_hits"]


def step(ids: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoding step's bookkeeping, as transformers writes it."""
    token = (ids[:, -1:] * 3 + 1) % 101  # reads a view at the growing end
    position = torch.arange(1, dtype=positions.dtype, device=positions.device).view(1, -1)
    position = position + positions[..., -1:] + 1
    ids = torch.cat([ids, token], dim=-1)
    positions = torch.cat([positions, position], dim=-1)
    return ids, positions


def grow(
    ids: torch.Tensor, positions: torch.Tensor, until: int
) -> tuple[torch.Tensor, torch.Tensor]:
    while ids.shape[-1] < until:
        ids, positions = step(ids, positions)
        ids[:, -1:].clone()  # the model's input: a copy of the newest token
    return ids, positions


# A dtype of its own for each mode: executables are shared across modes, so one mode's run
# would warm the next one's.
@pytest.mark.parametrize(
    "mode, dtype", list(zip(MODES, (torch.int64, torch.int32, torch.int16), strict=True)), ids=MODES
)
def test_a_tensor_grown_by_cat_compiles_once_per_bucket(mode: str, dtype: torch.dtype) -> None:
    cpu_ids = (torch.arange(8).view(1, 8) * 7 % 13).to(dtype)
    cpu_positions = torch.arange(8, dtype=dtype).view(1, 8)
    with torch_tpu.eager_mode(mode):
        ids, positions = cpu_ids.to(DEVICE), cpu_positions.to(DEVICE)
        start = compiled()
        # Into the bucket of 64 (lengths 33 to 64), checking every step against CPU.
        while ids.shape[-1] < 36:
            ids, positions = step(ids, positions)
            cpu_ids, cpu_positions = step(cpu_ids, cpu_positions)
            assert torch.equal(ids.cpu(), cpu_ids)
            assert torch.equal(positions.cpu(), cpu_positions)
        warm = compiled()
        while ids.shape[-1] < 64:
            ids, positions = step(ids, positions)
            cpu_ids, cpu_positions = step(cpu_ids, cpu_positions)
            assert torch.equal(ids.cpu(), cpu_ids)
            assert torch.equal(positions.cpu(), cpu_positions)
        assert compiled() == warm, "a new length inside a met bucket compiled"
        # Exact sizes compiled at least 3 executables a length (84 for lengths 9 to 36).
        assert warm - start < 40
        assert torch.equal(ids[:, 20:30].cpu(), cpu_ids[:, 20:30])


@pytest.mark.parametrize("mode", MODES)
def test_writes_into_a_grown_tensor_keep_every_element(mode: str) -> None:
    cpu_ids, cpu_positions = torch.arange(8).view(1, 8), torch.arange(8).view(1, 8)
    with torch_tpu.eager_mode(mode):
        ids, positions = grow(cpu_ids.to(DEVICE), cpu_positions.to(DEVICE), 20)
        cpu_ids, cpu_positions = grow(cpu_ids, cpu_positions, 20)
        for tensor in (ids, cpu_ids):
            tensor[0, -1] = 5  # a write through a view of the bucketed storage
            tensor[:, 3:6] += 1
        ids, positions = grow(ids, positions, 30)
        cpu_ids, cpu_positions = grow(cpu_ids, cpu_positions, 30)
        assert torch.equal(ids.cpu(), cpu_ids)
        assert torch.equal(positions.cpu(), cpu_positions)
        # Other ops read the grown tensor whole, as CPU would.
        assert torch.equal((ids.float() * 0.5).sum(-1).cpu(), (cpu_ids.float() * 0.5).sum(-1))
        assert torch.equal(ids.flip(-1).cpu(), cpu_ids.flip(-1))


@pytest.mark.parametrize(
    "shape, dim",
    [((2, 9), -1), ((9, 3), 0), ((1, 9, 2), 1), ((1, 2, 9), -1)],
    ids=["rows", "leading", "middle", "heads"],
)
def test_cats_of_every_layout_match_cpu(shape: tuple[int, ...], dim: int) -> None:
    # Some parts follow each other in memory (leading, middle), some do not (rows, heads).
    cpu = torch.randn(shape)
    tpu = cpu.to(DEVICE)
    extra = list(shape)
    extra[dim] = 1
    for _ in range(12):
        part = torch.randn(extra)
        cpu = torch.cat([cpu, part, part * 2], dim)
        tpu = torch.cat([tpu, part.to(DEVICE), part.to(DEVICE) * 2], dim)
        assert torch.equal(tpu.cpu(), cpu)
        view = tpu.narrow(dim, 1, 3)  # a view at an offset
        assert torch.equal((view * 2).cpu(), cpu.narrow(dim, 1, 3) * 2)
    # A first part that is itself a view, or of another dtype, takes the exact path.
    assert torch.equal(
        torch.cat([tpu.narrow(dim, 1, 3), tpu.narrow(dim, 0, 1)], dim).cpu(),
        torch.cat([cpu.narrow(dim, 1, 3), cpu.narrow(dim, 0, 1)], dim),
    )
    assert torch.equal(
        torch.cat([tpu.double(), tpu.narrow(dim, 0, 1)], dim).cpu(),
        torch.cat([cpu.double(), cpu.narrow(dim, 0, 1)], dim),
    )


def decode(
    keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor, new: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A decoding step of attention with a dynamic KV cache, as transformers' DynamicCache and
    sdpa write it: the step's key and value appended by cat along the length, then one query
    attends to all of them (grouped-query heads)."""
    keys = torch.cat([keys, new], dim=2)
    values = torch.cat([values, new * 0.5 - 1], dim=2)
    out = torch.nn.functional.scaled_dot_product_attention(query, keys, values, enable_gqa=True)
    return keys, values, out


# A head size of its own for each mode: executables are shared across modes.
@pytest.mark.parametrize("mode, head_dim", list(zip(MODES, (8, 4, 2), strict=True)), ids=MODES)
def test_a_kv_cache_grown_by_cat_compiles_once_per_bucket(mode: str, head_dim: int) -> None:
    """Keys and values [batch, heads, L, d] grow along L: their rows interleave in memory, so
    the cat gathers into the bucket, and attention reads the buckets with the positions past L
    masked. Equal to CPU at every step; no compile inside a met bucket."""
    torch.manual_seed(0)
    batch, kv_heads, heads = 2, 2, 4
    cpu_keys = torch.randn(batch, kv_heads, 9, head_dim)
    cpu_values = torch.randn(batch, kv_heads, 9, head_dim)
    steps = [
        (torch.randn(batch, heads, 1, head_dim), torch.randn(batch, kv_heads, 1, head_dim))
        for _ in range(40)
    ]
    with torch_tpu.eager_mode(mode):
        keys, values = cpu_keys.to(DEVICE), cpu_values.to(DEVICE)
        start = compiled()
        warm = None
        for query, new in steps:
            keys, values, out = decode(keys, values, query.to(DEVICE), new.to(DEVICE))
            cpu_keys, cpu_values, cpu_out = decode(cpu_keys, cpu_values, query, new)
            torch.testing.assert_close(out.cpu(), cpu_out)
            # A bucket holds lengths 33 to 64 (rows of batch * kv_heads * head_dim elements, a
            # power of two): met from length 35 on.
            if keys.shape[2] == 35:
                warm, executions = compiled(), torch_tpu.metrics()["executions"]
        assert torch.equal(keys.cpu(), cpu_keys) and torch.equal(values.cpu(), cpu_values)
        assert keys.is_contiguous() and keys.stride() == cpu_keys.stride()
        assert torch.equal(
            keys[:, :, -3:].transpose(2, 3).cpu(), cpu_keys[:, :, -3:].transpose(2, 3)
        )
    assert warm is not None and compiled() == warm, "a new length inside a met bucket compiled"
    # Per step: the new value's two ops, the two cats and attention; in DeferAndFuse one fused
    # graph, the cats in it.
    per_step = (torch_tpu.metrics()["executions"] - executions) / (keys.shape[2] - 35)
    assert per_step == (1 if mode == "defer_and_fuse" else 5)
    # Exact sizes compiled a cat and an attention per length (80 for 40 steps).
    assert compiled() - start < 30


@pytest.mark.parametrize("mode", MODES)
def test_reads_and_writes_of_a_grown_kv_cache_match_cpu(mode: str) -> None:
    """Between cats (in DeferAndFuse inside the same pending graph as the cat that made the
    bucket): reads of the whole cache, of views of it, and in-place writes into it."""
    torch.manual_seed(1)
    cpu_keys = torch.randn(1, 3, 5, 4)
    news = [torch.randn(1, 3, 1, 4) for _ in range(24)]
    with torch_tpu.eager_mode(mode):
        keys = cpu_keys.to(DEVICE)
        for step, new in enumerate(news):
            results = []
            for cache, part in ((keys, new.to(DEVICE)), (cpu_keys, new)):
                cache = torch.cat([cache, part], dim=2)
                if step % 5 == 2:
                    cache[:, :, 1].add_(1.5)  # a write into the grown tensor
                read = (cache.sum(dim=2), cache[:, 1:, -2:] * 2, cache.transpose(2, 3).exp())
                results.append((cache, read))
            (keys, reads), (cpu_keys, cpu_reads) = results
            for actual, expected in zip(reads, cpu_reads, strict=True):
                torch.testing.assert_close(actual.cpu(), expected)
        assert torch.equal(keys.cpu(), cpu_keys)
