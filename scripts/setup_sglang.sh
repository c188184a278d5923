#!/usr/bin/env bash
# Sets up the SGLang environment, idempotently: .venv-sglang with torch_tpu and SGLang 0.5.23's
# runtime installed device-neutral (sglang without its declared dependencies, most of them CUDA
# kernel packages, plus what sglang.srt imports: the sglang extra of pyproject.toml). SGLang pins
# transformers, openai and xgrammar apart from vLLM 0.32, so it does not share .venv-serving; it
# shares build/, the same torch release's build.
#
#   bash scripts/setup_sglang.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_TPU_VENV=${TORCH_TPU_SGLANG_VENV:-$PWD/.venv-sglang} bash scripts/setup.sh sglang
