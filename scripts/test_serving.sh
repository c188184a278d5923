#!/usr/bin/env bash
# The serving tests (vLLM on tpu): set-up of .venv-serving (idempotent; scripts/setup_serving.sh),
# then tests/serving: the platform plugin's selection, the offline engine against transformers
# on CPU, the compiled decode step, speculative decoding, structured output, the FP8 KV cache and their kernels, the KV
# cache's default budget, and `vllm serve` on a loopback port; then SGLang's
# (scripts/test_sglang.sh, its own environment). A few minutes once set up. Extra arguments go
# to the vLLM tests' pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_serving.sh
PY=${TORCH_TPU_SERVING_VENV:-$PWD/.venv-serving}/bin/python
"$PY" -m pytest tests/serving -q -p no:cacheprovider --durations 10 "$@"
bash scripts/test_sglang.sh
