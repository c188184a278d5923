#!/usr/bin/env bash
# The test command: set-up (idempotent), then the C++ units (ctest) and the Python suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${TORCH_TPU_VENV:-$PWD/.venv}/bin/python
echo "[test] C++ units (ctest)"
ctest --test-dir build --output-on-failure
echo "[test] Python suite (pytest), Strict mode"
"$PY" -m pytest tests/python -q -p no:cacheprovider "$@"
echo "[test] Python suite (pytest) again under TPU_DEFER_AND_FUSE=1"
TPU_DEFER_AND_FUSE=1 "$PY" -m pytest tests/python -q -p no:cacheprovider "$@"
