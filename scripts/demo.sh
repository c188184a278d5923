#!/usr/bin/env bash
# The main job: set-up (idempotent), then the demo on the embedded XLA CPU plugin.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${TORCH_TPU_VENV:-$PWD/.venv}/bin/python" examples/demo.py
