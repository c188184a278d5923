#!/usr/bin/env bash
# The checks a session runs on a lent NVIDIA machine through the XLA CUDA plugin, in one call
# (the device tool's `run`, with `carry: [".deps"]`, the PJRT C API header scripts/setup.sh
# extracted there):
#
#     bash scripts/device_check.sh [STAGE ...]     # default: every stage, in this order
#     bash scripts/device_check.sh perf            # speed on the chip, about 8 minutes
#
# That machine has its own python3 with torch (CUDA), jax and the CUDA PJRT plugin
# (jax-cuda13-pjrt) and no package registry: the extension is built there against that torch,
# in build-device/, and run from the checkout. Each stage has a time limit and its output goes
# to $OUT/device.log (the folder the tool brings back); a failed stage does not stop the next.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/torch_tpu_device}
mkdir -p "$OUT"
LOG=$OUT/device.log
PY=${PYTHON:-python3}
export TORCH_TPU_PJRT_PLUGIN=cuda PYTHONPATH=$PWD:$PWD/build-device/site PYTHONUNBUFFERED=1
# jax shares the GPU with torch_tpu's client in the peer benches: neither takes it all.
export XLA_PYTHON_CLIENT_PREALLOCATE=false

stage() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  echo "=== [$name] $*" | tee -a "$LOG"
  # Through bash -c, so that a stage may be one of the functions below (exported).
  timeout -k 5 "$limit" bash -c '"$@"' "$name" "$@" >> "$LOG" 2>&1
  local status=$?
  echo "=== [$name] exit $status after $((SECONDS - start)) s" | tee -a "$LOG"
  return $status
}

machine() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c "import torch, jax; print('torch', torch.__version__, 'jax', jax.__version__)"
  "$PY" -m pip list 2>/dev/null | grep -i -E "^(jax|torch|transformers|pytest)"
}

build() {
  # The system compiler, whose libstdc++ is the one torch loads: the image's default g++
  # (/opt/gcc) built an extension that crashed in its first ostringstream.
  local compiler
  compiler=$(command -v /usr/bin/g++-13 /usr/bin/g++ c++ | head -1)
  "$compiler" --version | head -1
  cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$compiler" \
    -DPython3_EXECUTABLE="$(command -v "$PY")" -DTORCH_TPU_PJRT_INCLUDE="$PWD/.deps/include" \
    > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; return 1; }
  cmake --build build-device -j "$(nproc)" --target _C 2>&1 | grep -E "error|FAILED|warning: unused" \
    | head -60
  cp build-device/_C*.so torch_tpu/ || return 1
  # Run from the checkout, uninstalled: the entry points (torch's backend autoload, the
  # torch.compile backend) come from a dist-info folder made from pyproject.toml.
  "$PY" - <<'EOF'
import pathlib, tomllib
project = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
info = pathlib.Path("build-device/site/torch_tpu-0.0.0+checkout.dist-info")
info.mkdir(parents=True, exist_ok=True)
(info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_tpu\nVersion: 0.0.0+checkout\n")
(info / "entry_points.txt").write_text("".join(
    f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items())
    for group, points in project["entry-points"].items()))
EOF
}

smoke() {
  "$PY" - <<'EOF'
import torch, torch_tpu
print("device:", torch.tpu.get_device_name(), "plugin:", torch_tpu.plugin_path())
x = torch.randn(64, 64)
y = (x.to("tpu") @ x.to("tpu")).relu().sum(0).cpu()
torch.testing.assert_close(y, (x @ x).relu().sum(0), rtol=1e-3, atol=1e-3)
print("matmul/relu/sum match CPU; memory_allocated", torch.tpu.memory_allocated())
EOF
}

# The plugin's own profiler (CUPTI on the CUDA plugin), without torch.profiler: its XSpace's
# planes, lines and the stats its events carry, the program runs read from it, and whether every
# run took the plugin's times; then bench/device_times.py checks the same through torch.profiler
# and a 1024x1024 product's device time against torch CUDA's (within 2x). Fails unless both hold.
xspace() {
  "$PY" - <<'EOF'
import collections, torch, torch_tpu
from torch_tpu import _C

def fields(data):
    at = 0
    def varint():
        nonlocal at
        value = shift = 0
        while True:
            byte = data[at]; at += 1
            value |= (byte & 0x7F) << shift; shift += 7
            if byte < 0x80: return value
    while at < len(data):
        tag = varint(); number, kind = tag >> 3, tag & 7
        if kind == 0: yield number, varint()
        elif kind == 2:
            size = varint(); yield number, data[at:at + size]; at += size
        elif kind == 1: at += 8
        elif kind == 5: at += 4
        else: return

x = torch.randn(1024, 1024, device="tpu")
(x @ x).relu().sum().cpu()  # compiled before the profile
_C._collect_device_spans()
for _ in range(3):
    y = (x @ x).relu()
y.sum().cpu()
spans = _C._collected_device_spans()
trace = torch_tpu.profiler.plugin_trace()
print("our spans (name, device, us, on_device, where the time came from):")
for name, device, start, end, on_device, timing in spans:
    print(f"  {name[:50]:50s} {device} {(end - start) / 1e3:9.1f} {on_device} {timing}")
print("xspace bytes:", len(trace), "; plugin profiler:", _C._plugin_profiler_status())
for number, plane in fields(trace):
    if number != 1: continue
    name, lines, stats = "", collections.Counter(), set()
    for field, value in fields(plane):
        if field == 2: name = value.decode(errors="replace")
        if field == 3:
            line_name, events = "", 0
            for f, v in fields(value):
                if f == 2: line_name = v.decode(errors="replace")
                if f == 4: events += 1
            lines[line_name] += events
        if field == 5:  # stat metadata: the names of the stats its events carry
            for f, v in fields(value):
                if f == 2: stats.update(n.decode(errors="replace") for g, n in fields(v) if g == 2)
    print(f"  plane {name!r}: lines {dict(lines)}; stats {sorted(stats)[:40]}")
runs = _C._xspace_program_runs(trace)
print("program runs (program, device, us, events):",
      [(p, d, round((e - s) / 1e3, 1), n) for p, d, s, e, n in runs])
device_spans = [s for s in spans if s[4]]
took = bool(device_spans) and all(s[5] == "plugin" for s in device_spans)
print("device spans took the plugin's times:", took)
raise SystemExit(0 if took else 1)
EOF
  local took=$?
  # The same through torch.profiler, and the product's device time against torch CUDA's.
  "$PY" bench/device_times.py --require && return $took
}

# Where a crash is: each step in a process of its own, and the first that fails once more under
# cuda-gdb (on that machine it debugs host code) for the native stack.
probe() {
  local steps=(
    "torch.empty(4, device='tpu'); torch.tpu.synchronize()"
    "print(torch.zeros(4, device='tpu').cpu())"
    "print(torch.arange(4.0).to('tpu').cpu())"
    "a = torch.arange(4.0).to('tpu'); print((a + a).cpu())"
    "a = torch.randn(64, 64).to('tpu'); print((a @ a).sum().cpu())"
  )
  for step in "${steps[@]}"; do
    echo "--- $step"
    "$PY" -X faulthandler -c "import torch, torch_tpu; $step" > "$OUT/probe.txt" 2>&1
    local status=$?
    tail -25 "$OUT/probe.txt"
    if [ $status -ne 0 ]; then
      cuda-gdb -q -batch -ex run -ex "bt 40" --args "$PY" -c "import torch, torch_tpu; $step" \
        2>&1 | grep -E "^#|signal|SIG" | head -60
      return 1
    fi
  done
}

# Why the plugin did not start: whether jax itself runs on the GPU, and what the plugin lacks.
diagnose() {
  "$PY" -c "import jax; print('jax devices:', jax.devices())"
  plugin=$("$PY" -c "from torch_tpu import _plugin; print(_plugin.resolve('cuda')[1])")
  ldd "$plugin" | grep -E "not found" || echo "ldd: every library found"
}

export OUT PY
export -f machine build smoke probe diagnose xspace

run_stages() {
  for name in "$@"; do
    case $name in
      machine) stage machine 60 machine ;;
      build) stage build 200 build || return 1 ;;
      smoke) stage smoke 90 smoke || { stage probe 150 probe; return 1; } ;;
      probe) stage probe 150 probe ;;
      xspace) stage xspace 60 xspace ;;
      diagnose) stage diagnose 60 diagnose ;;
      matmul) stage matmul 60 "$PY" bench/matmul.py --sizes 4096,8192 ;;
      peers) stage peers 180 "$PY" bench/peers.py --quick \
        --columns "${PEER_COLUMNS:-tpu Strict,tpu DeferAndFuse,tpu compiled,torch CPU eager,jax.jit}" ;;
      # The peers with the GPU's own columns (torch CUDA eager and inductor).
      peerscuda) stage peerscuda 240 "$PY" bench/peers.py --quick --columns \
        "tpu Strict,tpu DeferAndFuse,tpu compiled,torch CUDA eager,torch CUDA inductor,jax.jit" ;;
      dispatch) stage dispatch 120 "$PY" bench/dispatch_overhead.py ;;
      gpt2) stage gpt2 150 "$PY" bench/gpt2.py --size small --steps 10 --warmup 2 ;;
      memory) stage memory 90 "$PY" bench/memory.py ;;
      profiler) stage profiler 120 bash -c '"$PY" bench/device_times.py --require; a=$?; \
        "$PY" -m pytest -q -p no:cacheprovider tests/python/test_profiler.py \
        tests/python/test_memory_history.py; b=$?; \
        exit $((a || b))' ;;
      profbench) stage profbench 60 "$PY" bench/profiler.py --steps 10 --repeats 3 ;;
      soak) stage soak 120 "$PY" tools/soak.py --steps "${SOAK_STEPS:-1000}" \
        --modes strict defer_and_fuse ;;
      # TESTS="tests/python/x.py ..." runs those instead.
      tests) stage tests 240 "$PY" -m pytest -q -p no:cacheprovider -n 8 ${TESTS:-\
        tests/python/test_device.py tests/python/test_ops.py tests/python/test_models.py \
        tests/python/test_compile.py tests/python/test_eager_modes.py \
        tests/python/test_donation.py tests/python/test_autocast.py \
        tests/python/test_graph_replay.py tests/python/test_matmul_precision.py \
        tests/python/test_errors.py tests/python/test_index_checks.py \
        tests/python/test_cpu_parity.py tests/python/test_complex.py \
        tests/python/test_compiled_step.py tests/python/test_host_timers.py} ;;
      *) echo "unknown stage $name" | tee -a "$LOG" ;;
    esac
  done
}

if [ $# -eq 0 ]; then
  set -- machine build smoke xspace matmul peers profiler profbench dispatch memory tests
elif [ "$*" = perf ]; then
  # Speed on the chip in about 8 minutes, the build included: the peers with CUDA's columns,
  # dispatch with its host-phase timers, GPT-2 small's tokens/s and MFU, the one-program step's
  # counts.
  run_stages machine build smoke || exit 1
  run_stages peerscuda dispatch gpt2
  TESTS="tests/python/test_compiled_step.py tests/python/test_host_timers.py" run_stages tests
  exit
fi
run_stages "$@"
