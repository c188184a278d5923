#!/usr/bin/env bash
# The test command: set-up (idempotent), then the C++ units (ctest) and the Python suite, once
# in Strict mode and once under TPU_DEFER_AND_FUSE=1.
#
# The suite runs on every core (pytest-xdist, at most 4 workers; TORCH_TPU_TEST_WORKERS
# overrides). The operator-coverage gate checks every op_db entry the report lists as passing,
# but at most 32 samples of each in the Strict pass (all of them take about 35 minutes on two
# cores: some entries have over a thousand), and every 8th entry in the DeferAndFuse pass, whose
# fused graphs are made of the same kernels. Extra arguments go to both passes; for the whole
# gate: `.venv/bin/python -m pytest tests/python/test_op_coverage.py -n auto`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${TORCH_TPU_VENV:-$PWD/.venv}/bin/python
WORKERS=${TORCH_TPU_TEST_WORKERS:-auto}
PYTEST=("$PY" -m pytest tests/python -q -p no:cacheprovider -n "$WORKERS" --maxprocesses 4)
echo "[test] C++ units (ctest)"
ctest --test-dir build --output-on-failure
echo "[test] Python suite (pytest), Strict mode"
"${PYTEST[@]}" --op-gate-samples 32 "$@"
echo "[test] Python suite (pytest) again under TPU_DEFER_AND_FUSE=1"
TPU_DEFER_AND_FUSE=1 "${PYTEST[@]}" --op-gate-every 8 --op-gate-samples 32 "$@"
