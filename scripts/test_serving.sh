#!/usr/bin/env bash
# The serving tests (vLLM on tpu): set-up of .venv-serving (idempotent; scripts/setup_serving.sh),
# then tests/serving: the platform plugin's selection, the offline engine against transformers
# on CPU, and `vllm serve` on a loopback port. About a minute once set up. Extra arguments go to
# pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_serving.sh
PY=${TORCH_TPU_SERVING_VENV:-$PWD/.venv-serving}/bin/python
"$PY" -m pytest tests/serving -q -p no:cacheprovider --durations 10 "$@"
