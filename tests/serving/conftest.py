"""Fixtures of the serving tests (vLLM on tpu), run by scripts/test_serving.sh in .venv-serving."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is the serving extra: bash scripts/setup_serving.sh")


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from torch_tpu.testing.tiny_llama import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("models"))
