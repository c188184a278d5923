"""Fixtures of the SGLang tests (SGLang's runtime on tpu), run by scripts/test_sglang.sh in
.venv-sglang."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("sglang", reason="SGLang has its own environment: bash scripts/setup_sglang.sh")

# The prompts and transformers' CPU reference are the vLLM tests'.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "serving"))


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from torch_tpu.testing.tiny_llama import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("models"))
