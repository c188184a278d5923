#!/usr/bin/env bash
# The test command: set-up (idempotent), the C++ units (ctest), the whole Python suite once in
# Strict mode, then again under TPU_DEFER_AND_FUSE=1 for what fusion can change (models, eager
# modes, compile, autocast, RNG, aliasing and in-place tests; see conftest.FUSION_FILES).
#
# The operator-coverage gate checks every op_db entry the report lists as passing, at most 2
# samples of each, evenly spread, in the Strict pass; and every 16th entry, at most 4 samples,
# in the DeferAndFuse pass; the bad-input gate checks every 4th entry, and the complex64 gate
# (tests/python/test_complex_coverage.py) every 8th (16th under DeferAndFuse).
# `scripts/test.sh --full` runs the full matrix instead: the whole suite in both modes, every
# sample of every gate entry in Strict and up to 32 of each under DeferAndFuse (over an hour on
# two cores), and the wheel built and run against the other supported torch release
# (tools/wheel.py --torch 2.14.1: its own venv and build tree), and the serving tests
# (scripts/test_serving.sh: vLLM in .venv-serving); run it before calling coverage, fusion,
# packaging or serving work done. Extra arguments go to pytest in both passes.
#
# Tests marked full_suite (the 20-step TorchTitan recipes, Ray Train's FSDP2 and Gloo runs, the
# wheel in a fresh venv, TorchRec's sharded DLRM beyond its table-wise case) run only with
# --full. The set-up adds the titan and ray extras, which the recipe tests need, torchrec
# (tests/python/test_torchrec.py), examples (torchvision, for tests/python/test_torchvision.py
# and test_pytorch_examples_tool.py), and docs, with which tests/python/test_docs.py builds the
# documentation site (mkdocs build --strict) and runs the Python blocks of the docs and README;
# --full also installs xprof (~100 MB), with which tests/python/test_xprof.py opens a trace in
# XProf (it is skipped, saying so, without it).
#
# Each test process keeps its own fresh persistent compile cache (conftest.py): a shared one
# would turn another worker's or pass's compiles into disk hits under tests that count
# compiles.
set -euo pipefail
cd "$(dirname "$0")/.."
FULL=0
if [ "${1:-}" = "--full" ]; then
  FULL=1
  shift
fi
if [ "$FULL" = 1 ]; then
  bash scripts/setup.sh titan ray docs torchrec examples xprof  # xprof: tests/python/test_xprof.py
else
  bash scripts/setup.sh titan ray docs torchrec examples
fi
PY=${TORCH_TPU_VENV:-$PWD/.venv}/bin/python
WORKERS=${TORCH_TPU_TEST_WORKERS:-auto}
PYTEST=("$PY" -m pytest tests/python -q -p no:cacheprovider -n "$WORKERS" --maxprocesses 4
        --durations 15)
echo "[test] C++ units (ctest)"
ctest --test-dir build --output-on-failure
if [ "$FULL" = 1 ]; then
  echo "[test] Python suite (pytest), Strict mode, full gate"
  "${PYTEST[@]}" "$@"
  echo "[test] Python suite (pytest) again under TPU_DEFER_AND_FUSE=1, full gate"
  TPU_DEFER_AND_FUSE=1 "${PYTEST[@]}" --op-gate-samples 32 "$@"
  echo "[test] The wheel against torch 2.14.1"
  "$PY" tools/wheel.py --torch 2.14.1
  echo "[test] Serving: vLLM on tpu (its own environment, .venv-serving)"
  bash scripts/test_serving.sh --full
else
  echo "[test] Python suite (pytest), Strict mode"
  # Compiles dominate this pass: small executables compile quickly (see
  # TORCH_TPU_QUICK_COMPILE_ELEMENTS in docs/guide/environment.md); the
  # DeferAndFuse pass and --full keep the default, full optimization.
  TORCH_TPU_QUICK_COMPILE_ELEMENTS=4096 "${PYTEST[@]}" -m "not full_suite" --op-gate-samples 2 \
    --bad-input-every 4 --complex-gate-every 8 "$@"
  echo "[test] What fusion can change, under TPU_DEFER_AND_FUSE=1"
  TPU_DEFER_AND_FUSE=1 "${PYTEST[@]}" -m "not full_suite" --fusion-subset --op-gate-every 16 \
    --complex-gate-every 16 --op-gate-samples 4 "$@"
fi
