"""Serving on tpu, timed: `vllm serve` with torch_tpu's platform plugin under 1, 8 and 32
concurrent streamed completions (output tokens/s and time to first token), next to SGLang's
server on tpu (torch_tpu.sglang, from its own environment) under the same loads and
transformers' `generate` on tpu with the same model and batch; and the compiles the vLLM server
made during the measured runs (0: the worker compiles every step shape at start, torch_tpu/vllm/
warm_up.py; `--warmup 0` skips the bench's own passes of the same loads and shows it). Then
RL's weight push (torch_tpu.vllm.weight_sync, recipes/rl): new weights into a running engine
through vLLM's weight-transfer API, as the trainer's device tensors (same process) and as host
bytes (another process's route), next to restarting the engine on a saved checkpoint: seconds,
uploads, bytes, compiles, and whether the next greedy tokens are the new weights'.

First, vLLM's decode step in its two modes side by side, DeferAndFuse (the default) and
compiled (TORCH_TPU_VLLM_COMPILE=1, torch_tpu/vllm/compiler.py), each in an offline engine of
its own process: the host time of the step's forward (the runner's execute_model, which
dispatches the model and returns before the device is done) and of the whole step (with
sampling, which waits for the tokens), the executions per step (torch_tpu.metrics()), output
tokens/s, and whether the two modes' greedy tokens are equal.

    .venv-serving/bin/python bench/serving.py [--tokens 32] [--layers 4 --hidden 256]
        [--sglang-python .venv-sglang/bin/python]   # "" leaves SGLang out
        [--only serve|decode|weight-push]           # one part alone

Needs the serving set-up (``bash scripts/setup_serving.sh``; for SGLang's rows
``bash scripts/setup_sglang.sh``). The model is a Llama built from a config with seeded weights
(torch_tpu.testing.tiny_llama), written to a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torch_tpu.testing.tiny_llama import make_tiny_llama  # noqa: E402

CONCURRENCY = (1, 8, 32)
PROMPT_WORDS = "tensor graph kernel token model cache batch request stream queue".split()


def prompts(count: int) -> list[str]:
    # Different lengths, as in real traffic: 4 to 13 words.
    return [" ".join(PROMPT_WORDS[: 4 + i % 10]) + f" {i}" for i in range(count)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def streamed_completion(url: str, prompt: str, tokens: int) -> tuple[float, int]:
    """(seconds to the first token, tokens received) of one streamed completion."""
    body = {
        "model": "bench",
        "prompt": prompt,
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    start = time.perf_counter()
    first = None
    received = 0
    with urllib.request.urlopen(request, timeout=300) as response:
        for line in response:
            text = line.decode().strip()
            if not text.startswith("data: ") or text == "data: [DONE]":
                continue
            chunk = json.loads(text[len("data: ") :])
            if chunk.get("usage"):
                received = chunk["usage"]["completion_tokens"]
            elif first is None and chunk["choices"] and chunk["choices"][0]["text"]:
                first = time.perf_counter() - start
    return (first if first is not None else float("nan")), received


def server_load(url: str, concurrency: int, tokens: int) -> tuple[float, float]:
    """(output tokens/s, median time to first token in ms) at this concurrency."""
    batch = prompts(concurrency)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(lambda p: streamed_completion(url, p, tokens), batch))
    elapsed = time.perf_counter() - start
    ttfts = sorted(r[0] for r in results)
    return sum(r[1] for r in results) / elapsed, 1000 * ttfts[len(ttfts) // 2]


def server_compiles(url: str) -> int:
    return int(
        post(url + "/collective_rpc", {"method": "torch_tpu_metrics"})["results"][0]["compiles"]
    )


def hf_generate(model_dir: Path, concurrency: int, tokens: int) -> tuple[float, float]:
    """transformers' greedy generate on tpu, the same prompts as one left-padded batch:
    (output tokens/s, ms to the first token, timed as a one-token generate)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to("tpu")
    batch = tokenizer(prompts(concurrency), return_tensors="pt", padding=True).to("tpu")

    def run(new_tokens: int) -> float:
        start = time.perf_counter()
        out = model.generate(
            **batch,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.eos_token_id,
        )
        out.cpu()
        return time.perf_counter() - start

    run(tokens)  # compiles
    run(1)
    elapsed = run(tokens)
    return concurrency * tokens / elapsed, 1000 * run(1)


def wait_healthy(server: subprocess.Popen[bytes], url: str, name: str, log: Path) -> None:
    deadline = time.monotonic() + 300
    while True:
        if server.poll() is not None:
            raise SystemExit(f"{name} exited; see {log}")
        try:
            urllib.request.urlopen(url + "/health", timeout=5)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{name} did not start in 300 s; see {log}") from None
            time.sleep(1)


def sglang_loads(
    python: str, model_dir: Path, work: Path, tokens: int, warmup: int
) -> dict[int, tuple[float, float]]:
    """SGLang's server on tpu under the same loads: (output tokens/s, median TTFT ms)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = work / "sglang.log"
    server = subprocess.Popen(
        [
            python,
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--device",
            "tpu",
            "--served-model-name",
            "bench",
            "--dtype",
            "float32",
            "--context-length",
            "512",
            "--max-running-requests",
            "32",
            "--max-total-tokens",
            str(32 * 512),
        ],  # fmt: skip
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_healthy(server, url, "sglang.launch_server", log)
        for _ in range(warmup):
            for concurrency in CONCURRENCY:
                server_load(url, concurrency, tokens)
        return {c: server_load(url, c, tokens) for c in CONCURRENCY}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


def weight_push(model_dir: Path, work: Path, repeats: int = 3) -> None:
    """RL's weight push into a running engine (this process) against a restart on a saved
    checkpoint: one table."""
    import gc
    import shutil

    import torch
    from vllm import SamplingParams

    import torch_tpu
    from torch_tpu.vllm.weight_sync import push_stats

    sys.path.insert(0, str(ROOT / "recipes" / "rl"))
    import grpo

    prompts_ids = [[0, 5 + i, 40 + i, 7] for i in range(4)]
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)

    def greedy(llm: Any) -> list[list[int]]:
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts_ids], params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    llm = grpo.make_engine(model_dir, max_model_len=128, max_num_seqs=8)
    policy = grpo.load_policy(model_dir)
    with torch.no_grad():  # other weights: the same model, perturbed
        for p in policy.parameters():
            p.add_(0.5 * torch.randn_like(p))
    first = greedy(llm)
    rows = []
    for label, host_bytes in (("push: device tensors (same process)", False),
                              ("push: host bytes (the cross-process payload)", True)):  # fmt: skip
        sender = grpo.make_sender(llm, policy, host_bytes=host_bytes)
        sender.send_weights()  # the first push compiles the loaders' copies
        received = push_stats(llm)
        before = torch_tpu.metrics()
        start = time.perf_counter()
        for _ in range(repeats):
            sender.send_weights()
        seconds = (time.perf_counter() - start) / repeats
        after = torch_tpu.metrics()
        stats = push_stats(llm)
        per = {k: (after[k] - before[k]) / repeats for k in ("uploads", "compiles", "executions")}
        rows.append((label, seconds, per, (stats.bytes - received.bytes) / repeats))
    pushed = greedy(llm)
    saved = work / "pushed"
    policy.to("cpu").save_pretrained(saved, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (model_dir / name).exists():
            shutil.copy(model_dir / name, saved / name)
    del llm
    gc.collect()
    before = torch_tpu.metrics()
    start = time.perf_counter()
    restarted = grpo.make_engine(saved, max_model_len=128, max_num_seqs=8)
    seconds = time.perf_counter() - start
    after = torch_tpu.metrics()
    per = {k: after[k] - before[k] for k in ("uploads", "compiles", "executions")}
    weight_bytes = sum(p.numel() * p.element_size() for p in policy.parameters())
    rows.append(("new engine on the saved checkpoint (restart)", seconds, per, weight_bytes))
    same = greedy(restarted) == pushed
    print(
        "\nRL weight push into a running vLLM engine on tpu (per push, after a first one), "
        "next to a restart of the engine on the same weights (warm-up from the compile cache)"
    )
    print("| route | seconds | uploads | bytes | compiles | executions | restart / route |")
    print("|---|---|---|---|---|---|---|")
    for label, secs, per, nbytes in rows:
        print(
            f"| {label} | {secs:.3f} | {per['uploads']:.0f} | {nbytes:.0f} | "
            f"{per['compiles']:.0f} | {per['executions']:.0f} | {seconds / secs:.0f}x |"
        )
    print(
        f"greedy tokens after the push changed: {pushed != first}; equal to the restarted "
        f"engine's: {same}"
    )


ENGINE_OPTIONS = {
    "dtype": "float32",
    "max_model_len": 512,
    "max_num_seqs": 32,
    "max_num_batched_tokens": 1024,
    "kv_cache_memory_bytes": 256 << 20,
    "seed": 0,
}


def decode_child(model_dir: Path, tokens: int) -> None:
    """In this process (its mode set by the parent's environment): per concurrency, the decode
    steps' host times and executions, and the tokens/s of a greedy batch; one JSON line."""
    import numpy as np
    from vllm import LLM, SamplingParams

    import torch_tpu

    llm = LLM(model=str(model_dir), **ENGINE_OPTIONS)
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    steps: list[tuple[float, float, int]] = []  # (forward s, whole step s, executions)
    execute, sample = runner.execute_model, runner.sample_tokens

    def timed_execute(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        decode = (
            not scheduler_output.scheduled_new_reqs
            and scheduler_output.total_num_scheduled_tokens > 0
            and scheduler_output.total_num_scheduled_tokens
            == len(scheduler_output.num_scheduled_tokens)
        )
        runner._bench_decode = decode
        runner._bench_executions = torch_tpu.metrics()["executions"]
        runner._bench_start = time.perf_counter()
        out = execute(scheduler_output, *args, **kwargs)
        runner._bench_forward = time.perf_counter() - runner._bench_start
        return out

    def timed_sample(*args: Any, **kwargs: Any) -> Any:
        out = sample(*args, **kwargs)
        if getattr(runner, "_bench_decode", False):
            steps.append(
                (
                    runner._bench_forward,
                    time.perf_counter() - runner._bench_start,
                    torch_tpu.metrics()["executions"] - runner._bench_executions,
                )
            )
        runner._bench_decode = False
        return out

    runner.execute_model, runner.sample_tokens = timed_execute, timed_sample
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    result: dict[str, Any] = {"compiles_after_warm_up": 0, "rows": {}, "tokens": {}}
    compiles = None
    for concurrency in CONCURRENCY:
        batch = prompts(concurrency)
        llm.generate(batch, params, use_tqdm=False)  # the same batch once, warming host paths
        if compiles is None:
            compiles = torch_tpu.metrics()["compiles"]
        steps.clear()
        start = time.perf_counter()
        outputs = llm.generate(batch, params, use_tqdm=False)
        elapsed = time.perf_counter() - start
        forward, whole, executions = (np.array(column) for column in zip(*steps, strict=True))
        result["rows"][concurrency] = {
            "forward_ms": 1000 * float(np.median(forward)),
            "step_ms": 1000 * float(np.median(whole)),
            "executions": float(np.mean(executions)),
            "tok_s": concurrency * tokens / elapsed,
        }
        result["tokens"][concurrency] = [list(o.outputs[0].token_ids) for o in outputs]
    result["compiles_after_warm_up"] = torch_tpu.metrics()["compiles"] - compiles
    print("DECODE " + json.dumps(result), flush=True)


def decode_modes(model_dir: Path, tokens: int) -> dict[str, Any]:
    """The decode-step figures of each mode, each from an engine in a process of its own."""
    results = {}
    for mode, compiled in (("defer_and_fuse", "0"), ("compiled", "1")):
        env = {
            **os.environ,
            "TORCH_TPU_VLLM_COMPILE": compiled,
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        }
        done = subprocess.run(
            [sys.executable, __file__, "--decode-child", str(model_dir), "--tokens", str(tokens)],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("DECODE ")]
        if done.returncode != 0 or not lines:
            raise SystemExit(f"the {mode} decode run failed:\n{done.stderr[-4000:]}")
        results[mode] = json.loads(lines[-1][len("DECODE ") :])
    return results


def print_decode_table(results: dict[str, Any], tokens: int) -> None:
    eager, compiled = results["defer_and_fuse"], results["compiled"]
    print(
        f"vLLM decode step, offline engine, greedy, {tokens} output tokens per request: "
        "DeferAndFuse vs compiled (TORCH_TPU_VLLM_COMPILE=1); host ms are medians over the "
        "decode steps"
    )
    print("| concurrent requests | forward host ms D&F | compiled | ratio | "
          "step ms D&F | compiled | executions/step D&F | compiled | "
          "tok/s D&F | compiled | ratio |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for c in CONCURRENCY:
        e, k = eager["rows"][str(c)], compiled["rows"][str(c)]
        print(
            f"| {c} | {e['forward_ms']:.2f} | {k['forward_ms']:.2f} | "
            f"{e['forward_ms'] / k['forward_ms']:.1f}x | {e['step_ms']:.2f} | "
            f"{k['step_ms']:.2f} | {e['executions']:.1f} | {k['executions']:.1f} | "
            f"{e['tok_s']:.0f} | {k['tok_s']:.0f} | {k['tok_s'] / e['tok_s']:.2f}x |"
        )
    same = eager["tokens"] == compiled["tokens"]
    print(
        f"greedy tokens equal in both modes: {same}; compiles after each mode's first batch: "
        f"D&F {eager['compiles_after_warm_up']}, compiled {compiled['compiles_after_warm_up']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=32, help="output tokens per request")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument(
        "--warmup", type=int, default=1, help="passes of the same loads before the measured one"
    )
    parser.add_argument(
        "--sglang-python",
        default=str(ROOT / ".venv-sglang" / "bin" / "python"),
        help="the SGLang environment's python (scripts/setup_sglang.sh); empty: no SGLang rows",
    )
    parser.add_argument(
        "--only",
        choices=("serve", "decode", "weight-push"),
        help="one part: the servers, the decode-step modes or RL's push",
    )
    parser.add_argument("--decode-child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.decode_child:
        decode_child(Path(args.decode_child), args.tokens)
        return

    work = Path(tempfile.mkdtemp(prefix="torch_tpu_serving_bench_"))
    model_dir = make_tiny_llama(work, layers=args.layers, hidden=args.hidden)
    if args.only == "weight-push":
        weight_push(model_dir, work)
        return
    decode = None if args.only == "serve" else decode_modes(model_dir, args.tokens)
    if args.only == "decode":
        print_decode_table(decode, args.tokens)
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (work / "serve.log").open("w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.cli.main",
            "serve",
            str(model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--served-model-name",
            "bench",
            "--dtype",
            "float32",
            "--max-model-len",
            "512",
            "--max-num-seqs",
            "32",
            "--max-num-batched-tokens",
            "1024",
            "--kv-cache-memory-bytes",
            str(256 << 20),
        ],  # fmt: skip
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "VLLM_SERVER_DEV_MODE": "1"},
    )
    try:
        wait_healthy(server, url, "vllm serve", work / "serve.log")
        for _ in range(args.warmup):  # the same loads, warming the server's Python paths
            for concurrency in CONCURRENCY:
                server_load(url, concurrency, args.tokens)
        compiles_before = server_compiles(url)
        served = {c: server_load(url, c, args.tokens) for c in CONCURRENCY}
        compiles_during = server_compiles(url) - compiles_before
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
    sglang = (
        sglang_loads(args.sglang_python, model_dir, work, args.tokens, args.warmup)
        if args.sglang_python and Path(args.sglang_python).exists()
        else None
    )
    generated = {c: hf_generate(model_dir, c, args.tokens) for c in CONCURRENCY}

    print(
        f"Llama {args.layers} layers x {args.hidden} hidden, float32, {args.tokens} output "
        f"tokens per request, greedy; eager mode of the server's worker: defer_and_fuse"
    )
    print("| concurrent requests | vllm serve tok/s | TTFT ms (median) | "
          "SGLang server tok/s | SGLang TTFT ms | "
          "HF generate on tpu tok/s | HF TTFT ms | vllm / HF | SGLang / HF |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for c in CONCURRENCY:
        rate, ttft = served[c]
        hf_rate, hf_ttft = generated[c]
        sg_rate, sg_ttft = sglang[c] if sglang else (float("nan"), float("nan"))
        print(
            f"| {c} | {rate:.0f} | {ttft:.1f} | {sg_rate:.0f} | {sg_ttft:.1f} | {hf_rate:.0f} | "
            f"{hf_ttft:.1f} | {rate / hf_rate:.2f}x | {sg_rate / hf_rate:.2f}x |"
        )
    print()
    if decode is not None:
        print_decode_table(decode, args.tokens)
        print()
    if sglang is None:
        print("SGLang: not measured (no SGLang environment: bash scripts/setup_sglang.sh)")
    else:
        print("SGLang's server: Strict eager mode, torch_native attention (torch_tpu.sglang)")
    print(
        f"compiles in the server during the measured runs (after {args.warmup} warm-up passes "
        f"of the same loads): {compiles_during}"
    )
    if args.only is None:
        weight_push(model_dir, work)


if __name__ == "__main__":
    main()
