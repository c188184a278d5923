"""`vllm serve --data-parallel-size 2` on tpu: two engine cores, each with its own worker process
and device, behind one API server; concurrent requests are spread over both and answered with
transformers' greedy tokens."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from serving_helpers import MODEL, PROMPTS, VllmServer, cpu_greedy, served

# Two engine or worker processes beside the test's: the full tier (scripts/test_serving.sh --full).
pytestmark = pytest.mark.full_suite

MAX_TOKENS = 8
REQUESTS = 16


@pytest.fixture(scope="module")
def server(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    log = tmp_path_factory.mktemp("data_parallel") / "serve.log"
    with served(tiny_llama, log, ["--data-parallel-size", "2"]) as instance:
        yield instance


def _successes_by_engine(metrics: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith("vllm:request_success_total{"):
            engine = re.search(r'engine="(\d+)"', line)
            if engine:
                key = engine.group(1)
                found[key] = found.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


def test_two_engines_share_the_requests_and_answer_as_transformers(
    server: VllmServer, tiny_llama: Path
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    expected = {
        prompt: tokenizer.decode(ids, skip_special_tokens=True)
        for prompt, ids in zip(PROMPTS, cpu_greedy(tiny_llama, PROMPTS, MAX_TOKENS), strict=True)
    }
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(REQUESTS)]

    def complete(prompt: str) -> str:
        body = {"model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
        status, text = server.post("/v1/completions", body)
        assert status == 200, text
        return str(json.loads(text)["choices"][0]["text"])

    with ThreadPoolExecutor(max_workers=REQUESTS) as pool:
        answers = list(pool.map(complete, prompts))
    assert answers == [expected[p] for p in prompts]
    by_engine = _successes_by_engine(server.get("/metrics")[1])
    assert set(by_engine) == {"0", "1"}, by_engine
    assert sum(by_engine.values()) == REQUESTS
    assert min(by_engine.values()) > 0, f"one engine served nothing: {by_engine}"


def test_each_engine_runs_its_own_worker_on_tpu(server: VllmServer) -> None:
    log = server.log.read_text()
    assert "EngineCore_DP0" in log and "EngineCore_DP1" in log
    assert log.count("backend=tpu_dist") >= 2, "each engine's worker joins its group on tpu_dist"
