"""Which platform vLLM activates: torch_tpu's plugin wherever it applies, over vLLM's built-in
TPU platform too (which libtpu activates), unless VLLM_PLUGINS leaves it out. libtpu is never
installed or loaded here: a fake package named libtpu stands in for it, which is all vLLM's
TPU detection imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

OURS = "torch_tpu.vllm.platform.TpuPlatform"
VLLM_TPU = "vllm.platforms.tpu.TpuPlatform"
RESOLVE = "from vllm.platforms import resolve_current_platform_cls_qualname as r; print(r())"


def _resolve(env: dict[str, str], code: str = RESOLVE) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture
def fake_libtpu(tmp_path: Path) -> str:
    package = tmp_path / "libtpu"
    package.mkdir()
    (package / "__init__.py").write_text("# stands in for libtpu: importing it loads nothing\n")
    return str(tmp_path)


def _with_path(extra: str) -> str:
    return os.pathsep.join([extra, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


def test_torch_tpu_platform_is_selected() -> None:
    assert _resolve({}) == OURS


def test_ours_wins_over_vllms_tpu_platform_where_libtpu_is_installed(fake_libtpu: str) -> None:
    assert _resolve({"PYTHONPATH": _with_path(fake_libtpu)}) == OURS


def test_vllm_plugins_without_tpu_selects_vllms_own_tpu_platform(fake_libtpu: str) -> None:
    env = {"PYTHONPATH": _with_path(fake_libtpu), "VLLM_PLUGINS": "some_other_plugin"}
    assert _resolve(env) == VLLM_TPU


def test_vllm_plugins_naming_tpu_keeps_ours(fake_libtpu: str) -> None:
    env = {"PYTHONPATH": _with_path(fake_libtpu), "VLLM_PLUGINS": "tpu"}
    assert _resolve(env) == OURS


def test_the_plugin_declines_without_a_device() -> None:
    # A machine whose torch_tpu finds no device (torch.tpu.is_available() is False).
    code = (
        "import torch; torch.tpu.is_available = lambda: False; "
        "import torch_tpu.vllm as v; print(v.register())"
    )
    assert _resolve({}, code) == "None"
