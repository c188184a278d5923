"""Builds torch_tpu's wheel and installs it the way a user does: into a fresh virtual
environment beside a pinned torch, with a plugin extra, then runs the README's snippet there.

    .venv/bin/python tools/wheel.py                  # against this venv's torch (2.13)
    .venv/bin/python tools/wheel.py --torch 2.14.1   # another torch release, in its own venv

With `--torch`, a build venv holding that torch is made (or reused) at `.venv-torch<release>`
and the extension is built in `build-torch<release>/`; the wheel is then installed into that
venv. Exits 1 when a check fails. `tests/python/test_wheel.py` and `bench/install.py` use the
functions here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The README's snippet: no `import torch_tpu`, the backend autoloads. It checks its own result.
SEED_SNIPPET = """
import torch

device = torch.device("tpu")
x = torch.randn((4, 4), device=device)
y = torch.ones((4, 4), device=device)
result = torch.matmul(x, y).cpu()
assert torch.allclose(result, x.cpu() @ y.cpu()), result
print(f"Executed on device: {x.device}")
"""


def clean_env() -> dict[str, str]:
    """The environment of a user's shell: nothing of this checkout's test or venv settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TORCH_TPU_", "TPU_", "PYTHON", "VIRTUAL_ENV"))
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(command: list[str], timeout: float, cwd: Path | None = None) -> str:
    """Runs `command` and returns its output; raises with that output when it fails."""
    proc = subprocess.run(
        command,
        cwd=cwd or tempfile.gettempdir(),
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(map(str, command))} exited {proc.returncode}:\n"
            f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc.stdout


def build_wheel(python: Path, out_dir: Path, build_dir: Path | None = None) -> Path:
    """`pip wheel` of the checkout with `python`'s torch (no build isolation: it would fetch
    another torch); CMake builds incrementally in `build_dir` (default build/)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env_build_dir = ["env", f"TORCH_TPU_BUILD_DIR={build_dir}"] if build_dir else []
    command = [*env_build_dir, str(python), "-m", "pip", "wheel", "-q", "--no-build-isolation"]
    run([*command, "--no-deps", "-w", str(out_dir), str(ROOT)], timeout=3600)
    # setuptools' staging (setup.py puts it there); only the CMake tree is worth keeping.
    shutil.rmtree((build_dir or ROOT / "build") / "setuptools", ignore_errors=True)
    return next(out_dir.glob("torch_tpu-*.whl"))


def make_venv(path: Path, requirements: list[str]) -> Path:
    """A virtual environment at `path` (reused when there) holding `requirements`, installed
    through pip's own configured indexes; returns its python."""
    python = path / "bin" / "python"
    if not python.exists():
        run([sys.executable, "-m", "venv", str(path)], timeout=300)
    if requirements:
        pip_install(python, requirements)
    return python


def pip_install(python: Path, requirements: list[str]) -> float:
    """Installs `requirements` into `python`'s venv; returns the seconds it took."""
    started = time.perf_counter()
    run([str(python), "-m", "pip", "install", "-q", *requirements], timeout=1800)
    return time.perf_counter() - started


def build_tree_references(wheel: Path, paths: list[Path]) -> list[str]:
    """Members of `wheel` that mention any of `paths` (the checkout, the build venv): an
    installed wheel must not depend on where it was built."""
    needles = [str(p).encode() for p in paths]
    found = []
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            data = archive.read(member)
            found += [f"{member}: {n.decode()}" for n in needles if n in data]
    return found


def runpath(python: Path) -> str:
    """The RUNPATH of the torch_tpu._C installed in `python`'s venv."""
    library = run(
        [
            str(python),
            "-c",
            "import importlib.util as u; print(u.find_spec('torch_tpu._C').origin)",
        ],
        timeout=120,
    ).strip()
    dynamic = run(["readelf", "-d", library], timeout=60)
    lines = [line for line in dynamic.splitlines() if "RUNPATH" in line or "RPATH" in line]
    return "\n".join(lines)


def check(torch_version: str | None) -> list[str]:
    """Builds, installs and runs; returns the problems found."""
    problems: list[str] = []
    if torch_version is None:
        python, build_dir, venv = Path(sys.executable), None, None
    else:
        release = ".".join(torch_version.split(".")[:2])
        venv = ROOT / f".venv-torch{release}"
        print(f"[wheel] build venv {venv} with torch=={torch_version}")
        python = make_venv(venv, [f"torch=={torch_version}", "numpy", "setuptools", "wheel"])
        build_dir = ROOT / f"build-torch{release}"
    with tempfile.TemporaryDirectory(prefix="torch_tpu_wheel_") as scratch:
        print("[wheel] building")
        wheel = build_wheel(python, Path(scratch) / "dist", build_dir)
        print(f"[wheel] {wheel.name}, {wheel.stat().st_size / 2**20:.1f} MiB")
        leaks = build_tree_references(wheel, [ROOT, Path(sys.prefix), python.parent.parent])
        problems += [f"build-tree path in the wheel: {leak}" for leak in leaks]
        if venv is None:  # the build venv is this checkout's own: install into a fresh one
            torch_pin = run([str(python), "-c", "import torch; print(torch.__version__)"], 60)
            venv = Path(scratch) / "venv"
            target = make_venv(venv, [f"torch=={torch_pin.strip().split('+')[0]}", "numpy"])
        else:
            target = python
        pip_install(target, ["--force-reinstall", "--no-deps", str(wheel)])
        pip_install(target, [f"{wheel}[cpu]"])
        print(f"[wheel] installed; RUNPATH: {runpath(target).split()[-1]}")
        for name, command in (
            ("snippet", [str(target), "-c", SEED_SNIPPET]),
            ("doctor", [str(target), "-m", "torch_tpu", "doctor"]),
        ):
            try:
                print(run(command, timeout=600, cwd=Path(scratch)).rstrip())
            except RuntimeError as error:
                problems.append(f"{name} failed: {error}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", help="build against this torch release, in its own venv")
    args = parser.parse_args()
    problems = check(args.torch)
    for problem in problems:
        print(f"[wheel] problem: {problem}")
    print("[wheel] ok" if not problems else f"[wheel] {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
