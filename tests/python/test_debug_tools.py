"""torch_tpu.debug.compare_with_cpu: a model matching CPU is reported clean; with one op made
wrong on purpose on tpu (its kernel overridden through torch.library, in a child process), the
report names the first module whose output leaves tolerance and the ops it ran. Also the
`python -m torch_tpu doctor` and `compare` commands."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from conftest import TPU

from torch_tpu.debug import compare_with_cpu


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(8, 16)
        self.act = torch.nn.GELU()
        self.head = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.embed(x)))


def test_matching_model_is_clean() -> None:
    torch.manual_seed(0)
    model = Net().to(TPU)
    report = compare_with_cpu(model, torch.randn(4, 8))
    assert report.first_divergence is None, str(report)
    assert report.gradient_mismatches == []
    assert report.modules_checked == 6  # the model, embed, act, head, head.0, head.1


PLANTED = textwrap.dedent(
    """
    import torch
    from test_debug_tools import Net
    from torch_tpu.debug import compare_with_cpu

    # The test-only switch: GELU on tpu computes x * sigmoid(x) instead.
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("gelu", lambda x, approximate="none": x * torch.sigmoid(x), "PrivateUse1")
    torch.manual_seed(0)
    report = compare_with_cpu(Net().to("tpu"), torch.randn(4, 8))
    d = report.first_divergence
    print("MODULE", d.module, d.module_type)
    print("OPS", ",".join(d.ops))
    print("GRADS", ",".join(report.gradient_mismatches))
    print(report)
    """
)


def test_planted_divergence_names_its_module() -> None:
    env = {**os.environ, "PYTHONPATH": os.path.dirname(__file__)}
    proc = subprocess.run(
        [sys.executable, "-c", PLANTED], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert lines["MODULE"] == "act GELU"  # not the model, and not the layers after it
    assert lines["OPS"].split(",") == ["gelu"]
    # The wrong activations reach the LayerNorm's weight gradient.
    assert "head.1.weight" in lines["GRADS"].split(",")


def run_module(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torch_tpu", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


def test_doctor_reports_and_passes() -> None:
    proc = run_module("doctor")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fields = dict(line.split(None, 1) for line in proc.stdout.splitlines() if line.strip())
    assert fields["torch"] == torch.__version__
    assert fields["plugin"].endswith(".so")
    assert fields["self-test"].startswith("passed")
    assert "fix:" not in proc.stdout


def test_doctor_fails_with_a_fix_for_an_unwritable_cache() -> None:
    proc = run_module("doctor", TORCH_TPU_CACHE_DIR="/proc/torch_tpu_cache")
    assert proc.returncode == 1
    assert "fix: the compile cache folder /proc/torch_tpu_cache is not writable" in proc.stdout


def test_compare_command_runs_a_script(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).to('tpu')\n"
        "inputs = (torch.randn(2, 4),)\n"
    )
    proc = run_module("compare", str(script))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every module's output is within tolerance" in proc.stdout


def test_doctor_reports_a_missing_plugin_with_a_fix() -> None:
    proc = run_module("doctor", TORCH_TPU_PJRT_PLUGIN="/nonexistent/plugin.so")
    assert proc.returncode == 1
    assert "start          failed: PluginNotFoundError" in proc.stdout
    assert "fix: install a PJRT plugin" in proc.stdout
