"""The KV cache's budget where the device's memory is the host's RAM (the CPU plugin): vLLM's
defaults start and serve with a bounded cache instead of taking 92% of the machine's memory,
and explicit settings win (torch_tpu.kv_budget)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from serving_helpers import PROMPTS, cpu_greedy

from torch_tpu import kv_budget
from torch_tpu.kv_budget import GiB, kv_cache_budget

DEVICE = torch.device("tpu", 0)


def test_the_cpu_plugins_memory_is_the_hosts() -> None:
    assert kv_budget.memory_is_host(DEVICE)
    _, total = torch.tpu.mem_get_info(DEVICE)
    with open("/proc/meminfo") as meminfo:
        host_total = next(int(line.split()[1]) * 1024 for line in meminfo if "MemTotal" in line)
    assert total == host_total


def _budget(**settings: Any) -> kv_budget.KvBudget:
    args: dict[str, Any] = dict(
        explicit_bytes=None, fraction=0.92, fraction_is_explicit=False, peak=0
    )
    args.update(settings)
    return kv_cache_budget(DEVICE, **args)


def test_precedence_of_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(kv_budget.ENV, raising=False)
    default = _budget()
    assert default.source == "host-memory default"
    assert default.bytes == min(4 * GiB, int(default.free * 0.25))

    monkeypatch.setenv(kv_budget.ENV, "0.125")
    assert (_budget().bytes, _budget().source) == (GiB // 8, kv_budget.ENV)
    # The engine's own byte setting outranks the variable; the variable outranks a fraction.
    assert _budget(explicit_bytes=3 << 20).bytes == 3 << 20
    assert _budget(fraction=0.01, fraction_is_explicit=True).bytes == GiB // 8

    monkeypatch.delenv(kv_budget.ENV)
    explicit = _budget(fraction=0.02, fraction_is_explicit=True, peak=1 << 20)
    assert explicit.bytes == int(explicit.total * 0.02) - (1 << 20)
    assert explicit.source == "memory fraction 0.02"


def test_a_budget_beyond_the_available_host_memory_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(kv_budget.ENV, raising=False)
    _, total = torch.tpu.mem_get_info(DEVICE)
    with pytest.raises(ValueError, match="exceed the host memory available"):
        _budget(explicit_bytes=total)
    # A fraction asks for that share of the host's RAM, all of it here: more than is free.
    with pytest.raises(ValueError, match="exceed the host memory available"):
        _budget(fraction=1.0, fraction_is_explicit=True)
    monkeypatch.setenv(kv_budget.ENV, "abc")
    with pytest.raises(ValueError, match="GiB"):
        _budget()


@pytest.fixture(scope="module")
def default_llm(tiny_llama: Path) -> Iterator[Any]:
    from vllm import LLM

    with pytest.MonkeyPatch.context() as env:
        env.delenv(kv_budget.ENV, raising=False)
        # Only to keep the test short: the warm-up at vLLM's default limits (8192 batched
        # tokens, 256 sequences) compiles 134 step shapes in ~3 minutes on this machine.
        env.setenv("TORCH_TPU_VLLM_WARM_UP", "0")
        # Every memory setting left at vLLM's default. float32 (vLLM's default would downcast
        # this checkpoint to bfloat16) so that the tokens compare exactly with transformers':
        # bfloat16 rounds differently in the two implementations.
        engine = LLM(model=str(tiny_llama), dtype="float32")
        yield engine
        del engine


def test_vllms_defaults_start_and_serve_with_a_bounded_kv_cache(
    default_llm: Any, tiny_llama: Path
) -> None:
    from vllm import SamplingParams

    (report,) = default_llm.collective_rpc("kv_cache_report")
    assert report["host_memory"]
    assert report["source"] == "host-memory default"
    # min(4 GiB, a quarter of the memory available when the cache was sized), far below the
    # 92% of the host's RAM that vLLM's gpu_memory_utilization would have taken.
    assert report["bytes"] == min(4 * GiB, int(report["free"] * 0.25))
    assert report["bytes"] <= report["total"] // 4
    # vLLM carves whole blocks out of the budget: the cache's tensors hold at most the budget
    # and all but the remainder of a block per layer.
    assert 0.99 * report["bytes"] < report["allocated"] <= report["bytes"]

    outputs = default_llm.generate(
        PROMPTS, SamplingParams(temperature=0, max_tokens=8), use_tqdm=False
    )
    tokens = [list(out.outputs[0].token_ids) for out in outputs]
    assert tokens == cpu_greedy(tiny_llama, PROMPTS, 8)
