"""SGLang's HTTP server on tpu (`python -m sglang.launch_server --device tpu`): greedy tokens of
the native /generate equal transformers' on CPU, concurrent requests, OpenAI completions and a
streamed chat, SGLang's error for a bad request with the server serving on. The server runs on a
loopback port for the module; every wait is bounded."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from serving_helpers import PROMPTS, cpu_greedy

MODEL = "tiny"
MAX_TOKENS = 12
START_TIMEOUT_S = 300
REQUEST_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    def __init__(self, model_dir: Path, log: Path) -> None:
        self.url = f"http://127.0.0.1:{_free_port()}"
        self.log = log
        command = [
            sys.executable, "-m", "sglang.launch_server", "--model-path", str(model_dir),
            "--host", "127.0.0.1", "--port", self.url.rsplit(":", 1)[1], "--device", "tpu",
            "--served-model-name", MODEL, "--dtype", "float32", "--context-length", "256",
            "--max-total-tokens", "4096", "--random-seed", "0",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited:\n{self.log.read_text()[-4000:]}")
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(1)
        raise AssertionError(f"the server was not ready in {START_TIMEOUT_S} s")

    def get(self, path: str) -> tuple[int, str]:
        with urllib.request.urlopen(self.url + path, timeout=REQUEST_TIMEOUT_S) as response:
            return response.status, response.read().decode()

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, str]:
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def server(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = Server(tiny_llama, tmp_path_factory.mktemp("sglang") / "server.log")
    try:
        running.wait_ready()
        yield running
    finally:
        running.stop()


def _generate(server: Server, prompt: str) -> list[int]:
    status, body = server.post(
        "/generate",
        {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": MAX_TOKENS}},
    )
    assert status == 200, body
    return list(json.loads(body)["output_ids"])


def test_generate_matches_transformers_on_cpu(server: Server, tiny_llama: Path) -> None:
    expected = cpu_greedy(tiny_llama, PROMPTS, MAX_TOKENS)
    assert [_generate(server, prompt) for prompt in PROMPTS] == expected


def test_concurrent_requests(server: Server, tiny_llama: Path) -> None:
    prompts = PROMPTS * 2
    with ThreadPoolExecutor(len(prompts)) as pool:
        results = list(pool.map(lambda p: _generate(server, p), prompts))
    assert results == cpu_greedy(tiny_llama, PROMPTS, MAX_TOKENS) * 2


def test_openai_completion_and_streamed_chat(server: Server, tiny_llama: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    expected = cpu_greedy(tiny_llama, PROMPTS[:1], MAX_TOKENS)[0]
    status, body = server.post(
        "/v1/completions",
        {"model": MODEL, "prompt": PROMPTS[0], "max_tokens": MAX_TOKENS, "temperature": 0},
    )
    assert status == 200, body
    text = json.loads(body)["choices"][0]["text"]
    assert text == tokenizer.decode(expected, skip_special_tokens=True)

    request = urllib.request.Request(
        server.url + "/v1/chat/completions",
        data=json.dumps(
            {
                "model": MODEL,
                "messages": [{"role": "user", "content": "the device"}],
                "max_tokens": MAX_TOKENS,
                "temperature": 0,
                "stream": True,
            }
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    events = []
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
        for raw in response:
            line = raw.decode().strip()
            if line.startswith("data: "):
                events.append(line[len("data: ") :])
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    streamed = "".join(delta.get("content") or "" for delta in deltas)
    assert len(chunks) > 2 and streamed


def test_a_bad_request_gets_sglangs_error_and_the_server_serves_on(
    server: Server, tiny_llama: Path
) -> None:
    status, body = server.post(
        "/v1/completions",
        {"model": MODEL, "prompt": PROMPTS[0], "max_tokens": MAX_TOKENS, "temperature": -3},
    )
    assert status == 400, body
    assert "temperature" in body
    assert _generate(server, PROMPTS[2]) == cpu_greedy(tiny_llama, PROMPTS[2:3], MAX_TOKENS)[0]
