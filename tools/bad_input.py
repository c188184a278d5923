"""Runs the differential bad-input fuzz (torch_tpu/testing/bad_input.py) over every OpInfo entry
and writes docs/bad_input.md (the outcome counts, the agreement rate with CPU, the crash count,
every case that does not agree) and docs/bad_input.json, which tests/python/test_bad_input.py
reads: every case that agrees must keep agreeing.

    .venv/bin/python tools/bad_input.py [--jobs 2]

Entries run in worker processes, a chunk at a time; a chunk whose worker dies is rerun one
entry per process, so an entry that crashes the process is counted as a crash.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from torch_tpu.testing import bad_input
from torch_tpu.testing.workers import run_isolating_crashes

ROOT = Path(__file__).resolve().parent.parent
CHUNK = 25


def run_worker(start: int, stop: int) -> list[dict[str, Any]] | str:
    """The range's records, or how its worker died."""
    proc = subprocess.run(
        [sys.executable, "-m", "torch_tpu.testing.bad_input", f"{start}:{stop}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=3600,
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:160]
        return f"worker exited with status {proc.returncode}: {last}"
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def crash(index: int, how: str) -> dict[str, Any]:
    entry = {"index": index, "entry": f"op_db[{index}]", "perturbation": "?", "outcome": "crash"}
    return {**entry, "detail": how}


def run_chunk(start: int, stop: int) -> list[dict[str, Any]]:
    return run_isolating_crashes(run_worker, start, stop, crash)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    total = len(bad_input.entries())
    began = time.time()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        parts = pool.map(lambda s: run_chunk(s, min(s + CHUNK, total)), range(0, total, CHUNK))
        records = [r for part in parts for r in part]
    minutes = (time.time() - began) / 60
    counts = collections.Counter(r["outcome"] for r in records)
    cpu_raises = [r for r in records if r["outcome"] in ("agree", "different_error", "silent")]
    cpu_raises = [r for r in cpu_raises if r["detail"] != "both answer"]
    same_class = sum(r["outcome"] == "agree" for r in cpu_raises)
    perturbations = ", ".join(bad_input.PERTURBATIONS)
    lines = [
        "# Bad-input fuzz against CPU",
        "",
        f"`.venv/bin/python tools/bad_input.py` over {total} OpInfo entries: {len(records)} "
        f"perturbed calls in {minutes:.1f} min (perturbations: {perturbations}).",
        "",
        "| outcome | calls |",
        "|---|---|",
        *(
            f"| {name} | {counts.get(name, 0)} |"
            for name in ("agree", "different_error", "silent", "refused", "mismatch", "crash")
        ),
        "",
        f"Calls CPU refuses: {len(cpu_raises)}; tpu raises the same exception class for "
        f"{same_class} ({100.0 * same_class / max(len(cpu_raises), 1):.1f}%), another class for "
        f"{counts.get('different_error', 0)}, and answers {counts.get('silent', 0)}. "
        f"Crashes: {counts.get('crash', 0)}.",
        "",
        "## Cases that do not agree",
        "",
        "| entry | perturbation | outcome | detail |",
        "|---|---|---|---|",
    ]
    for r in sorted(records, key=lambda r: (r["outcome"], r["entry"], r["perturbation"])):
        if r["outcome"] != "agree":
            detail = r["detail"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {r['entry']} | {r['perturbation']} | {r['outcome']} | {detail} |")
    (ROOT / "docs" / "bad_input.md").write_text("\n".join(lines) + "\n")
    (ROOT / "docs" / "bad_input.json").write_text(json.dumps({"records": records}, indent=0) + "\n")
    print("\n".join(lines[:14]))


if __name__ == "__main__":
    main()
