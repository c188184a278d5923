#!/usr/bin/env bash
# Sets up the serving environment, idempotently: .venv-serving with torch_tpu and vLLM built
# from its sdist as a device-neutral package. vLLM pins an older transformers than the hf
# extra, so serving does not share .venv; it shares build/, the same torch release's build.
# Ray (the ray extra) installs beside vLLM: the RL recipe places its engine and trainer as Ray
# actors (recipes/rl/grpo_ray.py).
#
#   bash scripts/setup_serving.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_TPU_VENV=${TORCH_TPU_SERVING_VENV:-$PWD/.venv-serving} bash scripts/setup.sh serving ray
