#!/usr/bin/env bash
# The serving tests (vLLM on tpu): set-up of .venv-serving (idempotent; scripts/setup_serving.sh),
# then tests/serving: the platform plugin's selection, the offline engine against transformers
# on CPU, the compiled decode step, speculative decoding, structured output, tool calls, the FP8
# KV cache and their kernels, the prefix cache's host-memory tier, the KV cache's default budget,
# `vllm serve` on a loopback port, RL weight pushes into a running engine; then SGLang's
# (scripts/test_sglang.sh, its own environment). A few minutes once set up. `--full` (first)
# adds the tests marked full_suite: tensor and data parallel 2, and GRPO with its engine in a
# process of its own and as Ray actors (~7 min more). Other arguments go to the vLLM tests'
# pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
MARKS=(-m "not full_suite")
if [ "${1:-}" = "--full" ]; then
  MARKS=()
  shift
fi
bash scripts/setup_serving.sh
PY=${TORCH_TPU_SERVING_VENV:-$PWD/.venv-serving}/bin/python
"$PY" -m pytest tests/serving -q -p no:cacheprovider --durations 10 "${MARKS[@]}" "$@"
bash scripts/test_sglang.sh
