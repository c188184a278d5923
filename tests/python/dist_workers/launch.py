"""Runs a worker script under torchrun with a hard time limit, so a hang fails fast and shows
every rank's output instead of eating the CI budget."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def run_bounded(
    name: str, command: list[str], *, timeout: float, env: dict[str, str] | None = None
) -> str:
    """Runs `command` (`name` in messages) in a session of its own, so that a time-out kills it
    and every process it started; returns its stdout, or raises with its output if it fails or
    outlives `timeout`."""
    process = subprocess.Popen(
        command,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"{name} did not finish in {timeout} s; output:\n{stdout[-6000:]}\n{stderr[-6000:]}"
        ) from None
    if process.returncode != 0:
        raise AssertionError(
            f"{name} exited {process.returncode}; output:\n{stdout[-6000:]}\n{stderr[-6000:]}"
        )
    return stdout


def run_script(
    script: Path,
    args: list[str] | None = None,
    *,
    nproc: int = 2,
    timeout: float = 240,
    env: dict[str, str] | None = None,
) -> None:
    """Runs `script args` under torchrun on `nproc` ranks; raises with every rank's output if it
    fails or outlives `timeout`."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command = [*launcher, f"--nproc-per-node={nproc}", str(script), *(args or [])]
    env = {"OMP_NUM_THREADS": "1", **(env or {})}
    run_bounded(script.name, command, timeout=timeout, env=env)


def torchrun(
    worker: str,
    results: Path,
    *,
    nproc: int = 2,
    timeout: float = 240,
    env: dict[str, str] | None = None,
) -> list[list[dict[str, Any]]]:
    """Runs HERE/worker on `nproc` ranks; returns each rank's JSON-lines results."""
    run_script(
        HERE / worker,
        nproc=nproc,
        timeout=timeout,
        env={"DIST_RESULTS": str(results), **(env or {})},
    )
    per_rank = []
    for rank in range(nproc):
        lines = Path(f"{results}.{rank}").read_text().splitlines()
        per_rank.append([json.loads(line) for line in lines])
    return per_rank


def by_case(per_rank: list[list[dict[str, Any]]]) -> list[dict[str, dict[str, Any]]]:
    """Each rank's results keyed by case name."""
    return [{r["case"]: r for r in rank} for rank in per_rank]


def assert_passed(results: list[dict[str, dict[str, Any]]], case: str) -> None:
    """`case` ran on every rank in `results` and reported no error."""
    for rank, cases in enumerate(results):
        assert case in cases, f"rank {rank} did not run {case}"
        assert cases[case]["error"] is None, f"rank {rank}: {cases[case]['error']}"


def once_per_run(tmp_path_factory: Any, key: str, compute: Callable[[], Any]) -> Any:
    """`compute()` (JSON-able) once per test run. Under pytest-xdist one module's tests may
    land on several workers: the first to arrive computes, the others wait on a lock and read
    its result, so a worker process is launched once per run."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        return compute()
    shared = tmp_path_factory.getbasetemp().parent  # the xdist workers' common folder
    with open(shared / f"{key}-{run_id}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = shared / f"{key}-{run_id}.json"
        if done.exists():
            return json.loads(done.read_text())
        result = compute()
        done.write_text(json.dumps(result))
        return result


def run_worker(
    tmp_path_factory: Any, worker: str, timeout: float
) -> list[dict[str, dict[str, Any]]]:
    """One torchrun launch of `worker` per test run, in a fresh folder ($DIST_TMP for the
    worker's files); each rank's results keyed by case name."""

    def launch() -> list[dict[str, dict[str, Any]]]:
        folder: Path = tmp_path_factory.mktemp(Path(worker).stem)
        env = {"DIST_TMP": str(folder)}
        return by_case(torchrun(worker, folder / "results", timeout=timeout, env=env))

    return once_per_run(tmp_path_factory, Path(worker).stem, launch)
