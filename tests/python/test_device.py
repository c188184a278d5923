"""Autoload, the torch.tpu module API and plugin selection."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

# The mission's snippet, verbatim (no `import torch_tpu`), then one line that reports the device.
MISSION_SNIPPET = textwrap.dedent(
    """\
    import torch
    device = torch.device("tpu")
    x = torch.randn((4, 4), device=device)
    y = torch.ones((4, 4), device=device)
    result = torch.matmul(x, y).cpu()
    """
)
REPORT = textwrap.dedent(
    """\
    print(f"Executed on device: {x.device}")
    expected = x.cpu() @ y.cpu()
    print("matches cpu:", torch.allclose(result, expected, atol=1e-5, rtol=1e-5))
    """
)


# How a process starts (plugin discovery, import, versions): no eager mode reaches it, so the
# DeferAndFuse pass of scripts/test.sh leaves these out (conftest.py).
process_start = pytest.mark.process_start


def run_python(
    code: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env.pop("TORCH_TPU_PJRT_PLUGIN", None)
    full_env.pop("TORCH_TPU_CPU_FALLBACK", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code],
        env=full_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_mission_snippet_runs_without_import(tmp_path: Path) -> None:
    assert "import torch_tpu" not in MISSION_SNIPPET
    # Run from an empty folder so that torch_tpu is found as an installed package, not from cwd.
    proc = run_python(MISSION_SNIPPET + REPORT, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Executed on device: tpu:0" in proc.stdout
    assert "matches cpu: True" in proc.stdout


def test_autoloaded_without_import() -> None:
    proc = run_python(
        "import sys, torch\n"
        "print('loaded', 'torch_tpu' in sys.modules, hasattr(torch, 'tpu'))\n"
        "print(torch.empty(2, device='tpu').device)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert "loaded True True" in proc.stdout
    assert "tpu:0" in proc.stdout


def test_device_object(tpu: torch.device) -> None:
    assert tpu.type == "tpu"
    t = torch.empty(3, device=tpu)
    assert t.device == torch.device("tpu", 0)
    assert t.is_cpu is False
    assert str(t.device) == "tpu:0"
    # generate_methods_for_privateuse1_backend: Tensor.tpu() / is_tpu / Module.tpu().
    assert torch.ones(2).tpu().device.type == "tpu"
    assert t.is_tpu  # type: ignore[attr-defined]
    m = torch.nn.Linear(2, 2).tpu()  # type: ignore[operator]
    assert m.weight.device.type == "tpu"


def test_availability_and_devices() -> None:
    assert torch.tpu.is_available()
    assert torch.tpu.is_initialized()
    assert torch.tpu.device_count() >= 1
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    torch.tpu.set_device("tpu:0")
    torch.tpu.set_device(torch.device("tpu", 0))
    assert torch.tpu.current_device() == 0
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
    # As CUDA: torch.AcceleratorError (a RuntimeError) for a device that does not exist.
    with pytest.raises(torch.AcceleratorError, match="out of range"):
        torch.tpu.set_device(torch.tpu.device_count())
    with pytest.raises(torch.AcceleratorError, match="invalid device ordinal"):
        torch.ones(2, device=torch.device("tpu", torch.tpu.device_count()))
    with pytest.raises(ValueError):
        torch.tpu.set_device(torch.device("cpu"))


def test_accelerator() -> None:
    accelerator = torch.accelerator.current_accelerator()
    assert accelerator is not None
    assert accelerator.type == "tpu"
    assert torch.accelerator.is_available()
    assert torch.accelerator.device_count() == torch.tpu.device_count()


def test_synchronize(tpu: torch.device) -> None:
    a = torch.arange(16, dtype=torch.float32).to(tpu)
    b = a * 2 + 1
    torch.tpu.synchronize()
    torch.tpu.synchronize(0)
    torch.tpu.synchronize(tpu)
    torch.accelerator.synchronize()
    torch.testing.assert_close(b.cpu(), torch.arange(16, dtype=torch.float32) * 2 + 1)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64, torch.uint8]
)
def test_host_reads_return_what_was_computed(tpu: torch.device, dtype: torch.dtype) -> None:
    """Reads back (the CPU plugin's from host memory in place) of results still being
    computed, of scalars, views and every storage dtype, equal CPU's."""
    base = torch.arange(-6, 18).reshape(4, 6)
    expected = (base * 3 - 1).to(dtype)
    got = (base.to(tpu) * 3 - 1).to(dtype)  # read while its ops may still run
    torch.testing.assert_close(got.cpu(), expected)
    torch.testing.assert_close(got[1:3, ::2].cpu(), expected[1:3, ::2])
    torch.testing.assert_close(got.t().contiguous().cpu(), expected.t().contiguous())
    assert got[2, 3].item() == expected[2, 3].item()
    assert got.sum().item() == pytest.approx(expected.sum().item(), rel=1e-2)


def test_device_name_and_properties() -> None:
    name = torch.tpu.get_device_name()
    assert isinstance(name, str) and name
    assert torch.tpu.get_device_name(0) == name
    props = torch.tpu.get_device_properties()
    assert props.name == name
    assert props.platform_name
    assert props.pjrt_api_version
    assert Path(props.plugin_path).is_file()
    assert isinstance(props.total_memory, int)
    assert torch.tpu.get_device_properties(torch.device("tpu:0")) == props


def test_manual_seed_repeats_randn(tpu: torch.device) -> None:
    torch.tpu.manual_seed(123)
    a = torch.randn(64, device=tpu).cpu()
    b = torch.randn(64, device=tpu).cpu()
    torch.tpu.manual_seed(123)
    c = torch.randn(64, device=tpu).cpu()
    torch.testing.assert_close(a, c, atol=0, rtol=0)
    assert not torch.equal(a, b), "consecutive draws must differ"
    torch.tpu.manual_seed_all(7)
    d = torch.randn(64, device=tpu).cpu()
    torch.tpu.manual_seed_all(7)
    torch.testing.assert_close(torch.randn(64, device=tpu).cpu(), d, atol=0, rtol=0)
    assert torch.tpu.initial_seed() == 7
    # torch.manual_seed seeds every device's generator too, as with CUDA.
    torch.manual_seed(99)
    e = torch.randn(64, device=tpu).cpu()
    torch.manual_seed(99)
    torch.testing.assert_close(torch.randn(64, device=tpu).cpu(), e, atol=0, rtol=0)


def test_randn_statistics(tpu: torch.device) -> None:
    x = torch.randn(4096, device=tpu).cpu()
    assert abs(x.mean().item()) < 0.1
    assert abs(x.std().item() - 1.0) < 0.1
    u = torch.rand(4096, device=tpu).cpu()
    assert 0.0 <= u.min().item() and u.max().item() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.05


def test_rng_state_roundtrip(tpu: torch.device) -> None:
    torch.tpu.manual_seed(5)
    torch.randn(8, device=tpu)
    state = torch.tpu.get_rng_state()
    assert isinstance(state, torch.Tensor) and state.device.type == "cpu"
    expected = torch.randn(32, device=tpu).cpu()
    torch.randn(32, device=tpu)  # advance the stream
    torch.tpu.set_rng_state(state)
    torch.testing.assert_close(torch.randn(32, device=tpu).cpu(), expected, atol=0, rtol=0)
    states = torch.tpu.get_rng_state_all()
    assert len(states) == torch.tpu.device_count()
    after = torch.randn(32, device=tpu).cpu()
    torch.tpu.set_rng_state_all(states)
    torch.testing.assert_close(torch.randn(32, device=tpu).cpu(), after, atol=0, rtol=0)


def test_fork_rng(tpu: torch.device) -> None:
    torch.tpu.manual_seed(11)
    with torch.random.fork_rng(device_type="tpu"):
        inside = torch.randn(16, device=tpu).cpu()
    outside = torch.randn(16, device=tpu).cpu()
    torch.testing.assert_close(inside, outside, atol=0, rtol=0)


def test_explicit_generator(tpu: torch.device) -> None:
    g = torch.Generator(device=tpu)
    g.manual_seed(3)
    a = torch.randn(16, device=tpu, generator=g).cpu()
    g.manual_seed(3)
    b = torch.randn(16, device=tpu, generator=g).cpu()
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_memory_stats_move(tpu: torch.device) -> None:
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == before
    nbytes = 1024 * 1024 * 4
    t = torch.empty(1024 * 1024, dtype=torch.float32, device=tpu)
    t.copy_(torch.ones(1024 * 1024))  # write it, so a device buffer surely exists
    torch.tpu.synchronize()
    during = torch.tpu.memory_allocated()
    assert during - before >= nbytes
    assert torch.tpu.max_memory_allocated() >= during
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == during
    assert stats["allocated_bytes.all.peak"] >= during
    u = t + 1  # a second buffer of the same size
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() - before >= 2 * nbytes
    peak = torch.tpu.max_memory_allocated()
    del t, u
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == before
    assert torch.tpu.max_memory_allocated() == peak  # the peak stays until reset
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == before
    torch.tpu.empty_cache()


def test_executable_temporaries_are_counted_until_reset(tpu: torch.device) -> None:
    # XLA's temporaries belong to no tensor; the plugin's compiled-memory stats give them.
    import torch_tpu

    x = torch.randn(256, 256).to(tpu)
    torch.tpu.synchronize()
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.memory_stats()["executable_temp_bytes.peak"] == 0
    with torch_tpu.eager_mode("defer_and_fuse"):
        # One fused graph whose intermediates (256 KiB each) never become tensors.
        result = ((x @ x * 0.01).exp() @ x).sum().cpu()
    expected = ((x.cpu() @ x.cpu() * 0.01).exp() @ x.cpu()).sum()
    torch.testing.assert_close(result, expected, rtol=1e-3, atol=1e-2)
    assert torch.tpu.memory_stats()["executable_temp_bytes.peak"] >= 256 * 256 * 4
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.memory_stats()["executable_temp_bytes.peak"] == 0


def device_bytes() -> int:
    return int(torch.tpu.memory_stats()["device_buffer_bytes.current"])


# Small device buffers (cached scalar values) may come and go around a check.
SLACK = 64 * 1024


def test_device_buffer_bytes_follow_the_buffers_a_tensor_holds(tpu: torch.device) -> None:
    torch.tpu.synchronize()
    before = device_bytes()
    x = torch.ones(1024, 1024, device=tpu)
    y = x * 2
    torch.tpu.synchronize()
    assert abs(device_bytes() - before - 2 * 4 * 1024 * 1024) < SLACK
    assert torch.tpu.memory_stats()["device_buffer_bytes.peak"] >= before + 2 * 4 * 1024 * 1024
    assert y[0, 0].item() == 2.0
    del x, y
    torch.tpu.synchronize()
    assert abs(device_bytes() - before) < SLACK


def test_device_buffer_bytes_leave_out_values_a_deferred_graph_has_not_produced(
    tpu: torch.device,
) -> None:
    import torch_tpu

    torch.tpu.synchronize()
    before, allocated = device_bytes(), torch.tpu.memory_allocated()
    with torch_tpu.eager_mode("defer_and_fuse"):
        x = torch.full((512, 512), 3.0, device=tpu)
        y = x.exp()
        # Both storages are allocated; the graph that produces them has not run.
        assert torch.tpu.memory_allocated() - allocated >= 2 * 512 * 512 * 4
        assert device_bytes() - before < SLACK
        torch.tpu.synchronize()
        assert abs(device_bytes() - before - 2 * 512 * 512 * 4) < SLACK
    torch.testing.assert_close(y.cpu(), torch.full((512, 512), 3.0).exp())


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_a_donated_buffer_is_counted_once(tpu: torch.device, mode: str) -> None:
    import torch_tpu

    big = torch.zeros(4 * 1024 * 1024, device=tpu)  # 16 MiB
    torch.tpu.synchronize()
    before = device_bytes()
    torch.tpu.reset_peak_memory_stats()
    torch_tpu.reset_metrics()
    with torch_tpu.eager_mode(mode):
        big.add_(1.0)
        torch.tpu.synchronize()
    assert torch_tpu.metrics()["donated_buffers"] >= 1
    # The result took the input's memory over: no second 16 MiB at any launch, and none after.
    assert torch.tpu.memory_stats()["device_buffer_bytes.peak"] - before < SLACK
    assert abs(device_bytes() - before) < SLACK
    assert big[-1].item() == 1.0


def test_running_ahead_holds_back_once_let_go_buffers_pile_up(tpu: torch.device) -> None:
    import torch_tpu

    torch_tpu.set_eager_mode("strict")
    x = torch.ones(1 << 20, device=tpu)  # 4 MiB; each op below takes the device ~0.3 ms
    (x * 1.0001 + 0.001).cpu()  # compiled outside the measured part

    def run_ahead(percent: int) -> tuple[int, int, torch.Tensor]:
        """The device peak above the start and the waits of 40 iterations enqueued at once."""
        torch_tpu._C._set_retired_percent(percent)
        torch.tpu.synchronize()
        before = device_bytes()
        torch.tpu.reset_peak_memory_stats()
        torch_tpu.reset_metrics()
        y = x
        for _ in range(40):
            y = y * 1.0001 + 0.001  # both inputs die at once while the device still reads them
        waits = torch_tpu.metrics()["run_ahead_waits"]
        torch.tpu.synchronize()
        assert torch.tpu.memory_stats()["retired_buffer_bytes.current"] == 0
        return torch.tpu.memory_stats()["device_buffer_bytes.peak"] - before, waits, y

    default = torch_tpu._C._retired_percent()
    try:
        unbounded_peak, unbounded_waits, _ = run_ahead(0)
        peak, waits, y = run_ahead(default)
    finally:
        torch_tpu._C._set_retired_percent(default)
    # Unbounded, the host never waits, and enqueues as far ahead as the device lets it: on the
    # CPU plugin, whose device takes ~0.3 ms an op against the host's ~10 µs, up to 32 launches
    # and their outputs (measured: 132 MiB). A GPU runs each op in a few µs, so little piles up
    # (measured on an H100: 36 MiB). Bounded, the host waits whenever dead buffers pass 1 MiB:
    # the peak stays low on any plugin, and where work piled up unbounded, the bound held it.
    piled_up = unbounded_peak > 12 * (4 << 20)
    assert unbounded_waits == 0
    assert peak <= 8 * (4 << 20)
    assert waits >= 1 or not piled_up
    if torch_tpu._state.get("kind") == "cpu":
        assert piled_up
    expected = torch.ones(1 << 20)
    for _ in range(40):
        expected = expected * 1.0001 + 0.001
    torch.testing.assert_close(y.cpu(), expected)


def test_retired_percent_must_not_be_negative() -> None:
    import torch_tpu

    with pytest.raises(RuntimeError, match="at least 0, not -1"):
        torch_tpu._C._set_retired_percent(-1)


def test_device_peak_counts_an_executables_temporaries(tpu: torch.device) -> None:
    import torch_tpu

    x = torch.randn(256, 256).to(tpu)
    torch.tpu.synchronize()
    before = device_bytes()
    torch.tpu.reset_peak_memory_stats()
    with torch_tpu.eager_mode("defer_and_fuse"):
        ((x @ x * 0.01).exp() @ x).sum().cpu()
    stats = torch.tpu.memory_stats()
    assert stats["executable_temp_bytes.peak"] >= 256 * 256 * 4
    assert stats["device_buffer_bytes.peak"] >= before + stats["executable_temp_bytes.peak"]


def test_plugin_path_points_to_a_file() -> None:
    import torch_tpu

    assert Path(torch_tpu.plugin_path()).is_file()
    metrics = torch_tpu.metrics()
    assert isinstance(metrics, dict) and metrics


@process_start
def test_missing_plugin_path_is_a_clear_error() -> None:
    proc = run_python("import torch", env={"TORCH_TPU_PJRT_PLUGIN": "/nonexistent.so"})
    assert proc.returncode == 1, (proc.returncode, proc.stderr)  # an exception, not a crash
    assert "/nonexistent.so" in proc.stderr
    assert "TORCH_TPU_PJRT_PLUGIN" in proc.stderr
    assert "neither a file nor one of cpu, tpu, cuda" in proc.stderr


@process_start
def test_file_that_is_not_a_plugin_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "not_a_plugin.so"
    bogus.write_bytes(b"\0" * 64)
    proc = run_python("import torch", env={"TORCH_TPU_PJRT_PLUGIN": str(bogus)})
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert str(bogus) in proc.stderr
    assert "cannot load PJRT plugin" in proc.stderr


@process_start
@pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is not None, reason="libtpu is installed here"
)
def test_tpu_plugin_not_installed_says_how_to_install(tmp_path: Path) -> None:
    (tmp_path / "accel0").touch()  # a fake TPU device node
    env = {"TORCH_TPU_PJRT_PLUGIN": "tpu", "TORCH_TPU_DEV_ROOT": str(tmp_path)}
    proc = run_python("import torch", env=env)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "TORCH_TPU_PJRT_PLUGIN=tpu" in proc.stderr
    assert "no tpu PJRT plugin is installed" in proc.stderr
    assert "pip install 'torch_tpu[tpu]'" in proc.stderr


@process_start
def test_tpu_plugin_without_tpu_devices_is_a_clear_error(tmp_path: Path) -> None:
    env = {"TORCH_TPU_PJRT_PLUGIN": "tpu", "TORCH_TPU_DEV_ROOT": str(tmp_path)}
    proc = run_python("import torch", env=env)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "no TPU devices" in proc.stderr


@pytest.mark.cpu_plugin
def test_explicit_cpu_plugin_selection() -> None:
    proc = run_python(
        "import torch, torch_tpu\n"
        "print('kind', torch_tpu._state['kind'])\n"
        "print((torch.ones(3).to('tpu') * 2).cpu().tolist())\n",
        env={"TORCH_TPU_PJRT_PLUGIN": "cpu"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "kind cpu" in proc.stdout
    assert "[2.0, 2.0, 2.0]" in proc.stdout


def test_module_to_keeps_parameter_identity_and_weight_tying() -> None:
    model = torch.nn.Module()
    model.encoder = torch.nn.Embedding(10, 4)
    model.decoder = torch.nn.Linear(4, 10, bias=False)
    model.decoder.weight = model.encoder.weight  # tied, as in language models
    original = model.encoder.weight
    model.to("tpu")
    assert model.encoder.weight is original  # moved in place, as on CUDA
    assert model.decoder.weight is model.encoder.weight
    assert original.device.type == "tpu"


def fake_libtpu(tmp_path: Path) -> Path:
    """A libtpu package that is never loaded: only its file's presence is looked at."""
    package = tmp_path / "site" / "libtpu"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "libtpu.so").write_text("not a library")
    return package / "libtpu.so"


@process_start
def test_libtpu_is_skipped_without_tpu_devices(tmp_path: Path, monkeypatch: Any) -> None:
    from torch_tpu import _plugin

    library = fake_libtpu(tmp_path)
    monkeypatch.syspath_prepend(str(library.parent.parent))
    monkeypatch.setenv(_plugin.DEV_ROOT_VAR, str(tmp_path / "dev"))
    monkeypatch.delenv(_plugin.ENV_VAR, raising=False)
    (tmp_path / "dev" / "vfio").mkdir(parents=True)
    kind, _ = _plugin.resolve()
    assert kind != "tpu"
    with pytest.raises(_plugin.PluginNotFoundError, match="no TPU devices"):
        _plugin.resolve("tpu")
    # A TPU VM: /dev/accel0 (v4/v5e) or a numbered /dev/vfio entry (v5p/v6e).
    for node in ("accel0", "vfio/0"):
        (tmp_path / "dev" / node).touch()
        assert _plugin.resolve() == ("tpu", library)
        (tmp_path / "dev" / node).unlink()


def test_pinned_memory_is_cached_and_released_by_empty_cache() -> None:
    import torch_tpu._C as C

    torch.tpu.empty_cache()
    assert C._host_cache_bytes() == 0
    src = torch.randn(3000)
    pinned = src.pin_memory()
    assert pinned.is_pinned() and not src.is_pinned()
    torch.testing.assert_close(pinned, src)
    address = pinned.data_ptr()
    del pinned
    assert C._host_cache_bytes() >= 3000 * 4  # the freed block waits for reuse
    again = torch.zeros(2900).pin_memory()  # rounds to the same block size: the block returns
    assert again.is_pinned() and again.data_ptr() == address
    assert torch.equal(again, torch.zeros(2900))
    del again
    torch.tpu.empty_cache()
    assert C._host_cache_bytes() == 0


@pytest.mark.skipif(
    not hasattr(torch.accelerator, "empty_host_cache"), reason="torch.accelerator has no host cache"
)
def test_torch_accelerator_empties_the_tpu_host_cache() -> None:
    # torch.accelerator's host-memory calls reach the device's registered host allocator;
    # without one, empty_host_cache() dereferenced null and killed the process (vLLM calls it).
    import torch_tpu._C as C

    torch.ones(1, device="tpu").cpu()  # (a no-op, as on CUDA, until the device is initialized)
    pinned = torch.arange(4096.0).pin_memory()
    del pinned
    assert C._host_cache_bytes() > 0
    torch.accelerator.empty_host_cache()
    assert C._host_cache_bytes() == 0
    again = torch.ones(8).pin_memory()
    assert again.is_pinned() and torch.equal(again, torch.ones(8))


@pytest.mark.parametrize(
    "make_dst",
    [
        lambda s: torch.empty(s),  # same dtype, dense: downloaded straight into it
        lambda s: torch.empty(s[::-1]).t(),  # strided destination
        lambda s: torch.empty(s, dtype=torch.float64),  # converting copy
    ],
    ids=["dense", "strided", "converting"],
)
def test_copy_from_tpu_into_a_cpu_tensor(make_dst: Any) -> None:
    src = torch.randn(6, 5)
    on_tpu = (src.to("tpu") * 2).t()  # a view of a computed tensor
    dst = make_dst((5, 6))
    dst.copy_(on_tpu)
    torch.testing.assert_close(dst, (src * 2).t().to(dst.dtype))


@process_start
def test_import_is_quiet_unless_plugin_logs_are_asked_for() -> None:
    import os
    import subprocess
    import sys

    def stderr_of(level: str | None) -> str:
        # Importing jax (the kernels tests do, in the same worker) sets TF_CPP_MIN_LOG_LEVEL,
        # which would silence the plugin's INFO lines in the child.
        env = {
            k: v
            for k, v in os.environ.items()
            if k != "TORCH_TPU_LOG_LEVEL" and not k.startswith("TF_CPP_")
        }
        if level is not None:
            env["TORCH_TPU_LOG_LEVEL"] = level
        code = "import torch; torch.ones(2, device='tpu').sum().item()"
        run = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stderr
        return run.stderr

    assert stderr_of(None) == ""
    # The CPU plugin's start-up INFO line names its device count; others log their own.
    import torch_tpu

    asked = stderr_of("info")
    assert "cpu_device_count" in asked if torch_tpu._state.get("kind") == "cpu" else asked


@process_start
def test_cpu_plugin_compiler_flags_are_added_and_user_flags_win(monkeypatch: Any) -> None:
    from torch_tpu import _plugin

    flag = "--xla_cpu_experimental_ynn_fusion_type="
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/somewhere")
    _plugin.apply_xla_flags("cpu")
    flags = os.environ["XLA_FLAGS"].split()
    assert flags[0] == "--xla_dump_to=/tmp/somewhere"
    assert [f for f in flags if f.startswith(flag)] == [
        flag + "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION"
    ]
    _plugin.apply_xla_flags("cpu")  # idempotent
    assert os.environ["XLA_FLAGS"].split() == flags
    monkeypatch.setenv("XLA_FLAGS", flag + "LIBRARY_FUSION_TYPE_REDUCE")
    _plugin.apply_xla_flags("cpu")
    assert os.environ["XLA_FLAGS"] == flag + "LIBRARY_FUSION_TYPE_REDUCE"
    monkeypatch.delenv("XLA_FLAGS")
    _plugin.apply_xla_flags("cuda")  # other plugins' compilers keep their defaults
    assert "XLA_FLAGS" not in os.environ


@pytest.mark.cpu_plugin
@process_start
def test_the_cpu_plugin_accepts_its_compiler_flags() -> None:
    # XLA aborts the process on a flag it does not know; the plugin reads them at its first
    # compile. A fused chain ending in a reduction (what the flag is for) matches CPU.
    proc = run_python(
        "import os, torch, torch_tpu\n"
        "torch_tpu.set_eager_mode('defer_and_fuse')\n"
        "x = torch.linspace(-1, 1, 4096)\n"
        "def f(a):\n"
        "    for _ in range(5):\n"
        "        a = a * 1.5 + 0.25\n"
        "    return a.sum()\n"
        "torch.testing.assert_close(f(x.to('tpu')).cpu(), f(x), rtol=1e-5, atol=1e-2)\n"
        "print(os.environ['XLA_FLAGS'])\n",
        env={"XLA_FLAGS": ""},
    )
    assert proc.returncode == 0, proc.stderr
    assert "--xla_cpu_experimental_ynn_fusion_type=" in proc.stdout


@process_start
def test_a_torch_release_other_than_the_built_one_is_a_clear_import_error(
    monkeypatch: Any,
) -> None:
    import torch_tpu

    extension = torch_tpu._load_extension()  # the release it was built against: fine
    running = ".".join(torch.__version__.split(".")[:2])
    assert extension._built_against_torch().startswith(running + ".")
    monkeypatch.setattr(extension, "_built_against_torch", lambda: "2.9.1")
    with pytest.raises(ImportError, match=rf"built against torch 2\.9\.1, but torch {running}"):
        torch_tpu._load_extension()


@process_start
def test_version_info_names_torch_the_plugin_and_the_pjrt_versions() -> None:
    import torch_tpu

    info = torch_tpu.version_info()
    assert info["torch_tpu"] == torch_tpu.__version__
    assert info["torch"] == info["built_against_torch"] == torch.__version__
    props = torch.tpu.get_device_properties(0)
    assert info["plugin"] == props.plugin_path == torch_tpu.plugin_path()
    assert info["pjrt_api"] == props.pjrt_api_version
    major, minor = (int(part) for part in info["pjrt_header"].split("."))
    assert major == 0 and minor > 0


@process_start
def test_gpu_client_options_take_memory_as_needed_unless_told(monkeypatch: Any) -> None:
    from torch_tpu import _plugin

    assert _plugin.gpu_client_options({}) == {"preallocate": False}
    env = {
        "TORCH_TPU_GPU_PREALLOCATE": "true",
        "TORCH_TPU_GPU_MEMORY_FRACTION": "0.5",
        "TORCH_TPU_GPU_ALLOCATOR": "platform",
    }
    assert _plugin.gpu_client_options(env) == {
        "preallocate": True,
        "memory_fraction": 0.5,
        "allocator": "platform",
    }
    with pytest.raises(ValueError, match="TORCH_TPU_GPU_MEMORY_FRACTION='1.5'"):
        _plugin.gpu_client_options({"TORCH_TPU_GPU_MEMORY_FRACTION": "1.5"})
    with pytest.raises(ValueError, match="TORCH_TPU_GPU_PREALLOCATE='maybe'"):
        _plugin.gpu_client_options({"TORCH_TPU_GPU_PREALLOCATE": "maybe"})
    # Without NVIDIA's packages (this machine) there is nothing to load, and nothing fails.
    monkeypatch.setattr(_plugin, "_package_dir", lambda name: None)
    _plugin.preload_cuda_libraries()
