"""The wheel as a user gets it: built once from this checkout, installed into a fresh virtual
environment beside the pinned torch, first with no plugin extra, then with `[cpu]`.

Nothing here imports the checkout's torch_tpu: every check runs in the fresh venv's python, from
a folder outside the checkout, so a path into the build tree would show. One test runs the
checks in order, so that pytest-xdist cannot split them and build the wheel twice.
"""

from __future__ import annotations

import email
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools import wheel as wheel_tool  # noqa: E402

pytestmark = pytest.mark.timeout(900)

TORCH_RELEASE = ".".join(torch.__version__.split("+")[0].split(".")[:2])


def run_in(python: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-c", code],
        cwd=cwd,
        env=wheel_tool.clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name))


@pytest.mark.full_suite  # 85 s, most of it installing torch into the fresh venv
def test_the_wheel_installs_and_runs_as_a_user_gets_it(tmp_path: Path) -> None:
    wheel = wheel_tool.build_wheel(Path(sys.executable), tmp_path / "dist")
    torch_pin = f"torch=={torch.__version__.split('+')[0]}"
    python = wheel_tool.make_venv(tmp_path / "venv", [torch_pin, "numpy"])  # torch warns without
    wheel_tool.pip_install(python, [str(wheel)])
    work = tmp_path / "elsewhere"  # outside the checkout
    work.mkdir()
    check_metadata(wheel)
    check_contents(wheel, python)
    check_without_a_plugin_extra(python, work)
    wheel_tool.pip_install(python, [f"{wheel}[cpu]"])
    check_with_the_cpu_extra(python, work)


def check_metadata(wheel: Path) -> None:
    """Tagged with, and pinning, the torch release it was built against; the extras."""
    meta = metadata(wheel)
    assert meta["Version"] == f"0.1.0+torch{TORCH_RELEASE}"
    requires = meta.get_all("Requires-Dist")
    assert f"torch=={TORCH_RELEASE}.*" in requires
    extras = set(meta.get_all("Provides-Extra"))
    assert {"cpu", "tpu", "cuda", "jax", "hf", "ray", "titan"} <= extras
    by_extra = {e: [r for r in requires if f'extra == "{e}"' in r] for e in ("cpu", "tpu", "cuda")}
    assert any(r.startswith("lammps-jax-pjrt-cpu") for r in by_extra["cpu"])
    assert any(r.startswith("libtpu") for r in by_extra["tpu"])
    assert any(r.startswith("jax-cuda13-plugin") for r in by_extra["cuda"])
    # libtpu comes only with [tpu]: nothing else may pull it onto a machine without TPU chips.
    assert [r for r in requires if "libtpu" in r] == by_extra["tpu"]


def check_contents(wheel: Path, python: Path) -> None:
    """The extension and every subpackage, no header, no path of the building machine."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert any(n.startswith("torch_tpu/_C.") and n.endswith(".so") for n in names)
    for module in ("distributed/__init__.py", "kernels/__init__.py", "testing/tiny_gpt.py"):
        assert f"torch_tpu/{module}" in names
    assert not [n for n in names if n.endswith(".h")]  # the PJRT header is for building only
    # The documentation's pages, for `python -m torch_tpu docs` (setup.py's build_py).
    docs = wheel_tool.ROOT / "docs"
    pages = {f"torch_tpu/docs/pages/{p.relative_to(docs).as_posix()}" for p in docs.rglob("*.md")}
    assert "torch_tpu/docs/pages/index.md" in pages and pages <= names
    assert wheel_tool.build_tree_references(wheel, [wheel_tool.ROOT, Path(sys.prefix)]) == []
    assert wheel_tool.runpath(python).endswith("[$ORIGIN/../torch/lib]")


def check_without_a_plugin_extra(python: Path, cwd: Path) -> None:
    """torch imports, the device is unavailable, and using it names the extras."""
    proc = run_in(
        python,
        "import torch, torch_tpu\n"
        "assert torch_tpu.__file__.startswith(__import__('sys').prefix), torch_tpu.__file__\n"
        "print('available', torch.tpu.is_available(), torch.tpu.device_count())\n"
        "try:\n"
        "    torch.ones(2, device='tpu')\n"
        "except RuntimeError as error:\n"
        "    print('error', error)\n",
        cwd,
    )
    assert proc.returncode == 0, proc.stderr
    assert "available False 0" in proc.stdout
    assert "no PJRT plugin is installed" in proc.stdout
    assert "pip install 'torch_tpu[cpu]'" in proc.stdout
    assert "'torch_tpu[tpu]'" in proc.stdout and "'torch_tpu[cuda]'" in proc.stdout
    assert proc.stderr == ""  # quiet: no warning at import
    # The documentation answers without a device, from the pages installed with the package.
    answers = subprocess.run(
        [str(python), "-m", "torch_tpu", "docs", "--json", "keep shapes from recompiling"],
        cwd=cwd,
        env=wheel_tool.clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert answers.returncode == 0, answers.stdout + answers.stderr
    document = json.loads(answers.stdout)
    assert document["docs"].startswith(str(python.parent.parent)), document["docs"]
    assert document["answers"][0]["citation"] == "guide/compile.md#keeping-shapes-from-recompiling"


def check_with_the_cpu_extra(python: Path, cwd: Path) -> None:
    """The README's snippet (autoload only), the doctor, and version_info()."""
    proc = run_in(python, wheel_tool.SEED_SNIPPET, cwd)
    assert proc.returncode == 0, proc.stderr
    assert "Executed on device: tpu:0" in proc.stdout
    doctor = subprocess.run(
        [str(python), "-m", "torch_tpu", "doctor"],
        cwd=cwd,
        env=wheel_tool.clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert f"torch_tpu      0.1.0+torch{TORCH_RELEASE}" in doctor.stdout
    assert "self-test      passed" in doctor.stdout
    code = "import json, torch_tpu; print(json.dumps(torch_tpu.version_info()))"
    info = json.loads(run_in(python, code, cwd).stdout)
    assert info["plugin_kind"] == "cpu" and info["pjrt_api"].startswith("0.")
    assert info["torch_tpu"] == f"0.1.0+torch{TORCH_RELEASE}"
