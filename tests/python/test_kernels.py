"""jax and Pallas functions as ops (torch_tpu.kernels), each checked against the same math
written with PyTorch ops on CPU: forward and gradients in every eager mode and compiled,
fusion with neighbouring ops, recompiles, and the refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch._dynamo.testing

import torch_tpu
from torch_tpu import kernels
from torch_tpu.kernels import _lowering

jax = pytest.importorskip("jax")
jnp = jax.numpy
pl = pytest.importorskip("jax.experimental.pallas")

TPU = torch.device("tpu")


@kernels.jax_op(name="kernels_test::rmsnorm")
def rmsnorm(x: Any, w: Any, eps: float = 1e-6) -> Any:
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * w


def rmsnorm_torch(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


@kernels.jax_op
def softmax_and_argmax(x: Any) -> Any:
    return jax.nn.softmax(x, axis=-1), jnp.argmax(x, axis=-1)


def _double_plus_one(x_ref: Any, o_ref: Any) -> None:
    o_ref[...] = x_ref[...] * 2.0 + 1.0


@kernels.jax_op
def pallas_double_plus_one(x: Any) -> Any:
    block = (x.shape[0] // 2, x.shape[1])
    return pl.pallas_call(
        _double_plus_one,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(2,),
        in_specs=[pl.BlockSpec(block, lambda i: (i, 0))],
        out_specs=pl.BlockSpec(block, lambda i: (i, 0)),
    )(x)


@pytest.fixture(params=["strict", "debug", "defer_and_fuse"])
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    with torch_tpu.eager_mode(request.param):
        yield request.param


def _leaves(*tensors: torch.Tensor, device: torch.device | str = "cpu") -> list[torch.Tensor]:
    return [t.detach().to(device, copy=True).requires_grad_() for t in tensors]


def test_forward_and_gradients_match_torch_on_cpu(mode: str) -> None:
    x, w = torch.randn(6, 16), torch.randn(16)
    xc, wc = _leaves(x, w)
    xt, wt = _leaves(x, w, device=TPU)
    expected = rmsnorm_torch(xc, wc, 1e-5)
    got = rmsnorm(xt, wt, eps=1e-5)
    torch.testing.assert_close(got.cpu(), expected.detach())
    weights = torch.randn(6, 16)
    (expected * weights).sum().backward()
    (got * weights.to(TPU)).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    torch.testing.assert_close(wt.grad.cpu(), wc.grad)


def test_several_outputs_with_an_integer_one(mode: str) -> None:
    x = torch.randn(4, 10)
    (xc,) = _leaves(x)
    xt = x.to(TPU).requires_grad_()
    probs, index = softmax_and_argmax(xt)
    torch.testing.assert_close(probs.cpu(), torch.softmax(x, -1))
    assert index.dtype == torch.int64  # lowered with x64: jax's index type is torch's
    torch.testing.assert_close(index.cpu(), x.argmax(-1))
    weights = torch.randn(4, 10)
    (probs * weights.to(TPU)).sum().backward()
    (torch.softmax(xc, -1) * weights).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)


def test_gradcheck_in_float64() -> None:
    x = torch.randn(3, 5, dtype=torch.float64, device=TPU, requires_grad=True)
    w = torch.randn(5, dtype=torch.float64, device=TPU, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rmsnorm(a, b, eps=1e-3), (x, w))


def test_compiled_graph_keeps_the_op_without_a_graph_break() -> None:
    def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(rmsnorm(x * 2, w, eps=1e-5)).sum()

    counter = torch._dynamo.testing.CompileCounterWithBackend("tpu")
    compiled = torch.compile(step, backend=counter, fullgraph=True)
    x, w = torch.randn(4, 8), torch.randn(8)
    xc, wc = _leaves(x, w)
    xt, wt = _leaves(x, w, device=TPU)
    loss = compiled(xt, wt)
    expected = torch.relu(rmsnorm_torch(xc * 2, wc, 1e-5)).sum()
    torch.testing.assert_close(loss.cpu(), expected.detach())
    loss.backward()
    expected.backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    torch.testing.assert_close(wt.grad.cpu(), wc.grad)
    assert counter.frame_count == 1
    graph_ops = {str(n.target) for n in counter.graphs[0].graph.nodes if n.op == "call_function"}
    assert any("rmsnorm" in op for op in graph_ops), graph_ops


def test_fused_with_its_neighbours_into_one_execution() -> None:
    x, w = torch.randn(8, 32), torch.randn(32)
    xt, wt = x.to(TPU), w.to(TPU)
    with torch_tpu.eager_mode("defer_and_fuse"):
        for _ in range(2):  # the first round compiles the fused graph
            torch_tpu.reset_metrics()
            got = (rmsnorm(xt.exp(), wt) + 1).cpu()
        metrics = torch_tpu.metrics()
    torch.testing.assert_close(got, rmsnorm_torch(x.exp(), w) + 1)
    assert metrics["executions"] == 1
    assert metrics["fused_ops"] == 3
    assert metrics["compiles"] == 0


def test_recompiles_once_per_shape_and_dtype() -> None:
    @kernels.jax_op
    def scaled(x: Any, factor: float) -> Any:
        return x * factor

    torch_tpu.reset_metrics()
    for shape, dtype, factor in [
        ((4,), torch.float32, 2.0),
        ((4,), torch.float32, 2.0),
        ((5,), torch.float32, 2.0),
        ((5,), torch.float32, 2.0),
        ((5,), torch.bfloat16, 2.0),
        ((5,), torch.float32, 3.0),  # a static argument is part of the key too
    ]:
        x = torch.arange(shape[0], dtype=dtype)
        torch.testing.assert_close(scaled(x.to(TPU), factor).cpu(), x * factor)
    assert len(scaled._kernels) == 4
    assert torch_tpu.metrics()["compiles"] == 4


def test_int64_keeps_its_dtype_and_range() -> None:
    @kernels.jax_op
    def twice(i: Any) -> Any:
        return i * 2

    i = torch.tensor([1, 2**40, -(2**41)])
    got = twice(i.to(TPU))
    assert got.dtype == torch.int64
    assert torch.equal(got.cpu(), i * 2)


def test_pallas_kernel_runs_interpreted_on_the_cpu_plugin(mode: str) -> None:
    x = torch.randn(16, 128)
    torch.testing.assert_close(pallas_double_plus_one(x.to(TPU)).cpu(), x * 2 + 1)


def test_pallas_interpretation_does_not_leak_into_jax() -> None:
    pallas_double_plus_one(torch.randn(16, 128, device=TPU))
    with pytest.raises(ValueError, match="Only interpret mode"):
        jax.jit(pallas_double_plus_one.fn).lower(jnp.ones((16, 128))).compile()


def test_pallas_lowers_to_mosaic_for_tpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # Lowering only (no libtpu is loaded): the kernel for a TPU plugin carries Mosaic.
    monkeypatch.setattr(_lowering, "platform", lambda: "tpu")
    lowered = _lowering.lower(pallas_double_plus_one.fn, "t::p", [((16, 128), "float32")])
    assert _lowering.custom_call_targets(lowered.functions) == {"tpu_custom_call"}


def test_user_backward_is_used() -> None:
    def straight_through(cotangents: tuple[Any, ...], x: Any) -> tuple[Any]:
        return (cotangents[0] * 3.0,)

    @kernels.jax_op(backward=straight_through)
    def rounded(x: Any) -> Any:
        return jnp.round(x)

    x = torch.randn(5, device=TPU, requires_grad=True)
    torch.testing.assert_close(rounded(x).cpu(), torch.round(x.detach().cpu()))
    rounded(x).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((5,), 3.0))


def test_cpu_tensors_run_with_jax() -> None:
    x, w = torch.randn(3, 8), torch.randn(8)
    torch.testing.assert_close(rmsnorm(x, w), rmsnorm_torch(x, w))


def test_opcheck() -> None:
    x, w = torch.randn(3, 8, device=TPU), torch.randn(8, device=TPU)
    spec = kernels._spec((x, w), {})
    torch.library.opcheck(torch.ops.kernels_test.rmsnorm.default, ([x, w], spec))


def test_custom_call_the_plugin_lacks_is_refused() -> None:
    @kernels.jax_op
    def solve(a: Any, b: Any) -> Any:
        return jnp.linalg.solve(a, b)

    with pytest.raises(kernels.KernelError, match=r"lapack_\w+.* cpu plugin .*cannot run"):
        solve(torch.eye(3, device=TPU), torch.ones(3, device=TPU))


def test_newer_stablehlo_than_the_plugin_reads_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        torch_tpu._C, "_plugin_attributes", lambda: "stablehlo_current_version=1,0,0\n"
    )
    _lowering.check_versions.cache_clear()
    try:
        with pytest.raises(kernels.KernelError, match=r"writes StableHLO .* install an older jax"):
            _lowering.check_versions()
    finally:
        monkeypatch.undo()
        _lowering.check_versions.cache_clear()


def test_bad_calls_raise_clear_errors() -> None:
    with pytest.raises(TypeError, match="tensors or literals"):
        rmsnorm(torch.randn(2, 4, device=TPU), torch.randn(4, device=TPU), eps=object())
    with pytest.raises(RuntimeError, match="same device"):
        rmsnorm(torch.randn(2, 4, device=TPU), torch.randn(4))
    with pytest.raises(ValueError, match="namespace::name"):
        kernels.jax_op(lambda x: x, name="no_namespace")
    with pytest.raises(RuntimeError, match="no jax kernel is registered"):
        torch.ops.torch_tpu.jax_call([torch.ones(1, device=TPU)], "nothing@0")


def test_pallas_attention_example_generates_the_same_tokens_as_sdpa() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "pallas_attention.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "same tokens as sdpa: True" in done.stdout


ACROSS_DEVICES = """
import json, sys
import jax, torch
from torch_tpu.kernels import jax_op

@jax_op(axis_name="d")
def collectives(x, w, scale=1.0):
    y = x * w
    return (jax.lax.psum(y, "d") * scale, jax.lax.all_gather(x, "d"),
            jax.lax.ppermute(x, "d", [(0, 1), (1, 0)]), jax.lax.axis_index("d"),
            jax.lax.pmax(x, "d"), jax.lax.all_to_all(x, "d", 1, 1, tiled=True),
            jax.lax.psum_scatter(x, "d", scatter_dimension=1, tiled=True))

torch.manual_seed(0)
xs = [torch.randn(3, 4) for _ in range(2)]
ws = [torch.randn(4) for _ in range(2)]
outs = collectives.on_devices(
    [x.to(f"tpu:{i}") for i, x in enumerate(xs)],
    [w.to(f"tpu:{i}") for i, w in enumerate(ws)],
    scale=2.0,
)
expected_sum = (xs[0] * ws[0] + xs[1] * ws[1]) * 2.0
rows = []
for i, (total, gathered, permuted, index, largest, exchanged, scattered) in enumerate(outs):
    halves = [x[:, 2 * i : 2 * i + 2] for x in xs]
    rows.append({
        "device": str(total.device),
        "sum": (total.cpu() - expected_sum).abs().max().item(),
        "gather": (gathered.cpu() - torch.stack(xs)).abs().max().item(),
        "permute": (permuted.cpu() - xs[1 - i]).abs().max().item(),
        "index": index.item(),
        "max": (largest.cpu() - torch.maximum(xs[0], xs[1])).abs().max().item(),
        "all_to_all": (exchanged.cpu() - torch.cat(halves, 1)).abs().max().item(),
        "scatter": (scattered.cpu() - (halves[0] + halves[1])).abs().max().item(),
    })
print(json.dumps(rows))
"""


def test_collectives_across_the_devices_of_one_process() -> None:
    env = {**os.environ, "TORCH_TPU_CPU_DEVICE_COUNT": "2"}
    done = subprocess.run(
        [sys.executable, "-c", ACROSS_DEVICES], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert [r["device"] for r in rows] == ["tpu:0", "tpu:1"]
    assert [r["index"] for r in rows] == [0, 1]
    for row in rows:
        errors = [v for k, v in row.items() if k not in ("device", "index")]
        assert len(errors) == 6 and max(errors) < 1e-5, row


def test_on_devices_needs_an_axis_name_and_distinct_devices() -> None:
    with pytest.raises(ValueError, match="no axis_name"):
        rmsnorm.on_devices([torch.ones(2, 4, device=TPU)], [torch.ones(4, device=TPU)])
    total = kernels.jax_op(lambda x: jax.lax.psum(x, "d"), axis_name="d")
    with pytest.raises(RuntimeError, match="two replicas on tpu:0"):
        total.on_devices([torch.ones(3, device=TPU), torch.ones(3, device=TPU)])


def test_jax_keeps_its_own_pallas_lowering_outside_ours() -> None:
    pallas_double_plus_one(torch.randn(16, 128, device=TPU))  # installs our cpu rule
    interpreted = pl.pallas_call(
        _double_plus_one, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), interpret=True
    )
    out = jax.jit(interpreted)(jnp.ones((16, 128)))
    assert float(out.sum()) == 3.0 * 16 * 128
