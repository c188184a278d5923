"""torch.compile(backend="tpu"): compiled, eager and CPU results agree; executables persist
on disk across processes."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
from conftest import TPU
from torch import nn

from torch_tpu.testing.tiny_gpt import Block, TinyGPT, training_step


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * 4 * 4, 10),
    )


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))


class BlockModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


CASES = {
    "mlp": (mlp, lambda: torch.randn(8, 16)),
    "cnn": (small_cnn, lambda: torch.randn(4, 3, 8, 8)),
    "transformer_block": (BlockModel, lambda: torch.randn(2, 6, 32)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_matches_eager_and_cpu(name: str) -> None:
    make_model, make_input = CASES[name]
    torch.manual_seed(0)
    cpu_model = make_model()
    x = make_input()
    eager = make_model().to(TPU)
    eager.load_state_dict(cpu_model.state_dict())
    compiled_model = make_model().to(TPU)
    compiled_model.load_state_dict(cpu_model.state_dict())
    compiled = torch.compile(compiled_model, backend="tpu")

    results = {}
    for label, model, device in (
        ("cpu", cpu_model, "cpu"),
        ("eager", eager, TPU),
        ("compiled", compiled, TPU),
    ):
        inp = x.detach().clone().to(device).requires_grad_(True)
        out = model(inp)
        (out * out).sum().backward()
        first_weight = next(model.parameters())
        results[label] = (out.detach().cpu(), inp.grad.cpu(), first_weight.grad.cpu())
    for label in ("eager", "compiled"):
        for got, want in zip(results[label], results["cpu"], strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    # Input mutation inside the graph: batch-norm running statistics follow CPU.
    if name == "cnn":
        torch.testing.assert_close(
            compiled_model[1].running_mean.cpu(), cpu_model[1].running_mean, rtol=1e-5, atol=1e-6
        )


def test_whole_training_step_compiled() -> None:
    torch.manual_seed(0)
    data = torch.randint(0, 64, (4, 17))

    def run(device: torch.device | str, compile_step: bool) -> list[float]:
        torch.manual_seed(0)
        model = TinyGPT(max_len=16).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        inputs, targets = data[:, :-1].to(device), data[:, 1:].to(device)

        step = training_step(model, optimizer, inputs, targets)
        fn = torch.compile(step, backend="tpu") if compile_step else step
        return [fn().item() for _ in range(5)]

    expected = run("cpu", False)
    torch.testing.assert_close(run(TPU, True), expected, rtol=1e-4, atol=1e-5)


def test_the_backward_recomputes_an_activation_instead_of_keeping_it() -> None:
    """Linear -> GELU -> Linear: the forward keeps the pre-activation for the backward, which
    recomputes the GELU from it, so one (8, 32) tensor waits between the two instead of two;
    the gradients are CPU's."""
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    model = torch.compile(copy.deepcopy(cpu_model).to(TPU), backend="tpu")
    x = torch.randn(8, 16)
    saved: list[torch.Tensor] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(x.to(TPU)).square().sum().backward()
    cpu_model(x).square().sum().backward()

    between = [t.cpu() for t in saved if t.shape == (8, 32)]
    assert len(between) == 1, [tuple(t.shape) for t in saved]
    pre_activation = cpu_model[0](x).detach()
    torch.testing.assert_close(between[0], pre_activation, rtol=1e-5, atol=1e-5)
    for (name, expected), got in zip(
        cpu_model.named_parameters(), model.parameters(), strict=True
    ):  # fmt: skip
        torch.testing.assert_close(got.grad.cpu(), expected.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_dropout_in_compiled_graph_repeats_under_seed() -> None:
    model = torch.compile(nn.Dropout(0.5), backend="tpu")
    x = torch.ones(1000, device=TPU)
    torch.tpu.manual_seed(7)
    a = model(x).cpu()
    torch.tpu.manual_seed(7)
    b = model(x).cpu()
    torch.testing.assert_close(a, b)
    kept = (a != 0).float().mean().item()
    assert 0.4 < kept < 0.6
    assert set(a.unique().tolist()) <= {0.0, 2.0}


def test_graph_break_is_correct() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x) * 2
        if y.sum().item() > 0:  # data-dependent branch: a graph break
            return y + 1
        return y - 1

    x = torch.randn(16)
    compiled = torch.compile(fn, backend="tpu")
    torch.testing.assert_close(compiled(x.to(TPU)).cpu(), fn(x))


def test_recompiles_only_on_shape_change() -> None:
    counter = torch._dynamo.testing.CompileCounterWithBackend("tpu")
    fn = torch.compile(lambda x: torch.tanh(x) * 3, backend=counter, dynamic=False)
    for _ in range(3):
        fn(torch.randn(4, 8, device=TPU))
    assert counter.frame_count == 1
    fn(torch.randn(5, 8, device=TPU))
    assert counter.frame_count == 2
    fn(torch.randn(4, 8, device=TPU))
    assert counter.frame_count == 2


def test_unknown_option_is_rejected() -> None:
    compiled = torch.compile(lambda x: x + 1, backend="tpu", options={"bogus": 1})
    with pytest.raises(Exception, match="unknown torch.compile options"):
        compiled(torch.ones(2, device=TPU))


def test_backend_registered_by_autoload_alone() -> None:
    code = "import torch; print('tpu' in torch._dynamo.list_backends())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "True"


# --- persistent cache --------------------------------------------------------------------

PROGRAM = """
import json, torch, torch_tpu
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).to("tpu")
compiled = torch.compile(model, backend="tpu")
x = torch.randn(8, 16).to("tpu")
out = compiled(x)
out.sum().backward()
print(json.dumps({"out": out.cpu().tolist(), "grad": model[0].weight.grad.cpu().sum().item(),
                  "metrics": torch_tpu.metrics()}))
"""


def run_program(cache_dir: Path, program: str = PROGRAM, **settings: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache_dir))
    env.pop("TORCH_TPU_CACHE_EAGER", None)  # the default: eager ops persist too
    env.update(settings)
    proc = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_persistent_cache_across_processes(tmp_path: Path) -> None:
    cold, _ = run_program(tmp_path)
    assert cold["metrics"]["compiles"] > 0
    assert cold["metrics"]["disk_cache_writes"] == cold["metrics"]["compiles"]
    entries = sorted(tmp_path.glob("*.exe"))
    assert entries and not list(tmp_path.glob("*.tmp.*"))
    warm, _ = run_program(tmp_path)
    assert warm["metrics"]["compiles"] == 0
    assert warm["metrics"]["disk_cache_hits"] == cold["metrics"]["compiles"]
    assert warm["out"] == cold["out"] and warm["grad"] == cold["grad"]


def test_corrupt_truncated_and_foreign_entries_are_recompiled(tmp_path: Path) -> None:
    cold, _ = run_program(tmp_path)
    entries = sorted(tmp_path.glob("*.exe"), key=lambda p: p.stat().st_size)
    assert len(entries) >= 3
    truncated, corrupted, foreign = entries[-1], entries[-2], entries[0]
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    data = bytearray(corrupted.read_bytes())
    data[-100] ^= 0xFF
    corrupted.write_bytes(bytes(data))
    foreign.write_bytes(entries[1].read_bytes())  # another entry's contents under this name
    again, stderr = run_program(tmp_path)
    assert "truncated" in stderr
    assert "checksum mismatch" in stderr
    assert "written for another module" in stderr
    assert again["metrics"]["compiles"] == 3
    assert again["out"] == cold["out"] and again["grad"] == cold["grad"]
    # The recompiled entries were written back: a further run compiles nothing.
    final, stderr = run_program(tmp_path)
    assert final["metrics"]["compiles"] == 0 and "ignoring" not in stderr


def test_concurrent_processes_fill_one_cache_safely(tmp_path: Path) -> None:
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path))
    env.pop("TORCH_TPU_CACHE_EAGER", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROGRAM],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outputs]
    results = [json.loads(o[0].strip().splitlines()[-1]) for o in outputs]
    assert results[0]["out"] == results[1]["out"]
    assert not list(tmp_path.glob("*.tmp.*"))
    warm, stderr = run_program(tmp_path)
    assert warm["metrics"]["compiles"] == 0 and "ignoring" not in stderr


def test_tiny_hugging_face_causal_lm_compiled() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2,
        n_head=2,
        n_embd=32,
        vocab_size=96,
        n_positions=32,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    cpu_model = transformers.GPT2LMHeadModel(config).eval()
    tpu_model = transformers.GPT2LMHeadModel(config).eval().to(TPU)
    tpu_model.load_state_dict(cpu_model.state_dict())
    ids = torch.randint(0, 96, (2, 12))
    expected = cpu_model(ids, labels=ids)
    compiled = torch.compile(tpu_model, backend="tpu")
    got = compiled(ids.to(TPU), labels=ids.to(TPU))
    torch.testing.assert_close(
        got.logits.detach().cpu(), expected.logits.detach(), rtol=1e-4, atol=1e-4
    )
    got.loss.backward()
    expected.loss.backward()
    torch.testing.assert_close(
        tpu_model.transformer.wte.weight.grad.cpu(),
        cpu_model.transformer.wte.weight.grad,
        rtol=1e-4,
        atol=1e-5,
    )


EAGER_PROGRAM = """
import json, torch, torch_tpu
values = [(torch.arange(n, device="tpu", dtype=torch.float32) * 2 + 1).sum().item() for n in SIZES]
print(json.dumps({"values": values, "metrics": torch_tpu.metrics()}))
"""


def run_eager(cache_dir: Path, sizes: list[int], **settings: str) -> dict:  # type: ignore[type-arg]
    """Single ops in Strict mode (DeferAndFuse would fuse them into graphs, persisted anyway)."""
    program = EAGER_PROGRAM.replace("SIZES", repr(sizes))
    result, _ = run_program(cache_dir, program, TPU_DEFER_AND_FUSE="0", **settings)
    assert result["values"] == [float(n * n) for n in sizes]  # the sum of 2i + 1 over i < n
    return result


def test_a_warm_process_compiles_no_eager_op(tmp_path: Path) -> None:
    cold = run_eager(tmp_path, [5, 6, 7])
    assert cold["metrics"]["compiles"] > 0
    assert cold["metrics"]["disk_cache_writes"] == cold["metrics"]["compiles"]
    warm = run_eager(tmp_path, [5, 6, 7])
    assert warm["metrics"]["compiles"] == 0
    assert warm["metrics"]["disk_cache_hits"] == cold["metrics"]["compiles"]
    # TORCH_TPU_CACHE_EAGER=0 keeps single ops out of the cache.
    unpersisted = tmp_path / "unpersisted"
    run_eager(unpersisted, [5], TORCH_TPU_CACHE_EAGER="0")
    assert not list(unpersisted.glob("*.exe"))


def test_the_cache_folder_stays_under_its_bound_dropping_the_least_recently_used(
    tmp_path: Path,
) -> None:
    one = tmp_path / "one"
    per_shape = run_eager(one, [3])["metrics"]["disk_cache_writes"]
    bound = sum(p.stat().st_size for p in one.glob("*.exe")) * 4  # about four shapes' entries
    cache = tmp_path / "bounded"
    sizes = list(range(10, 22))
    cold = run_eager(cache, sizes, TORCH_TPU_CACHE_MAX_BYTES=str(bound))
    assert cold["metrics"]["disk_cache_writes"] == per_shape * len(sizes)
    assert sum(p.stat().st_size for p in cache.glob("*.exe")) <= bound
    # The newest shape's executables are kept; the oldest one's were dropped.
    newest = run_eager(cache, [sizes[-1]], TORCH_TPU_CACHE_MAX_BYTES=str(bound))
    assert newest["metrics"]["compiles"] == 0
    oldest = run_eager(cache, [sizes[0]], TORCH_TPU_CACHE_MAX_BYTES=str(bound))
    assert oldest["metrics"]["compiles"] == per_shape


def test_a_cache_hit_keeps_its_entry_from_being_dropped_first(tmp_path: Path) -> None:
    one = tmp_path / "one"
    per_shape = run_eager(one, [3])["metrics"]["disk_cache_writes"]
    bound = str(sum(p.stat().st_size for p in one.glob("*.exe")) * 4)  # about four shapes
    cache = tmp_path / "bounded"
    run_eager(cache, [10, 11, 12], TORCH_TPU_CACHE_MAX_BYTES=bound)
    # Loading 10's executables marks them used: 11's are now the least recently used.
    assert run_eager(cache, [10], TORCH_TPU_CACHE_MAX_BYTES=bound)["metrics"]["compiles"] == 0
    run_eager(cache, [13, 14], TORCH_TPU_CACHE_MAX_BYTES=bound)  # past the bound
    assert run_eager(cache, [10], TORCH_TPU_CACHE_MAX_BYTES=bound)["metrics"]["compiles"] == 0
    assert run_eager(cache, [11], TORCH_TPU_CACHE_MAX_BYTES=bound)["metrics"]["compiles"] == (
        per_shape
    )


def test_a_malformed_cache_bound_is_a_clear_error(tmp_path: Path) -> None:
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path), TORCH_TPU_CACHE_MAX_BYTES="lots")
    code = "import torch, torch_tpu; (torch.ones(3, device='tpu') * 2).cpu()"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode != 0
    assert "TORCH_TPU_CACHE_MAX_BYTES must be a non-negative integer, got 'lots'" in proc.stderr
