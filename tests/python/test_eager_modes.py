"""The three eager modes: Strict (asynchronous), Debug (synchronous, bounds-checked) and
DeferAndFuse (fused), each checked against CPU results."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
from conftest import TPU

import torch_tpu
from torch_tpu.testing.tiny_gpt import TinyGPT, training_step


@pytest.fixture(autouse=True)
def restore_mode() -> Iterator[None]:
    previous = torch_tpu.get_eager_mode()
    yield
    torch_tpu.set_eager_mode(previous)


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("TPU_", "TORCH_TPU_"))}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=120
    )


# --- selection ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "strict"),
        ({"TPU_LAUNCH_BLOCKING": "1"}, "debug"),
        ({"TPU_DEFER_AND_FUSE": "1"}, "defer_and_fuse"),
    ],
)
def test_mode_from_environment(env: dict[str, str], expected: str) -> None:
    proc = run_python("import torch, torch_tpu; print(torch_tpu.get_eager_mode())", env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == expected


def test_set_get_and_context_manager() -> None:
    torch_tpu.set_eager_mode("debug")
    assert torch_tpu.get_eager_mode() == "debug"
    with torch_tpu.eager_mode("defer_and_fuse"):
        assert torch_tpu.get_eager_mode() == "defer_and_fuse"
    assert torch_tpu.get_eager_mode() == "debug"
    with pytest.raises(ValueError, match="unknown eager mode 'fast'"):
        torch_tpu.set_eager_mode("fast")  # type: ignore[arg-type]


def test_switching_mode_materializes_pending_work() -> None:
    x_cpu = torch.randn(8, 8)
    torch_tpu.set_eager_mode("defer_and_fuse")
    y = torch.tanh(x_cpu.to(TPU) * 3) + 1
    assert torch_tpu._C._pending_op_count() > 0
    torch_tpu.set_eager_mode("strict")
    assert torch_tpu._C._pending_op_count() == 0
    assert torch_tpu._C._is_ready(y) or torch.tpu.synchronize() is None
    torch.testing.assert_close(y.cpu(), torch.tanh(x_cpu * 3) + 1)


# --- strict ------------------------------------------------------------------------------


def test_strict_host_runs_ahead_of_device() -> None:
    torch_tpu.set_eager_mode("strict")
    # Products large enough that the device is still busy when 60 launches have returned: a
    # GPU computes 512x512 ones faster than its plugin takes a launch.
    n = 512 if torch_tpu._state.get("kind") == "cpu" else 4096
    x = torch.randn(n, n, device=TPU) / n**0.5
    (x @ x).cpu()  # compile outside the timed part
    # Unbounded first: every launch returns at once. The memory bound (on by default) lets the
    # host wait for the device, keeping it a launch ahead (test_device.py covers that).
    default = torch_tpu._C._retired_percent()
    torch_tpu._C._set_retired_percent(0)
    try:
        y = x
        start = time.perf_counter()
        for _ in range(30):
            y = torch.tanh(y @ x)
        enqueued = time.perf_counter() - start
        assert not torch_tpu._C._is_ready(y), "the chain finished before enqueueing returned"
        torch.tpu.synchronize()
        finished = time.perf_counter() - start
        assert torch_tpu._C._is_ready(y)
        assert enqueued < finished
    finally:
        torch_tpu._C._set_retired_percent(default)
    torch_tpu.reset_metrics()
    for _ in range(30):
        y = torch.tanh(y @ x)
    torch.tpu.synchronize()
    assert torch_tpu.metrics()["max_in_flight"] >= 2


def test_async_error_surfaces_at_next_sync_point_naming_the_op() -> None:
    torch_tpu.set_eager_mode("strict")
    x = torch.ones(4, device=TPU)
    torch.tpu.synchronize()  # the fault goes to the next run that completes: exp's
    torch_tpu._C._inject_async_fault()
    y = torch.exp(x)  # the fault is reported asynchronously: nothing raises here
    with pytest.raises(RuntimeError, match=r"aten::exp\..*injected fault"):
        torch.tpu.synchronize()
    # Reported once; the device keeps working.
    torch.testing.assert_close((y * 0 + x).cpu(), torch.ones(4))


# --- debug -------------------------------------------------------------------------------


def test_debug_completes_each_op_before_the_next() -> None:
    torch_tpu.set_eager_mode("debug")
    x = torch.randn(256, 256, device=TPU)
    for _ in range(5):
        x = torch.tanh(x @ x)
        assert torch_tpu._C._is_ready(x)


OUT_OF_RANGE = {
    "index_select": lambda t, i: torch.index_select(t, 0, i),
    "gather": lambda t, i: torch.gather(t, 0, i.view(-1, 1).expand(-1, 3)),
    "scatter": lambda t, i: t.scatter(0, i.view(-1, 1).expand(-1, 3), 1.0),
    "scatter_add": lambda t, i: t.scatter_add(0, i.view(-1, 1).expand(-1, 3), torch.ones_like(t)),
    "index": lambda t, i: t[i],
    "_index_put_impl_": lambda t, i: t.index_put_((i,), torch.tensor(1.0, device=t.device)),
    "index_add": lambda t, i: t.index_add(0, i, torch.ones(i.numel(), 3, device=t.device)),
    "embedding": lambda t, i: F.embedding(i, t),
}


@pytest.mark.parametrize("name", list(OUT_OF_RANGE))
def test_debug_bounds_checks_raise_as_on_cpu(name: str) -> None:
    torch_tpu.set_eager_mode("debug")
    table = torch.zeros(5, 3, device=TPU)
    bad = torch.tensor([1, 7], device=TPU)
    with pytest.raises((IndexError, RuntimeError)) as on_cpu:
        OUT_OF_RANGE[name](torch.zeros(5, 3), bad.cpu())
    # CPU's class (RuntimeError for gather and scatter, IndexError for the rest), at the op.
    with pytest.raises(on_cpu.type, match=r"index 7 is out of bounds for dimension 0 with size 5"):
        OUT_OF_RANGE[name](table, bad)
    # In range is fine, and matches CPU.
    good = torch.tensor([1, 4], device=TPU)
    expected = OUT_OF_RANGE[name](torch.zeros(5, 3), good.cpu())
    torch.testing.assert_close(OUT_OF_RANGE[name](table, good).cpu(), expected)


def test_debug_bounds_error_names_the_op() -> None:
    torch_tpu.set_eager_mode("debug")
    with pytest.raises(IndexError, match=r"^index_select\(\)"):
        torch.index_select(torch.zeros(5, device=TPU), 0, torch.tensor([9], device=TPU))


def test_debug_bounds_error_names_the_op_for_indices_in_a_size_bucket(
    size_buckets_on: None,
) -> None:
    # Uploads and fills of two lengths within a bucket put the next index and table in buckets'
    # buffers; index_select then ran at the buckets, checked on the device, and Debug's error at
    # the op was lost (the test above failed whenever earlier tests had met such lengths).
    torch_tpu.set_eager_mode("debug")
    for length in (2, 3):
        torch.arange(length).to(TPU)
        torch.zeros(length + 4, device=TPU)
    before = torch_tpu.metrics()["size_bucket_ops"]
    index = torch.tensor([1, 9, 0, 2], device=TPU)
    table = torch.zeros(5, device=TPU)
    assert torch_tpu.metrics()["size_bucket_ops"] == before + 2  # both in buckets
    with pytest.raises(IndexError, match=r"^index_select\(\)"):
        torch.index_select(table, 0, index)
    good = torch.tensor([4, 0, 1, 3], device=TPU)
    table = torch.arange(5.0, device=TPU)
    torch.testing.assert_close(
        torch.index_select(table, 0, good).cpu(), torch.arange(5.0)[good.cpu()]
    )


def test_check_finite_names_first_op_with_nan() -> None:
    code = (
        "import torch\n"
        "x = torch.tensor([1.0, -1.0]).to('tpu')\n"
        "y = x * 2\n"
        "try:\n"
        "    torch.log(y)\n"
        "except RuntimeError as e:\n"
        "    print('ERR', e)\n"
    )
    proc = run_python(code, {"TPU_LAUNCH_BLOCKING": "1", "TORCH_TPU_CHECK_FINITE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "ERR" in proc.stdout and "aten::log" in proc.stdout and "NaN or Inf" in proc.stdout


# --- defer and fuse ----------------------------------------------------------------------


def test_defer_fuses_and_matches_strict() -> None:
    x_cpu = torch.randn(1000)
    torch_tpu.set_eager_mode("defer_and_fuse")
    torch_tpu.reset_metrics()
    y = x_cpu.to(TPU)
    for _ in range(10):
        y = torch.sin(y) * 1.5 + 0.25
    result = y.cpu()
    metrics = torch_tpu.metrics()
    assert metrics["fused_ops"] >= 30
    assert metrics["executions"] < 10  # 30 ops ran as a handful of executables
    expected = x_cpu
    for _ in range(10):
        expected = torch.sin(expected) * 1.5 + 0.25
    torch.testing.assert_close(result, expected)


def test_defer_views_and_inplace_alias_like_cpu() -> None:
    def program(a: torch.Tensor) -> torch.Tensor:
        view = a[1:, ::2]
        view.mul_(3)
        a.t()[0].add_(1)
        return a * 2

    base = torch.randn(4, 6)
    torch_tpu.set_eager_mode("defer_and_fuse")
    on_tpu = base.to(TPU)
    out = program(on_tpu)
    expected = program(base.clone())
    torch.testing.assert_close(out.cpu(), expected)
    reference = base.clone()
    program(reference)
    torch.testing.assert_close(on_tpu.cpu(), reference)


def train_tiny_gpt(
    device: torch.device | str, steps: int, on_step: Callable[[int], None] | None = None
) -> list[float]:
    torch.manual_seed(0)
    model = TinyGPT(max_len=16)
    data = torch.randint(0, 64, (4, 17))
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    inputs, targets = data[:, :-1].to(device), data[:, 1:].to(device)
    step_fn = training_step(model, optimizer, inputs, targets)
    losses = []
    for step in range(steps):
        losses.append(step_fn().item())
        if on_step is not None:
            on_step(step)
    return losses


def test_defer_training_loop_compiles_nothing_after_second_step() -> None:
    torch_tpu.set_eager_mode("defer_and_fuse")
    compiles: list[int] = []
    losses = train_tiny_gpt(TPU, 6, lambda step: compiles.append(torch_tpu.metrics()["compiles"]))
    assert compiles[2:] == [compiles[1]] * 4, compiles
    torch.testing.assert_close(losses, train_tiny_gpt("cpu", 6), rtol=1e-4, atol=1e-5)


def test_defer_generate_loop_compiles_nothing_after_second_token() -> None:
    torch.manual_seed(0)
    cpu_model = TinyGPT().eval()
    tpu_model = TinyGPT().eval().to(TPU)
    tpu_model.load_state_dict(cpu_model.state_dict())
    prompt = [3, 14, 15, 9]
    expected = cpu_model.generate(prompt, 10)
    torch_tpu.set_eager_mode("defer_and_fuse")
    compiles: list[int] = []
    tokens = tpu_model.generate(
        prompt, 10, on_token=lambda _: compiles.append(torch_tpu.metrics()["compiles"])
    )
    assert tokens == expected
    assert compiles[2:] == [compiles[1]] * 8, compiles


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_filling_empty_slices_runs_and_compiles_nothing(mode: str) -> None:
    # Padding code fills the slice between a step's real and padded counts, often empty, at a
    # new offset each step: nothing to write, so nothing to compile or run.
    torch_tpu.set_eager_mode(mode)
    buffer = torch.arange(16, device=TPU)
    torch.tpu.synchronize()
    before = torch_tpu.metrics()
    for end in range(1, 6):
        buffer[end:end].fill_(-1)
        buffer[end:end].zero_()
        buffer[end:end].fill_(torch.tensor(3, device=TPU))
    assert buffer.cpu().tolist() == list(range(16))
    after = torch_tpu.metrics()
    assert after["compiles"] == before["compiles"]
    assert after["executions"] == before["executions"]
    # A non-empty fill still runs, and a bad value is refused as on CPU even for no elements.
    buffer[3:5].fill_(-1)
    assert buffer.cpu()[2:6].tolist() == [2, -1, -1, 5]
    with pytest.raises(RuntimeError, match="0-dimension value tensor"):
        buffer[3:3].fill_(torch.ones(2, device=TPU))


@pytest.mark.parametrize("mode", ["strict", "debug", "defer_and_fuse"])
def test_rng_repeats_under_manual_seed_in_every_mode(mode: str) -> None:
    torch_tpu.set_eager_mode(mode)  # type: ignore[arg-type]
    torch.tpu.manual_seed(123)
    a = torch.randn(16, device=TPU) + F.dropout(torch.ones(16, device=TPU), 0.5)
    torch.tpu.manual_seed(123)
    b = torch.randn(16, device=TPU) + F.dropout(torch.ones(16, device=TPU), 0.5)
    torch.testing.assert_close(a.cpu(), b.cpu())


def test_metrics_keys_and_reset() -> None:
    torch_tpu.set_eager_mode("strict")
    (torch.ones(3, device=TPU) + 1).cpu()
    metrics = torch_tpu.metrics()
    for key in ("compiles", "cache_hits", "cache_misses", "executions", "host_syncs", "fused_ops"):
        assert key in metrics
    assert metrics["executions"] > 0 and metrics["host_syncs"] > 0
    torch_tpu.reset_metrics()
    assert all(value == 0 for value in torch_tpu.metrics().values())
