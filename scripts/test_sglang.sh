#!/usr/bin/env bash
# The SGLang tests (SGLang's runtime on tpu): set-up of .venv-sglang (idempotent;
# scripts/setup_sglang.sh), then tests/sglang: the platform plugin, greedy tokens against
# transformers on CPU, the radix cache, the KV pool's default. About a minute once set up.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_sglang.sh
PY=${TORCH_TPU_SGLANG_VENV:-$PWD/.venv-sglang}/bin/python
"$PY" -m pytest tests/sglang -q -p no:cacheprovider --durations 10 "$@"
