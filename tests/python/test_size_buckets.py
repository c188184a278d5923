"""Eager size buckets: once a fill has met two lengths in a bucket (the next power of two), it
runs each new shape at the bucket's length, and elementwise ops, copies, prefix scans, full
reductions and accumulating index_put on its tensors follow, so every length in the bucket
shares their executables. Results equal CPU's at
every length, random numbers equal the exact draw's, and any other op reads the same values."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import torch

import torch_tpu

DEVICE = "tpu"


@pytest.fixture(autouse=True)
def buckets_on(size_buckets_on: None) -> Iterator[None]:
    # Buckets are for ops run one by one (Strict, Debug); a deferred graph compiles once for
    # its ops anyway.
    with torch_tpu.eager_mode("strict"):
        yield


def bucket(length: int) -> int:
    size = 8
    while size < length:
        size *= 2
    return size


def start_bucket(fill: Callable[[int], torch.Tensor], length: int) -> None:
    """Meets two other lengths of `length`'s bucket, so that `fill` runs at the bucket from now."""
    size = bucket(length)
    fill(size // 2 + 1)
    fill(size - 1)


def bucket_ops() -> int:
    return torch_tpu.metrics()["size_bucket_ops"]


def compiled() -> int:
    counts = torch_tpu.metrics()
    return counts["compiles"] + counts["disk_cache_hits"]


def test_random_fills_at_a_bucket_draw_the_numbers_of_the_exact_fill() -> None:
    draws: list[Callable[[tuple[int, ...]], torch.Tensor]] = [
        lambda shape: torch.rand(shape, device=DEVICE),
        lambda shape: torch.randn(shape, device=DEVICE),
        lambda shape: torch.rand(shape, device=DEVICE, dtype=torch.float64),
        lambda shape: torch.randn(shape, device=DEVICE, dtype=torch.float64),
        lambda shape: torch.randint(0, 1000, shape, device=DEVICE),
        lambda shape: torch.empty(shape, device=DEVICE).bernoulli_(0.3),
    ]
    for index, draw in enumerate(draws):
        length = 1500 + 50 * index  # a bucket (2048) that only this draw meets
        torch.manual_seed(index)
        # Exact: the first shape of its bucket. (A shape met before always runs exact.)
        exact = draw((2, length // 2)).cpu().flatten()
        after_exact = draw((3,)).cpu()
        start_bucket(lambda n, draw=draw: draw((n,)), length)
        before = bucket_ops()
        torch.manual_seed(index)
        at_bucket = draw((length,)).cpu()
        assert bucket_ops() > before, index
        torch.testing.assert_close(at_bucket, exact, rtol=0, atol=0)
        # The generator moved on by as much: the next draw is the same too.
        torch.testing.assert_close(draw((3,)).cpu(), after_exact, rtol=0, atol=0)


def reference_ops(x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Ops that run at the bucket on tpu (elementwise, copies, scans, reductions, in place,
    out=), and a few that read its start through a view (sort, dot, flip)."""
    z = x.clone()
    z.add_(y, alpha=2)
    out = torch.empty_like(x)
    torch.mul(x, y, out=out)
    return {
        "pointwise": (x * y + 1).abs().exp(),
        "where": torch.where(x > 0, x, y),
        "compare": x >= y,
        "to_int": (x * 10).to(torch.int64),
        "in_place": z,
        "out": out,
        "cumsum": x.cumsum(0),
        "cumprod": (y + 0.5).cumprod(0),
        "sum": x.sum(),
        "max": x.max(),
        "min": y.min(),
        "prod": (y + 0.5).prod(),
        "any": (x > 2).any(),
        "all": (y >= 0).all(),
        "int_max": (x * 10).to(torch.int64).max(),
        "sort": torch.sort(x).values,
        "dot": torch.dot(x, y),
        "flip": x.flip(0),
    }


@pytest.mark.parametrize(
    ("mode", "lengths"),
    # Lengths the mode alone meets (start_bucket meets 33 and 63); 64 is its own bucket.
    [("strict", (35, 40, 51, 62, 64)), ("debug", (34, 41, 50, 61))],
)
def test_ops_on_bucketed_tensors_match_cpu_at_every_length(
    mode: torch_tpu.EagerMode, lengths: tuple[int, ...]
) -> None:
    def fills(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(n, device=DEVICE), torch.rand(n, device=DEVICE)

    torch_tpu.set_eager_mode(mode)
    start_bucket(lambda n: fills(n)[0], 40)
    for length in lengths:
        before = bucket_ops()
        x, y = fills(length)
        assert length == 64 or bucket_ops() > before  # 64 is its own bucket: exact
        got = reference_ops(x, y)
        expected = reference_ops(x.cpu(), y.cpu())
        for name, value in expected.items():
            assert got[name].shape == value.shape, (length, name)
            assert got[name].dtype == value.dtype, (length, name)
            torch.testing.assert_close(got[name].cpu(), value, msg=f"{name} at {length}")


def test_lengths_in_one_bucket_share_executables() -> None:
    def step(n: int) -> torch.Tensor:
        x = torch.randn(n, device=DEVICE)
        y = torch.zeros(n, device=DEVICE)
        y += x.abs().cumsum(0)
        return (y * 0.5).sum() + x.max()

    for length in (65, 66, 67):  # the bucket of 128, met twice: from here every op uses it
        step(length)
    before = compiled()
    results = {length: step(length) for length in range(68, 128)}
    assert compiled() == before, "a length in a met bucket compiled again"
    torch.manual_seed(0)
    for length in (70, 99, 127):
        x = torch.randn(length, device=DEVICE)
        expected = (x.cpu().abs().cumsum(0) * 0.5).sum() + x.cpu().max()
        torch.testing.assert_close(step_from(x).cpu(), expected)
    assert all(value.shape == () for value in results.values())


def test_uploads_of_many_lengths_share_executables() -> None:
    host = torch.randn(300)

    def step(length: int) -> torch.Tensor:
        return (host[:length].to(DEVICE) * 2 + 1).cumsum(0)

    for length in (130, 131, 132):  # two lengths of the bucket, then the first bucketed one
        step(length)
    before, bucketed = compiled(), bucket_ops()
    for length in range(133, 200):
        got = step(length)
        torch.testing.assert_close(got.cpu(), (host[:length] * 2 + 1).cumsum(0))
    assert compiled() == before
    assert bucket_ops() - bucketed >= 4 * (200 - 133)  # the upload, mul, add and cumsum


def step_from(x: torch.Tensor) -> torch.Tensor:
    y = torch.zeros(x.numel(), device=DEVICE)
    y += x.abs().cumsum(0)
    return (y * 0.5).sum() + x.max()


def test_index_put_accumulates_duplicates_at_every_length() -> None:
    # PyTorch's test_index_put_accumulate_duplicate_indices, over fewer lengths: indices from
    # a random walk repeat and interleave; each length used to compile seven executables.
    start = compiled()
    for length in range(1, 140):
        delta = torch.empty(length, dtype=torch.double, device=DEVICE).uniform_(-1, 1)
        indices = delta.cumsum(0).long()
        base = torch.randn(int(indices.abs().max()) + 1, device=DEVICE)
        values = torch.randn(indices.size(0), device=DEVICE)
        output = base.index_put((indices,), values, accumulate=True)
        expected = base.cpu().clone()
        for index, value in zip(indices.tolist(), values.cpu(), strict=True):
            expected[index] += value
        torch.testing.assert_close(output.cpu(), expected)
    # Exact sizes: ~7 per length (973). Buckets: the ops' per bucket, and index_put per length
    # of its target, which depends on the draws.
    assert compiled() - start < 300


def test_index_put_past_its_target_still_raises() -> None:
    def fills(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.full((n,), 5, device=DEVICE), torch.ones(n, device=DEVICE)

    start_bucket(fills, 20)
    indices, values = fills(20)  # every index is out of range for a target of 5
    target = torch.zeros(5, device=DEVICE)
    before = bucket_ops()
    with pytest.raises(IndexError):
        target.index_put_((indices,), values, accumulate=True)
        torch.tpu.synchronize()
    assert bucket_ops() > before


@pytest.mark.parametrize("setting", ["0", "always"])
def test_buckets_can_be_turned_off_or_started_at_once(setting: str) -> None:
    # "always": a fill or upload buckets at its first length (for running suites at buckets).
    script = (
        "import torch, torch_tpu\n"
        "x = torch.arange(9.0).to('tpu')\n"
        "assert torch.equal((x * 2).cpu(), torch.arange(9.0) * 2)\n"
        "for n in (9, 10, 11):\n"
        "    x = torch.rand(n, device='tpu')\n"
        "    assert (x.abs().cpu() == x.cpu()).all()\n"
        "print(torch_tpu.metrics()['size_bucket_ops'])\n"
    )
    env = dict(os.environ, TORCH_TPU_SIZE_BUCKETS=setting)
    env.pop("TPU_DEFER_AND_FUSE", None)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    # always: the upload and its product at 16, then every fill and its abs (by default only
    # the third fill and its abs, once a second length was met).
    assert int(done.stdout.split()[-1]) == (0 if setting == "0" else 8)


def jagged_batch(seed: int, low: int, high: int) -> tuple[torch.Tensor, ...]:
    """Two features' indices in one buffer, as a recommendation model's batch holds them:
    feature 0 reads a table of 10 rows, feature 1 one of 40; each has 4 bags of low..high-1
    indices. (lengths, indices, per-sample weights)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(low, high, (2, 4), generator=g)
    first = torch.randint(0, 10, (int(lengths[0].sum()),), generator=g)
    second = torch.randint(0, 40, (int(lengths[1].sum()),), generator=g)
    indices = torch.cat([first, second])
    return lengths, indices, torch.rand(indices.shape, generator=g)


def pooled_bags(
    tables: list[torch.Tensor], batch: tuple[torch.Tensor, ...], mode: str, include_last: bool
) -> list[torch.Tensor]:
    """embedding_bag of each feature over its run of the shared buffers (views), on the device
    the batch is on."""
    lengths, indices, weights = batch
    outputs, start = [], 0
    for feature, table in enumerate(tables):
        count = int(lengths[feature].sum())
        offsets = torch.cat([lengths.new_zeros(1), lengths[feature].cumsum(0)])
        if not include_last:
            offsets = offsets[:-1]
        outputs.append(
            torch.nn.functional.embedding_bag(
                indices[start : start + count],
                table,
                offsets.to(indices.device),
                mode=mode,
                per_sample_weights=weights[start : start + count] if mode == "sum" else None,
                include_last_offset=include_last,
                padding_idx=3 if mode == "mean" else None,
            )
        )
        start += count
    return outputs


@pytest.mark.parametrize(
    "mode,include_last", [("sum", True), ("mean", False), ("max", True)], ids=str
)
def test_embedding_bags_over_jagged_indices_share_executables(
    mode: str, include_last: bool
) -> None:
    """A recommendation model's batch: each feature's indices a run of one uploaded buffer, a
    different count each batch. Once the uploads met two lengths of a bucket, each new count
    runs embedding_bag and its backwards at its bucket, computing nothing new; the window past
    a feature's run holds the other feature's indices, out of this table's range, which must
    not count (or raise)."""
    torch.manual_seed(0)
    cpu_tables = [torch.randn(10, 4, requires_grad=True), torch.randn(40, 4, requires_grad=True)]
    tpu_tables = [t.detach().to(DEVICE).requires_grad_() for t in cpu_tables]

    def step(seed: int, weights_grad: bool) -> None:
        # 20..28 indices a feature (the 32 bucket), 40..56 in all (the 64 bucket).
        batch = jagged_batch(seed, 5, 8)
        grad = weights_grad and mode == "sum"
        cpu_batch = tuple(t.clone().requires_grad_(grad and t.is_floating_point()) for t in batch)
        tpu_batch = tuple(
            t.to(DEVICE).requires_grad_(grad and t.is_floating_point()) for t in batch
        )
        want = pooled_bags(cpu_tables, cpu_batch, mode, include_last)
        got = pooled_bags(tpu_tables, tpu_batch, mode, include_last)
        grads = [torch.randn_like(w) for w in want]
        torch.autograd.backward(want, grads)
        torch.autograd.backward(got, [g.to(DEVICE) for g in grads])
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g.cpu(), w)
        for g, w in zip(tpu_tables, cpu_tables, strict=True):
            torch.testing.assert_close(g.grad.cpu(), w.grad)
        if grad:
            torch.testing.assert_close(tpu_batch[2].grad.cpu(), cpu_batch[2].grad)

    # Meets lengths of the uploads' bucket and the windows' executables. (The weights' gradient
    # of a run accumulates into their whole buffer's at its exact length: checked here only.)
    for seed in range(4):
        step(seed, weights_grad=True)
    start, before = compiled(), bucket_ops()
    for seed in range(4, 8):
        step(seed, weights_grad=False)
    assert bucket_ops() > before
    assert compiled() == start


def test_an_out_of_range_index_in_a_jagged_run_still_raises() -> None:
    indices = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 30, 1, 2])
    table = torch.randn(10, 4, device=DEVICE)

    def upload(n: int) -> torch.Tensor:
        return torch.zeros(n, dtype=torch.long).to(DEVICE)

    start_bucket(upload, 20)
    on_tpu = indices.to(DEVICE)
    offsets = torch.tensor([0, 4], device=DEVICE)
    before = bucket_ops()
    # The first run is in range (what lies past it, 30 included, is in no bag): no error.
    fine = torch.nn.functional.embedding_bag(on_tpu[:9], table, offsets)
    torch.testing.assert_close(
        fine.cpu(), torch.nn.functional.embedding_bag(indices[:9], table.cpu(), offsets.cpu())
    )
    assert bucket_ops() > before
    with pytest.raises(RuntimeError):
        torch.nn.functional.embedding_bag(on_tpu[9:], table, offsets)
        torch.tpu.synchronize()


def test_lookups_at_jagged_positions_share_executables() -> None:
    """A jagged batch reordered on the device (fbgemm's permute_2D_sparse_data on tpu): each
    position's segment searched in the segments' ends, the values gathered from where they
    come from. Once the uploads met two lengths of a bucket, searchsorted and index_select run
    at it, reading the values from their own bucket, and new lengths compile nothing."""

    def permuted(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        # The segments in reverse order.
        device = values.device
        starts = lengths.cumsum(0) - lengths
        flipped = lengths.flip(0)
        out_ends = flipped.cumsum(0)
        positions = torch.ones(values.numel(), dtype=torch.long, device=device).cumsum(0) - 1
        segment = torch.searchsorted(out_ends, positions, right=True)
        source = (
            starts.flip(0).index_select(0, segment)
            + positions
            - (out_ends - flipped).index_select(0, segment)
        )
        return values.index_select(0, source)

    def step(seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        total = 40 + 3 * seed  # a new length each step, all in the 64 bucket
        lengths = torch.full((8,), total // 8)
        lengths[: total % 8] += 1
        lengths = lengths[torch.randperm(8, generator=g)]
        values = torch.randn(total, generator=g)
        want = permuted(values, lengths)
        got = permuted(values.to(DEVICE), lengths.to(DEVICE))
        torch.testing.assert_close(got.cpu(), want)

    for seed in range(4):
        step(seed)
    start, before = compiled(), bucket_ops()
    for seed in range(4, 8):
        step(seed)
    assert bucket_ops() > before
    assert compiled() == start


def test_an_index_past_a_bucketed_tensors_length_still_raises() -> None:
    def upload(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.arange(n, dtype=dtype).to(DEVICE)

    start_bucket(upload, 20)
    start_bucket(lambda n: upload(n, torch.long), 20)
    values = upload(20)  # its bucket holds 32 elements: 20..31 are not its
    index = torch.arange(19, -1, -1).to(DEVICE)
    before = bucket_ops()
    got = values.index_select(0, index)
    torch.testing.assert_close(got.cpu(), torch.arange(20.0).flip(0))
    assert bucket_ops() > before
    with pytest.raises(IndexError):
        values.index_select(0, index + 1)  # 20 is past the end
        torch.tpu.synchronize()
