#!/usr/bin/env bash
# Sets up everything torch_tpu needs on a fresh Debian machine, idempotently: a virtual
# environment with torch 2.13.0 and the test tools, what the package extras cpu (the XLA CPU
# PJRT plugin), jax and hf name in pyproject.toml, the PJRT C API header, the C++ test tools,
# and torch_tpu itself (built with CMake against the installed torch).
#
#   bash scripts/setup.sh [EXTRA...]    # more extras of pyproject.toml, e.g. ray titan
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${TORCH_TPU_VENV:-$ROOT/.venv}
PY=$VENV/bin/python
DEPS=$ROOT/.deps

say() { echo "[setup] $*"; }

# 1. System packages: a compiler toolchain, CMake, Ninja, ccache (rebuilds of unchanged sources,
# fresh clones included, come from its cache) and GoogleTest (Debian's packages).
need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ccache >/dev/null || need_apt+=(ccache)
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v g++ >/dev/null || need_apt+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  say "installing ${need_apt[*]} (apt)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# 2. The Python environment. torch is pinned: an unpinned torch would pull a CUDA build.
if [ ! -x "$PY" ]; then
  say "creating $VENV"
  python3 -m venv "$VENV"
fi
# pip's own failures stop the script (pipefail); only its noise about local indexes is dropped.
quiet() { grep -v "^WARNING: Location" || true; }
pip_install() { "$PY" -m pip install -q --disable-pip-version-check "$@" 2>&1 | quiet; }
if ! "$PY" -c "import torch, numpy, pytest, xdist, pytest_timeout, ruff, expecttest, hypothesis" 2>/dev/null \
   || [ "$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')" != "2.13.0" ]; then
  say "installing torch==2.13.0 and the test tools (hypothesis: PyTorch's own test files import it)"
  pip_install torch==2.13.0 numpy pytest pytest-xdist pytest-timeout ruff setuptools wheel expecttest hypothesis
fi

# 3. What the extras name: the XLA CPU PJRT plugin (cpu), jax (kernels), the Hugging Face stack
# (hf; models are built from configs), and the extras asked for. pip skips what is installed.
EXTRAS=(cpu jax hf "$@")
if [[ " $* " == *" serving "* || " $* " == *" sglang "* ]]; then
  # vLLM 0.32 pins transformers below the hf extra's release, so serving has its own environment
  # (scripts/setup_serving.sh) with vLLM's transformers and without the hf stack; SGLang too
  # (scripts/setup_sglang.sh), with its own pins.
  EXTRAS=(cpu "$@")
fi
if [[ " ${EXTRAS[*]} " == *" tpu "* ]] && ! compgen -G "/dev/accel*" >/dev/null \
   && ! compgen -G "/dev/vfio/[0-9]*" >/dev/null; then
  # libtpu on a machine without TPU chips queries the cloud metadata service when loaded.
  echo "[setup] the tpu extra (libtpu) is for machines with TPU devices (/dev/accel*, /dev/vfio/*)" >&2
  exit 1
fi
mapfile -t extra_requirements < <("$PY" scripts/extra_requirements.py "${EXTRAS[@]}")
say "extras ${EXTRAS[*]}: ${extra_requirements[*]}"
# vLLM is built from its sdist (below): its PyPI wheels are CUDA builds. sglang is installed
# without its declared dependencies (mostly CUDA kernel packages); the sglang extra lists what
# its runtime imports.
vllm_requirement=""
sglang_requirement=""
for i in "${!extra_requirements[@]}"; do
  if [[ ${extra_requirements[$i]} == vllm==* ]]; then
    vllm_requirement=${extra_requirements[$i]}
    unset "extra_requirements[$i]"
  elif [[ ${extra_requirements[$i]} == sglang==* ]]; then
    sglang_requirement=${extra_requirements[$i]}
    unset "extra_requirements[$i]"
  fi
done
# torchrec declares fbgemm-gpu (a CUDA build that would also bring its own torch): the torchrec
# extra names the CPU build, so torchrec itself goes in without its dependencies.
torchrec_requirement=""
for i in "${!extra_requirements[@]}"; do
  if [[ ${extra_requirements[$i]} == torchrec==* ]]; then
    torchrec_requirement=${extra_requirements[$i]}
    unset "extra_requirements[$i]"
  fi
done
pip_install "${extra_requirements[@]}"
if [ -n "$sglang_requirement" ]; then
  pip_install --no-deps "$sglang_requirement"
fi
if [ -n "$torchrec_requirement" ]; then
  pip_install --no-deps "$torchrec_requirement"
fi
if [ -n "$vllm_requirement" ] && ! "$PY" -c "import importlib.metadata as m, sys; \
    sys.exit(m.version('vllm') != '${vllm_requirement#vllm==}')" 2>/dev/null; then
  say "building $vllm_requirement from its sdist as a device-neutral package"
  pip_install "setuptools>=77.0.3,<81" setuptools-scm setuptools-rust wheel jinja2
  # VLLM_TARGET_DEVICE=empty: no CUDA/CPU kernels; the version override drops the "+empty"
  # suffix that pip would reject as not the version asked for; cargo stays offline (the Rust
  # front end is optional and its crates are not on this machine's registries).
  VLLM_TARGET_DEVICE=empty VLLM_VERSION_OVERRIDE=${vllm_requirement#vllm==} \
    CARGO_NET_OFFLINE=true pip_install --no-build-isolation --no-binary vllm "$vllm_requirement"
fi

# 4. The PJRT C API header, extracted from a registry sdist that ships it (never committed).
HEADER=$DEPS/include/xla/pjrt/c/pjrt_c_api.h
if [ ! -f "$HEADER" ]; then
  say "fetching the PJRT C API header (from the jax-mlx-plugin sdist)"
  mkdir -p "$DEPS/download" "$(dirname "$HEADER")"
  # pip's own configured indexes (mirrors and proxies included); --no-build-isolation because
  # preparing the sdist's metadata would otherwise fetch its build requirements (mlx).
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
    --no-build-isolation -d "$DEPS/download" jax-mlx-plugin==0.0.4 2>&1 | quiet
  tar -xzf "$DEPS"/download/jax_mlx_plugin-0.0.4.tar.gz -O \
    jax_mlx_plugin-0.0.4/third_party/xla/pjrt/c/pjrt_c_api.h > "$HEADER.tmp"
  mv "$HEADER.tmp" "$HEADER"
fi

# 5. Build and install torch_tpu (editable; CMake builds incrementally in build/).
say "building torch_tpu"
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e . 2>&1 \
  | quiet
"$PY" -c "import torch_tpu._C" || { echo "[setup] torch_tpu failed to build" >&2; exit 1; }
say "done"
