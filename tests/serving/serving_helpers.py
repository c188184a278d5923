"""What the serving tests share: prompts, transformers' CPU reference, the offline engine and
`vllm serve` on a loopback port."""

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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MODEL = "tiny"  # the served model's name
START_TIMEOUT_S = 180
REQUEST_TIMEOUT_S = 60
PROMPTS = [
    "the device",
    "a token of the model cache batch request with a queue",
    "greedy",
    "prefix block page decode prefill sample greedy router load metric gauge latency",
]


def tiny_engine(model: Path, **options: Any) -> Any:
    """vLLM's offline engine over a tiny test model with the tests' small budget (float32, 256
    tokens, 8 sequences, a 32 MiB KV cache, seed 0), its engine core in this process so that
    torch_tpu.metrics() count its compiles; `options` add to or replace LLM's arguments."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM

    settings: dict[str, Any] = {
        "dtype": "float32",
        "max_model_len": 256,
        "max_num_batched_tokens": 256,
        "max_num_seqs": 8,
        "kv_cache_memory_bytes": 32 << 20,
        "seed": 0,
    }
    return LLM(model=str(model), **{**settings, **options})


def cpu_greedy(model_dir: Path, prompts: list[str], max_new_tokens: int) -> list[list[int]]:
    """transformers' greedy generate on CPU: the reference tokens (EOS included, then stop)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    results = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
        results.append(out[0, ids.shape[1] :].tolist())
    return results


def make_deeper_llama(draft_dir: Path, root: Path, extra_layers: int, scale: float) -> Path:
    """A larger Llama that a small one (`draft_dir`) can draft for: the small one's weights
    and tokenizer, plus `extra_layers` seeded layers whose outputs (attention's o_proj and the
    MLP's down_proj) are scaled by `scale`. At 0 the extra layers add nothing and the larger
    model predicts what the small one does; above 0 it departs from it now and then."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    path = root / f"deeper-{draft_dir.name}-{extra_layers}-{scale:g}"
    if (path / "model.safetensors").exists():
        return path
    small = AutoModelForCausalLM.from_pretrained(draft_dir, dtype=torch.float32)
    config = small.config
    config.num_hidden_layers += extra_layers
    torch.manual_seed(1)
    large = LlamaForCausalLM(config)
    missing, _ = large.load_state_dict(small.state_dict(), strict=False)
    assert all(".layers." in name for name in missing), missing
    with torch.no_grad():
        for layer in large.model.layers[-extra_layers:]:
            layer.self_attn.o_proj.weight.mul_(scale)
            layer.mlp.down_proj.weight.mul_(scale)
    large.save_pretrained(path, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (draft_dir / name).exists():
            shutil.copy(draft_dir / name, path / name)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class VllmServer:
    """`vllm serve` of a test model on a loopback port, with the tests' small budget, the
    structured-output and tool-call settings, and `extra_args` after them; every wait bounded."""

    def __init__(self, model_dir: Path, log: Path, extra_args: Sequence[str] = ()) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = log
        command = [
            sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model_dir),
            "--host", "127.0.0.1", "--port", self.url.rsplit(":", 1)[1],
            "--served-model-name", MODEL, "--dtype", "float32", "--max-model-len", "256",
            "--max-num-batched-tokens", "256", "--max-num-seqs", "8",
            "--kv-cache-memory-bytes", str(32 << 20), "--enable-prefix-caching", "--seed", "0",
            # Compact JSON: a random model would otherwise pad it with whitespace.
            "--structured-outputs-config",
            '{"backend": "xgrammar", "disable_any_whitespace": true}',
            # Tool calls: vLLM's Hermes parser reads <tool_call>{...}</tool_call> from the reply.
            "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
            *extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={
                **os.environ,
                # Dev mode serves /collective_rpc, through which the test reads the worker's
                # counters.
                "VLLM_SERVER_DEV_MODE": "1",
                # Named and required tool choices through the tools' JSON schema, which keeps
                # disable_any_whitespace (Hermes' structural tag lets a random model write
                # whitespace until max_tokens).
                "VLLM_ENFORCE_STRICT_TOOL_CALLING": "0",
            },
        )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"vllm serve exited:\n{self.log.read_text()[-4000:]}")
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(1)
        raise AssertionError(f"vllm serve not ready in {START_TIMEOUT_S} s")

    def get(self, path: str) -> tuple[int, str]:
        with urllib.request.urlopen(self.url + path, timeout=REQUEST_TIMEOUT_S) as response:
            return response.status, response.read().decode()

    def post(self, path: str, body: bytes | dict[str, Any]) -> tuple[int, Any]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def stop(self) -> int:
        """SIGINT, as Ctrl-C; the process group is killed if it is not gone in 60 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                return self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
                raise AssertionError("vllm serve did not stop within 60 s of SIGINT") from None
        return int(self.process.returncode)


@contextmanager
def served(model_dir: Path, log: Path, extra_args: Sequence[str] = ()) -> Iterator[VllmServer]:
    """A VllmServer, ready, stopped (SIGINT) on the way out unless a test stopped it."""
    instance = VllmServer(model_dir, log, extra_args)
    try:
        instance.wait_ready()
        yield instance
    finally:
        if instance.process.poll() is None:
            instance.stop()
