"""Runs the OpInfo differential sweep and writes docs/op_coverage.md and docs/op_coverage.json.

    .venv/bin/python tools/op_coverage.py [--jobs N] [--failing-only]

Entries run in worker processes, a chunk at a time; a chunk whose worker dies is rerun one
entry per process, so an entry that crashes the process is classified "crash" and the sweep
goes on. Entries that fail natively with NotImplementedError run again with the CPU fallback
on (TORCH_TPU_CPU_FALLBACK=1); those passes are counted apart from native ones.

`--failing-only` reruns just the entries the current report lists as not passing in some
phase or as set aside, and merges them in (after new kernels: the entries that pass are kept
passing by the regression gate, tests/python/test_op_coverage.py); the whole-sweep time stays
the last full run's.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from torch_tpu.testing import op_sweep
from torch_tpu.testing.workers import run_isolating_crashes

ROOT = Path(__file__).resolve().parent.parent
CHUNK = 20


def run_worker(
    start: int, stop: int, indices: list[int] | None = None, fallback: bool = False
) -> list[dict[str, Any]] | str:
    """The chunk's results, or how its worker died (exit status and last stderr line)."""
    spec = ",".join(map(str, indices)) if indices is not None else f"{start}:{stop}"
    env = dict(os.environ, TORCH_TPU_CPU_FALLBACK="1") if fallback else None
    proc = subprocess.run(
        [sys.executable, "-m", "torch_tpu.testing.op_sweep", spec],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=3600,
        env=env,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:160]
        return f"worker exited with status {proc.returncode}: {last}"
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def run_chunk(start: int, stop: int) -> list[dict[str, Any]]:
    return run_isolating_crashes(run_worker, start, stop, lambda i, how: {"index": i, "crash": how})


def natively_missing(r: dict[str, Any]) -> bool:
    return any(r.get(phase, [""])[0] == "not_implemented" for phase in ("float32", "backward"))


def run_fallback(results: list[dict[str, Any]], jobs: int) -> None:
    """Reruns natively missing entries with the CPU fallback; results under r["fallback"]."""
    todo = [r["index"] for r in results if natively_missing(r)]
    groups = [todo[i : i + CHUNK] for i in range(0, len(todo), CHUNK)]

    def run_group(group: list[int]) -> list[dict[str, Any]]:
        out = run_worker(0, 0, group, fallback=True)
        if not isinstance(out, str):
            return out
        singles: list[dict[str, Any]] = []
        for i in group:
            single = run_worker(0, 0, [i], fallback=True)
            singles.extend(
                single if not isinstance(single, str) else [{"index": i, "crash": single}]
            )
        return singles

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        parts = list(pool.map(run_group, groups))
    by_index = {r["index"]: r for r in results}
    for part in parts:
        for r in part:
            if r.get("crash"):
                by_index[r["index"]]["fallback"] = {"float32": ["crash", r["crash"]]}
            else:
                by_index[r["index"]]["fallback"] = {
                    phase: r[phase] for phase in ("float32", "backward") if phase in r
                }


def percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "n/a"


def missing_op(reason: str) -> str | None:
    match = re.search(r"operator '([^']+)'", reason)
    return match.group(1) if match else None


def not_passing(r: dict[str, Any]) -> bool:
    return "set_aside" not in r and any(
        r.get(phase, ["pass"])[0] != "pass" for phase in ("float32", "bfloat16", "backward")
    )


def refresh_failing(jobs: int) -> None:
    report = json.loads((ROOT / "docs" / "op_coverage.json").read_text())
    results: list[dict[str, Any]] = report["results"]
    # Set-aside entries are asked again: what the device offers grows (complex dtypes did).
    todo = [r["index"] for r in results if not_passing(r) or r.get("crash") or "set_aside" in r]
    groups = [todo[i : i + CHUNK // 4] for i in range(0, len(todo), CHUNK // 4)]

    def run_group(group: list[int]) -> list[dict[str, Any]]:
        out = run_worker(0, 0, group)
        if not isinstance(out, str):
            return out
        singles: list[dict[str, Any]] = []
        for i in group:
            single = run_worker(0, 0, [i])
            singles.extend(
                single if not isinstance(single, str) else [{"index": i, "crash": single}]
            )
        return singles

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        parts = list(pool.map(run_group, groups))
    fresh = {r["index"]: r for part in parts for r in part}
    merged = [fresh.get(r["index"], r) for r in results]
    run_fallback([r for r in merged if r["index"] in fresh], jobs)
    write_report(merged, float(report["seconds"]))


def write_report(results: list[dict[str, Any]], seconds: float) -> None:
    from torch.testing._internal.common_methods_invocations import op_db

    for r in results:
        if r.get("crash"):
            op = op_db[r["index"]]
            r["name"] = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
            r["float32"] = ["crash", r["crash"]]
    evaluated = [r for r in results if "set_aside" not in r]
    set_aside = [r for r in results if "set_aside" in r]
    statuses = collections.Counter(r["float32"][0] for r in evaluated)
    bf16 = [r for r in evaluated if "bfloat16" in r]
    backward = [r for r in evaluated if "backward" in r]
    bf16_pass = sum(r["bfloat16"][0] == "pass" for r in bf16)
    backward_pass = sum(r["backward"][0] == "pass" for r in backward)
    missing = collections.Counter(
        op
        for r in evaluated
        for phase in ("float32", "bfloat16", "backward")
        if phase in r and (op := missing_op(r[phase][1]))
    )
    (ROOT / "docs" / "op_coverage.json").write_text(
        json.dumps(
            {"entries": len(results), "seconds": round(seconds), "results": results}, indent=1
        )
    )
    lines = [
        "# Operator coverage: PyTorch's OpInfo suite on `tpu`",
        "",
        "Generated by `.venv/bin/python tools/op_coverage.py` (do not edit by hand). Each "
        "`op_db` entry's samples run on tpu and on CPU and are compared with the entry's own "
        "tolerances where it declares them (else atol=rtol=1e-4 for float32, 2e-2 for "
        "bfloat16). Random and uninitialized results are compared by shape and dtype. The "
        "forward column runs in float32; an entry without float32 (bitwise and integer ops, "
        "complex-only ops) runs in its own first dtype instead (int64, int32, bool, uint8 or "
        "complex64, also for its gradients), listed below. Complex results are compared as "
        "complex numbers (1e-4) and weighted through their real and imaginary parts for "
        "gradients.",
        "",
        f"Whole sweep: {len(results)} entries in {seconds / 60:.1f} minutes (the last full run; "
        "`--failing-only` refreshes just the entries that did not pass).",
        "",
        "| measure | count | of | share |",
        "| --- | --- | --- | --- |",
        f"| forward float32 pass | {statuses['pass']} | {len(evaluated)} evaluated | "
        f"{percent(statuses['pass'], len(evaluated))} |",
        f"| forward bfloat16 pass | {bf16_pass} | {len(bf16)} with bfloat16 | "
        f"{percent(bf16_pass, len(bf16))} |",
        f"| backward pass | {backward_pass} | {len(backward)} with autograd | "
        f"{percent(backward_pass, len(backward))} |",
    ]
    for status in ("mismatch", "not_implemented", "error", "crash", "skip"):
        lines.append(f"| forward float32 {status} | {statuses[status]} | | |")
    fallback = [r for r in evaluated if "fallback" in r]
    fallback_fwd = sum(
        r["float32"][0] == "not_implemented" and r["fallback"].get("float32", [""])[0] == "pass"
        for r in fallback
    )
    fallback_bwd = sum(
        r.get("backward", [""])[0] == "not_implemented"
        and r["fallback"].get("backward", [""])[0] == "pass"
        for r in fallback
    )
    native_or_fallback = statuses["pass"] + fallback_fwd
    lines += [
        f"| forward float32 pass only with the CPU fallback | {fallback_fwd} | "
        f"{statuses['not_implemented']} natively missing | |",
        f"| forward float32 pass, native or CPU fallback | {native_or_fallback} | "
        f"{len(evaluated)} evaluated | {percent(native_or_fallback, len(evaluated))} |",
        f"| backward pass only with the CPU fallback | {fallback_bwd} | | |",
        f"| backward pass, native or CPU fallback | {backward_pass + fallback_bwd} | "
        f"{len(backward)} with autograd | {percent(backward_pass + fallback_bwd, len(backward))} |",
    ]
    lines += [
        "",
        f"Set aside ({len(set_aside)}): layouts and dtypes the device does not offer.",
        "",
    ]
    lines += [f"- `{r['name']}`: {r['set_aside']}" for r in set_aside]
    lines += [
        "",
        "## Most wanted missing kernels",
        "",
        "| aten op | entries blocked |",
        "| --- | --- |",
    ]
    lines += [f"| `{op}` | {count} |" for op, count in missing.most_common(40)]
    own_dtype = [f"`{r['name']}` ({r['forward_dtype']})" for r in evaluated if "forward_dtype" in r]
    lines += [
        "",
        f"Forward run in the entry's own dtype ({len(own_dtype)}): " + ", ".join(own_dtype) + ".",
    ]

    def noted(note: str) -> list[str]:
        return [
            f"`{r['name']}` ({phase}: {part})"
            for r in evaluated
            for phase in ("float32", "bfloat16")
            if r.get(phase, [""])[0] == "pass"
            for part in r[phase][1].split("; ")
            if part.startswith(note)
        ]

    outvoted = noted(op_sweep.OUTVOTED)
    tied = noted(op_sweep.TIED)
    lines += [
        "",
        f"Passes where CPU's result is the outlier ({len(outvoted)}): tpu's result agrees with "
        "the same computation in float64 on CPU within the entry's tolerances and CPU's own "
        "float32 or bfloat16 result does not. " + ", ".join(outvoted) + ".",
        "",
        f"Passes where positions differ among ties ({len(tied)}): tpu's values agree with CPU's, "
        "and the input read at tpu's positions gives exactly those values; the op does not "
        "promise which of several equal elements it reports (a stable sort must match CPU's "
        "positions and does). " + ", ".join(tied) + ".",
    ]
    lines += [
        "",
        "## Every entry that does not pass",
        "",
        "| entry | float32 | bfloat16 | backward |",
        "| --- | --- | --- | --- |",
    ]

    def cell(r: dict[str, Any], phase: str) -> str:
        if phase not in r:
            return ""
        status, reason = r[phase]
        text = status if status == "pass" else f"{status}: {reason}".replace("|", "\\|")
        with_fallback = r.get("fallback", {}).get(phase)
        if status == "not_implemented" and with_fallback is not None:
            text += f" (CPU fallback: {with_fallback[0]})"
        return text

    for r in evaluated:
        if any(r.get(p, ["pass"])[0] != "pass" for p in ("float32", "bfloat16", "backward")):
            lines.append(
                f"| `{r['name']}` | {cell(r, 'float32')} | {cell(r, 'bfloat16')} | "
                f"{cell(r, 'backward')} |"
            )
    (ROOT / "docs" / "op_coverage.md").write_text("\n".join(lines) + "\n")
    print(
        f"forward float32 pass {statuses['pass']}/{len(evaluated)}, bfloat16 "
        f"{bf16_pass}/{len(bf16)}, backward {backward_pass}/{len(backward)}; "
        f"mismatch {statuses['mismatch']}, crash {statuses['crash']}; with CPU fallback: "
        f"forward +{fallback_fwd}, backward +{fallback_bwd}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="only the first N entries")
    parser.add_argument(
        "--failing-only", action="store_true", help="rerun only the entries that do not pass"
    )
    args = parser.parse_args()
    if args.failing_only:
        refresh_failing(args.jobs)
        return
    from torch.testing._internal.common_methods_invocations import op_db

    total = len(op_db) if args.limit is None else min(args.limit, len(op_db))
    start_time = time.time()
    chunks = [(s, min(s + CHUNK, total)) for s in range(0, total, CHUNK)]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        parts = list(pool.map(lambda c: run_chunk(*c), chunks))
    results = sorted((r for part in parts for r in part), key=lambda r: r["index"])
    run_fallback(results, args.jobs)
    write_report(results, time.time() - start_time)


if __name__ == "__main__":
    main()
