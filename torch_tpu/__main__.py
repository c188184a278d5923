"""``python -m torch_tpu doctor`` and ``python -m torch_tpu compare script.py``.

doctor: what torch_tpu runs on (plugin, PJRT API, devices and their memory, versions, the
compile cache, the eager mode, the environment variables in effect) and a self-test of at most
about ten seconds; exits 1 with a line saying how to fix each problem it finds.

diagnose: ``python -m torch_tpu diagnose TRACE_DIR_OR_SCRIPT`` (see torch_tpu/diagnose).

docs: ``python -m torch_tpu docs QUESTION [--json]``: the documentation's best passages for a
question, with ``page#section`` citations, searched offline (see torch_tpu/docs).

compare: runs ``script.py``, which defines ``model`` (on tpu) and ``inputs`` (a tuple) at module
level, through ``torch_tpu.debug.compare_with_cpu`` and prints the report.
"""

from __future__ import annotations

import os
import runpy
import sys
import tempfile
import time
from pathlib import Path

import torch

import torch_tpu


def cache_dir() -> Path | None:
    """The persistent compile cache folder, as csrc/dispatch/disk_cache.cc picks it."""
    if "TORCH_TPU_CACHE_DIR" in os.environ:
        value = os.environ["TORCH_TPU_CACHE_DIR"]
        return Path(value) if value else None
    base = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")
    return Path(base) / "torch_tpu"


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def self_test() -> str | None:
    """None when eager, DeferAndFuse and compiled results match CPU; else what went wrong."""
    torch.manual_seed(0)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    want = torch.tanh(a @ b).sum(0)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ y).sum(0)

    runs = {
        "eager": lambda: step(a.to("tpu"), b.to("tpu")),
        "compiled": lambda: torch.compile(step, backend="tpu")(a.to("tpu"), b.to("tpu")),
    }
    for name, run in runs.items():
        try:
            got = run().cpu()
        except Exception as error:  # noqa: BLE001 - reported, not raised
            return f"{name} run failed: {type(error).__name__}: {error}"
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
            return f"{name} result differs from CPU by {(got - want).abs().max():.3g}"
    return None


def doctor() -> int:
    problems: list[str] = []
    print(f"torch          {torch.__version__}")
    print(f"torch_tpu      {torch_tpu.__version__}")
    start_error = torch_tpu._state.get("start_error") or torch_tpu._state.get("unavailable")
    if start_error is not None:
        print(f"start          failed: {type(start_error).__name__}: {start_error}")
        print(
            "fix: install a PJRT plugin for this machine (see the message above), or point "
            "TORCH_TPU_PJRT_PLUGIN at one; `bash scripts/setup.sh` installs the CPU plugin"
        )
        return 1
    info = torch_tpu.version_info()
    print(f"plugin         {info['plugin']}")
    print(f"platform       {info['platform']}")
    print(
        f"PJRT C API     {info['pjrt_api']} (torch_tpu built with the {info['pjrt_header']} header)"
    )
    for index in torch.tpu._local_device_indices():
        free, total = torch.tpu.mem_get_info(index)
        name = torch.tpu.get_device_name(index)
        print(f"device tpu:{index}  {name}, {total / 2**30:.1f} GiB ({free / 2**30:.1f} GiB free)")
    folder = cache_dir()
    if folder is None:
        print("compile cache  disabled (TORCH_TPU_CACHE_DIR is empty)")
    else:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder):
                pass
            print(f"compile cache  {folder} ({folder_bytes(folder) / 2**20:.1f} MiB)")
        except OSError as error:
            print(f"compile cache  {folder}: not writable ({error.strerror})")
            problems.append(
                f"the compile cache folder {folder} is not writable: set TORCH_TPU_CACHE_DIR to "
                "a writable folder (or to an empty value to disable the cache)"
            )
    print(f"eager mode     {torch_tpu.get_eager_mode()}")
    settings = sorted(k for k in os.environ if k.startswith(("TORCH_TPU_", "TPU_")))
    for key in settings:
        print(f"env            {key}={os.environ[key]}")
    started = time.perf_counter()
    failure = self_test()
    seconds = time.perf_counter() - started
    print(f"self-test      {'failed: ' + failure if failure else 'passed'} ({seconds:.1f} s)")
    if failure:
        problems.append(
            "the self-test failed: check that the plugin matches this torch_tpu build "
            "(reinstall with `bash scripts/setup.sh`), and report the line above"
        )
    for problem in problems:
        print(f"fix: {problem}")
    return 1 if problems else 0


def compare(script: str) -> int:
    from torch_tpu.debug import compare_with_cpu

    namespace = runpy.run_path(script)
    if "model" not in namespace or "inputs" not in namespace:
        print(f"{script} must define `model` and `inputs` at module level", file=sys.stderr)
        return 2
    report = compare_with_cpu(namespace["model"], *namespace["inputs"])
    print(report)
    return 0 if report.first_divergence is None else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["doctor"]:
        return doctor()
    if argv[:1] == ["compare"] and len(argv) == 2:
        return compare(argv[1])
    if argv[:1] == ["diagnose"]:
        from torch_tpu.diagnose.cli import main as diagnose

        return diagnose(argv[1:])
    if argv[:1] == ["docs"]:
        from torch_tpu.docs.cli import main as docs

        return docs(argv[1:])
    print(
        "usage: python -m torch_tpu doctor | compare script.py | diagnose TRACE_DIR_OR_SCRIPT"
        " | docs QUESTION",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
