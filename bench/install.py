"""What installing torch_tpu costs a user: the wheel's size, the time to install it into a
fresh virtual environment (beside the time torch itself takes there), and the time of
`import torch` with the backend autoloading next to plain `import torch`
(TORCH_DEVICE_BACKEND_AUTOLOAD=0), medians of fresh processes in that venv.

    .venv/bin/python bench/install.py [--imports 7]

The wheel is built from this checkout against this venv's torch (build/ is reused), so run
scripts/setup.sh first. pip installs through its own configured indexes; a warm pip cache
makes the install times those of a second install on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools import wheel as wheel_tool  # noqa: E402


def import_seconds(python: Path, code: str, autoload: bool, repeats: int) -> float:
    env = wheel_tool.clean_env()
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1" if autoload else "0"
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([str(python), "-c", code], env=env, check=True, timeout=300)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--imports", type=int, default=7, help="processes per import timing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="torch_tpu_install_") as scratch:
        root = Path(scratch)
        started = time.perf_counter()
        wheel = wheel_tool.build_wheel(Path(sys.executable), root / "dist")
        build_s = time.perf_counter() - started
        python = wheel_tool.make_venv(root / "venv", [])
        torch_s = wheel_tool.pip_install(
            python, [f"torch=={torch.__version__.split('+')[0]}", "numpy"]
        )
        ours_s = wheel_tool.pip_install(python, [f"{wheel}[cpu]"])
        plain = import_seconds(python, "import torch", False, args.imports)
        autoload = import_seconds(python, "import torch", True, args.imports)
        first_op = import_seconds(
            python, "import torch; torch.ones(2, device='tpu').cpu()", True, args.imports
        )
        site = python.parent.parent / "lib"
        ours_mb = sum(f.stat().st_size for f in site.rglob("torch_tpu/**/*") if f.is_file())
        wheel_mb = wheel.stat().st_size
    rows = [
        ("wheel", wheel.name),
        ("wheel size", f"{wheel_mb / 2**20:.1f} MiB"),
        ("installed torch_tpu", f"{ours_mb / 2**20:.1f} MiB"),
        ("wheel build (build/ reused)", f"{build_s:.1f} s"),
        ("pip install torch numpy (fresh venv)", f"{torch_s:.1f} s"),
        ("pip install torch_tpu[cpu] next to it", f"{ours_s:.1f} s"),
        ("import torch, autoload off", f"{plain:.2f} s"),
        ("import torch, torch_tpu autoloads", f"{autoload:.2f} s ({autoload / plain:.2f}x)"),
        ("  backend's share", f"{autoload - plain:.2f} s"),
        ("import torch + first tpu op", f"{first_op:.2f} s"),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"torch {torch.__version__}, {os.cpu_count()} cores")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
