"""torch_tpu next to its peers, one table from one run: the same workloads on tpu (eager
Strict, eager DeferAndFuse, torch.compile), on torch CPU (eager, inductor) and in jax.jit.

    .venv/bin/python bench/peers.py                 # every row (5-10 minutes on 2 cores)
    .venv/bin/python bench/peers.py --quick         # fewer warm-ups and repeats
    .venv/bin/python bench/peers.py --torch-threads 1   # torch CPU on one thread (busy host)
    .venv/bin/python bench/peers.py --rows chain,mlp_step
    .venv/bin/python bench/peers.py --columns "jax.jit,tpu Strict"

Columns:

- ``tpu Strict``: torch eager on device "tpu", ``torch_tpu.set_eager_mode("strict")`` (each op
  its own executable, enqueued asynchronously).
- ``tpu DeferAndFuse``: torch eager on "tpu", ``set_eager_mode("defer_and_fuse")`` (ops gathered
  and run as fused executables when a result is needed).
- ``tpu compiled``: ``torch.compile(fn, backend="tpu")`` on "tpu" (eager mode Strict around it).
  Training steps compile the whole step (forward, backward, optimizer step), as
  bench/compile.py does; the backward and optimizer run where Dynamo puts them.
- ``torch CPU eager``: the same torch code on CPU tensors.
- ``torch CPU inductor``: ``torch.compile(fn)`` (the default backend, inductor) on CPU tensors.
- ``torch CUDA eager`` / ``torch CUDA inductor``: the same on CUDA tensors, where CUDA is
  visible to torch (a GPU machine): what a GPU user would pick instead of torch_tpu there.
- ``jax.jit``: the workload written in jax (float32, x64 off), the whole step jitted, with its
  parameters copied from the torch model so both start from the same values.

Rows (``--rows`` takes these names, comma separated):

- ``mlp_step``: 4 x Linear(512, 512) with GELU (exact, erf) between them, batch 128, MSE loss,
  SGD (lr 0.01); jax: params as a pytree, ``jax.value_and_grad``, manual SGD update.
- ``chain_sum``: 25 x (x * 1.0001 + 0.001) over 4M float32, then ``.sum()``.
- ``chain``: the same chain without the sum (the 4M result is held until synchronized).
- ``gpt_step``: ``torch_tpu.testing.tiny_gpt.tiny_lm_training_step`` (TinyGPT dim 64, 2 layers,
  2 heads, untied head, 8x32 tokens, cross entropy, AdamW lr 1e-3, ``loss.item()`` each
  step); jax: the same GPT (same parameters, same count) and AdamW written by hand.
- ``gpt_fwd_b1`` / ``gpt_fwd_b32``: that TinyGPT's forward in eval under no_grad, on 1x32 and
  32x32 tokens.
- ``conv_step``: Conv3x3(3->16) ReLU MaxPool2 Conv3x3(16->32) ReLU MaxPool2 Linear(2048->10) on
  32x32x3 images, batch 32, cross entropy, SGD (lr 0.01); jax uses
  ``jax.lax.conv_general_dilated`` and ``jax.lax.reduce_window``.
- ``generate``: greedy decoding, tokens per second, of a TinyGPT (dim 64, 2 layers) with a
  static KV cache, as bench/eager_modes.py measures it: 4-token prompt, 24 new tokens, each
  token read back to the host. Every torch column runs one per-token function (embed, blocks'
  ``Block.step``, head, argmax, position += 1) that the compiled columns compile; jax jits
  its equivalent (``lax.dynamic_update_slice`` into the caches) and reads back each token too.

Times are medians over the repeats, after warm-up, in ms (the generate row: tokens/s). A row's
columns are timed in interleaved rounds (in each round, each column runs twice and its second
run is timed), so that the machine's drift reaches them alike and their ratios hold where the
absolute times wander. The second table gives each torch column's time relative to jax.jit
("x jax": how many times longer than jax.jit a step takes, so >1 is slower than jax; for the
generate row, jax's tokens/s over the column's). A cell that failed prints "err" with a
footnote naming the exception.

Before timing, every cell is checked against torch CPU eager (the MLP and conv steps' loss and
updated parameters, the chains' results, the GPT losses of the first two steps, the forward's
logits, the generated tokens), so the table never times wrong code; a mismatch is an "err".
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# torch_tpu adds flags for its CPU plugin to XLA_FLAGS on import (torch_tpu/_plugin.py); jax
# gets the user's own (see _give_jax_its_own_flags), so its column is jax as users run it.
_USER_XLA_FLAGS = os.environ.get("XLA_FLAGS")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from jax import lax  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import torch_tpu  # noqa: E402
from torch_tpu.testing.tiny_gpt import TinyGPT, tiny_lm_training_step  # noqa: E402

jax.config.update("jax_enable_x64", False)
# float32 products computed exactly, as torch computes them by default (and torch_tpu with it):
# on a GPU jax's default is TF32, which no row's check against torch CPU would pass.
jax.config.update("jax_default_matmul_precision", "highest")


def _give_jax_its_own_flags() -> None:
    """The plugin reads XLA_FLAGS at its first compile, jax's CPU client when it starts: compile
    on tpu first (a fused graph, which also fixes the disk cache's key), then put the user's
    flags back before jax starts."""
    torch_tpu.set_eager_mode("defer_and_fuse")
    (torch.ones(4, device="tpu") * 2 + 1).cpu()
    torch_tpu.set_eager_mode("strict")
    if _USER_XLA_FLAGS is None:
        os.environ.pop("XLA_FLAGS", None)
    else:
        os.environ["XLA_FLAGS"] = _USER_XLA_FLAGS


_give_jax_its_own_flags()

# --------------------------------------------------------------------------------------------
# Columns, cells and timing


@dataclass(frozen=True)
class Column:
    label: str
    device: str  # "tpu", "cpu", "cuda" or "jax"
    backend: str | None = None  # torch.compile backend
    mode: str = "strict"  # torch_tpu eager mode while the cell runs


# Where CUDA is visible to torch (a GPU machine), what a GPU user would pick instead of us.
CUDA_COLUMNS: tuple[Column, ...] = (
    (Column("torch CUDA eager", "cuda"), Column("torch CUDA inductor", "cuda", backend="inductor"))
    if torch.cuda.is_available()
    else ()
)
COLUMNS: tuple[Column, ...] = (
    Column("tpu Strict", "tpu"),
    Column("tpu DeferAndFuse", "tpu", mode="defer_and_fuse"),
    Column("tpu compiled", "tpu", backend="tpu"),
    Column("torch CPU eager", "cpu"),
    Column("torch CPU inductor", "cpu", backend="inductor"),
    *CUDA_COLUMNS,
    Column("jax.jit", "jax"),
)
JAX = "jax.jit"
CUDA_EAGER = "torch CUDA eager"


@dataclass
class Cell:
    """What one cell times: ``run()`` does one unit of work and returns what it produced, and
    ``sync(result)`` waits until that is computed. ``work`` is the tokens per run of a
    throughput row."""

    run: Callable[[], object]
    sync: Callable[[object], None]
    work: float = 1.0


def tpu_sync(_: object) -> None:
    torch.tpu.synchronize()


def no_sync(_: object) -> None:
    pass


def jax_sync(result: object) -> None:
    jax.block_until_ready(result)


def cuda_sync(_: object) -> None:
    torch.cuda.synchronize()


def sync_for(column: Column) -> Callable[[object], None]:
    return {"tpu": tpu_sync, "cpu": no_sync, "cuda": cuda_sync, "jax": jax_sync}[column.device]


def timed_run(cell: Cell) -> float:
    """Seconds of one run() plus sync(). The result is held until after the sync: a result
    nobody holds is dead code that DeferAndFuse never computes."""
    start = time.perf_counter()
    result = cell.run()
    cell.sync(result)
    seconds = time.perf_counter() - start
    del result
    return seconds


def maybe_compile(fn: Callable[..., Any], column: Column) -> Callable[..., Any]:
    if column.backend is None:
        return fn
    return torch.compile(fn, backend=column.backend)


def check_close(name: str, actual: object, expected: object, rtol: float, atol: float) -> None:
    """Loose agreement with torch CPU eager; raises AssertionError naming what differs."""
    got = to_cpu_tensor(actual)
    want = to_cpu_tensor(expected)
    try:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    except AssertionError as error:
        first = str(error).strip().splitlines()[0]
        raise AssertionError(f"{name} differs from torch CPU: {first}") from None


def to_cpu_tensor(value: object) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, float | int):
        return torch.tensor(float(value))
    array = np.asarray(value)
    if array.dtype != np.float32 and array.dtype.kind == "f":
        raise AssertionError(f"expected float32, got {array.dtype}")
    return torch.from_numpy(array.copy())


def jax_params(model: nn.Module) -> dict[str, jax.Array]:
    """The model's parameters as a flat pytree keyed by their torch names (same values, same
    count)."""
    return {name: jnp.asarray(p.detach().cpu().numpy()) for name, p in model.named_parameters()}


def assert_f32(tree: object) -> None:
    for leaf in jax.tree.leaves(tree):
        if jnp.issubdtype(leaf.dtype, jnp.floating) and leaf.dtype != jnp.float32:
            raise AssertionError(f"jax leaf of dtype {leaf.dtype}, expected float32")


# --------------------------------------------------------------------------------------------
# Row 1: MLP training step

MLP_WIDTH, MLP_LAYERS, MLP_BATCH, SGD_LR = 512, 4, 128, 0.01


def make_mlp() -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(MLP_LAYERS):
        layers.append(nn.Linear(MLP_WIDTH, MLP_WIDTH))
        if i < MLP_LAYERS - 1:
            layers.append(nn.GELU())
    return nn.Sequential(*layers)


def mlp_setup() -> tuple[nn.Sequential, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = make_mlp()
    x = torch.randn(MLP_BATCH, MLP_WIDTH)
    y = torch.randn(MLP_BATCH, MLP_WIDTH)
    return model, x, y


def torch_train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
) -> Callable[[], torch.Tensor]:
    def step() -> torch.Tensor:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return step


@dataclass
class StepReference:
    """torch CPU eager's first step: the loss and the parameters after the update."""

    loss: float
    params: dict[str, torch.Tensor] = field(default_factory=dict)


def first_step_reference(
    setup: Callable[[], tuple[nn.Module, torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> StepReference:
    model, x, y = setup()
    optimizer = torch.optim.SGD(model.parameters(), lr=SGD_LR)
    loss = torch_train_step(model, optimizer, loss_fn, x, y)()
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return StepReference(loss.item(), params)


def torch_sgd_cell(
    column: Column,
    setup: Callable[[], tuple[nn.Module, torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    reference: StepReference,
) -> Cell:
    model, x, y = setup()
    model = model.to(column.device)
    x, y = x.to(column.device), y.to(column.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=SGD_LR)
    step = maybe_compile(torch_train_step(model, optimizer, loss_fn, x, y), column)
    loss = step()
    check_close("loss", loss, reference.loss, rtol=1e-3, atol=1e-5)
    for name, param in model.named_parameters():
        check_close(name, param, reference.params[name], rtol=1e-3, atol=1e-5)
    return Cell(step, sync_for(column))


def jax_sgd_cell(
    setup: Callable[[], tuple[nn.Module, torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[dict[str, jax.Array], jax.Array, jax.Array], jax.Array],
    reference: StepReference,
) -> Cell:
    model, x_cpu, y_cpu = setup()
    params = jax_params(model)
    x, y = jnp.asarray(x_cpu.numpy()), jnp.asarray(y_cpu.numpy())

    def step(
        params: dict[str, jax.Array], x: jax.Array, y: jax.Array
    ) -> tuple[dict[str, jax.Array], jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree.map(lambda p, g: p - SGD_LR * g, params, grads), loss

    jitted = jax.jit(step, donate_argnums=0)
    state = {"params": params}
    params, loss = jitted(state["params"], x, y)
    state["params"] = params
    assert_f32((params, loss))
    check_close("loss", loss, reference.loss, rtol=1e-3, atol=1e-5)
    for name, param in params.items():
        check_close(name, param, reference.params[name], rtol=1e-3, atol=1e-5)

    def run() -> object:
        state["params"], loss = jitted(state["params"], x, y)
        return state["params"], loss

    return Cell(run, jax_sync)


def jax_linear(p: dict[str, jax.Array], prefix: str, x: jax.Array) -> jax.Array:
    """nn.Linear with torch's weight layout (out, in)."""
    y = x @ p[f"{prefix}.weight"].T
    bias = p.get(f"{prefix}.bias")
    return y if bias is None else y + bias


def jax_mlp_loss(p: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    h = x
    for i in range(MLP_LAYERS):
        h = jax_linear(p, str(2 * i), h)  # nn.Sequential names: 0, 2, 4, 6 (GELUs between)
        if i < MLP_LAYERS - 1:
            h = jax.nn.gelu(h, approximate=False)
    return jnp.mean((h - y) ** 2)


class MlpRow:
    def __init__(self) -> None:
        self._reference: StepReference | None = None

    def reference(self) -> StepReference:
        if self._reference is None:
            self._reference = first_step_reference(mlp_setup, F.mse_loss)
        return self._reference

    def build(self, column: Column) -> Cell:
        if column.device == "jax":
            return jax_sgd_cell(mlp_setup, jax_mlp_loss, self.reference())
        return torch_sgd_cell(column, mlp_setup, F.mse_loss, self.reference())


# --------------------------------------------------------------------------------------------
# Rows 2 and 3: elementwise chain

CHAIN_SIZE, CHAIN_LENGTH = 4 * 1024 * 1024, 25


def torch_chain(x: torch.Tensor) -> torch.Tensor:
    for _ in range(CHAIN_LENGTH):
        x = x * 1.0001 + 0.001
    return x


def torch_chain_sum(x: torch.Tensor) -> torch.Tensor:
    return torch_chain(x).sum()


def jax_chain(x: jax.Array) -> jax.Array:
    for _ in range(CHAIN_LENGTH):
        x = x * 1.0001 + 0.001
    return x


def jax_chain_sum(x: jax.Array) -> jax.Array:
    return jax_chain(x).sum()


class ChainRow:
    def __init__(self, with_sum: bool) -> None:
        self.with_sum = with_sum
        self._input: torch.Tensor | None = None
        self._reference: torch.Tensor | None = None

    def input(self) -> torch.Tensor:
        if self._input is None:
            torch.manual_seed(0)
            self._input = torch.randn(CHAIN_SIZE)
        return self._input

    def reference(self) -> torch.Tensor:
        if self._reference is None:
            fn = torch_chain_sum if self.with_sum else torch_chain
            self._reference = fn(self.input())
        return self._reference

    def build(self, column: Column) -> Cell:
        # The sum of 4M values is compared loosely: summation order differs between backends.
        rtol, atol = (1e-3, 1.0) if self.with_sum else (1e-5, 1e-5)
        if column.device == "jax":
            fn = jax.jit(jax_chain_sum if self.with_sum else jax_chain)
            x = jnp.asarray(self.input().numpy())
            result = fn(x)
            assert_f32(result)
            check_close("chain", result, self.reference(), rtol=rtol, atol=atol)
            return Cell(lambda: fn(x), jax_sync)
        torch_fn = maybe_compile(torch_chain_sum if self.with_sum else torch_chain, column)
        x_t = self.input().to(column.device)
        check_close("chain", torch_fn(x_t), self.reference(), rtol=rtol, atol=atol)
        return Cell(lambda: torch_fn(x_t), sync_for(column))


# --------------------------------------------------------------------------------------------
# Rows 4 and 5: TinyGPT training step and forward, in jax

GPT_DIM, GPT_LAYERS, GPT_HEADS, GPT_LEN, GPT_VOCAB = 64, 2, 2, 32, 64
ADAMW_LR, ADAMW_BETAS, ADAMW_EPS, ADAMW_DECAY = 1e-3, (0.9, 0.999), 1e-8, 1e-2


def gpt_setup() -> tuple[TinyGPT, torch.Tensor]:
    """The model and data of tiny_lm_training_step, from the same seed in the same order."""
    torch.manual_seed(0)
    model = TinyGPT(dim=GPT_DIM, layers=GPT_LAYERS, max_len=GPT_LEN)
    data = torch.randint(0, GPT_VOCAB, (8, GPT_LEN + 1))
    return model, data


def jax_layer_norm(p: dict[str, jax.Array], prefix: str, x: jax.Array) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + 1e-5) * p[f"{prefix}.weight"] + p[f"{prefix}.bias"]


def jax_mlp_block(p: dict[str, jax.Array], prefix: str, x: jax.Array) -> jax.Array:
    h = jax_linear(p, f"{prefix}.mlp.0", jax_layer_norm(p, f"{prefix}.ln2", x))
    return x + jax_linear(p, f"{prefix}.mlp.2", jax.nn.gelu(h, approximate=False))


def jax_gpt_forward(
    p: dict[str, jax.Array], tokens: jax.Array, heads: int = GPT_HEADS
) -> jax.Array:
    """TinyGPT.forward: token and position embeddings, pre-norm blocks of causal attention and
    a GELU MLP, final LayerNorm, untied head without bias. Its width and depth come from `p`."""
    batch, length = tokens.shape
    dim = p["embed.weight"].shape[1]
    layers = sum(1 for name in p if name.startswith("blocks.") and name.endswith(".qkv.weight"))
    head_dim = dim // heads
    x = p["embed.weight"][tokens] + p["positions.weight"][:length]
    causal = jnp.tril(jnp.ones((length, length), dtype=bool))
    for i in range(layers):
        prefix = f"blocks.{i}"
        qkv = jax_linear(p, f"{prefix}.qkv", jax_layer_norm(p, f"{prefix}.ln1", x))
        q, k, v = (
            a.reshape(batch, length, heads, head_dim).transpose(0, 2, 1, 3)
            for a in jnp.split(qkv, 3, axis=-1)
        )
        scores = (q @ k.swapaxes(-1, -2)) / math.sqrt(head_dim)
        scores = jnp.where(causal, scores, -jnp.inf)
        attended = jax.nn.softmax(scores, axis=-1) @ v
        attended = attended.transpose(0, 2, 1, 3).reshape(batch, length, dim)
        x = x + jax_linear(p, f"{prefix}.proj", attended)
        x = jax_mlp_block(p, prefix, x)
    return jax_linear(p, "head", jax_layer_norm(p, "ln", x))


def jax_cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
    logits = logits.reshape(-1, logits.shape[-1])
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(log_probs, targets.reshape(-1, 1), axis=-1).mean()


def jax_gpt_loss(p: dict[str, jax.Array], inputs: jax.Array, targets: jax.Array) -> jax.Array:
    return jax_cross_entropy(jax_gpt_forward(p, inputs), targets)


AdamState = tuple[dict[str, jax.Array], dict[str, jax.Array], dict[str, jax.Array], jax.Array]


Loss = Callable[[dict[str, jax.Array], jax.Array, jax.Array], jax.Array]


def jax_adamw_step(
    state: AdamState, inputs: jax.Array, targets: jax.Array, loss_fn: Loss = jax_gpt_loss
) -> tuple[AdamState, jax.Array]:
    """torch.optim.AdamW's defaults by hand: decoupled decay on every parameter, bias-corrected
    moments, eps added after the corrected square root."""
    params, m, v, count = state
    loss, grads = jax.value_and_grad(loss_fn)(params, inputs, targets)
    beta1, beta2 = ADAMW_BETAS
    count = count + 1.0
    correction1 = 1.0 - beta1**count
    correction2_sqrt = jnp.sqrt(1.0 - beta2**count)

    def update(
        p: jax.Array, g: jax.Array, m: jax.Array, v: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        p = p * (1.0 - ADAMW_LR * ADAMW_DECAY)
        m = beta1 * m + (1.0 - beta1) * g
        v = beta2 * v + (1.0 - beta2) * g * g
        denom = jnp.sqrt(v) / correction2_sqrt + ADAMW_EPS
        return p - (ADAMW_LR / correction1) * m / denom, m, v

    new_p, new_m, new_v = {}, {}, {}
    for name in params:
        new_p[name], new_m[name], new_v[name] = update(params[name], grads[name], m[name], v[name])
    return (new_p, new_m, new_v, count), loss


class GptStepRow:
    def __init__(self) -> None:
        self._reference: tuple[float, float] | None = None

    def reference(self) -> tuple[float, float]:
        """torch CPU eager's losses of the first two steps."""
        if self._reference is None:
            step = tiny_lm_training_step("cpu")
            self._reference = (step(), step())
        return self._reference

    def build(self, column: Column) -> Cell:
        first, second = self.reference()
        if column.device == "jax":
            return self.build_jax(first, second)
        step = tiny_lm_training_step(column.device, column.backend)
        check_close("first loss", step(), first, rtol=1e-3, atol=1e-5)
        check_close("second loss (after one AdamW step)", step(), second, rtol=1e-3, atol=1e-5)
        return Cell(step, no_sync)  # the step reads its loss back with .item()

    def build_jax(self, first: float, second: float) -> Cell:
        model, data = gpt_setup()
        params = jax_params(model)
        # Separate zero buffers for m and v: the step donates its whole state.
        m = {name: jnp.zeros_like(p) for name, p in params.items()}
        v = {name: jnp.zeros_like(p) for name, p in params.items()}
        state: list[AdamState] = [(params, m, v, jnp.zeros((), jnp.float32))]
        inputs = jnp.asarray(data[:, :-1].numpy())
        targets = jnp.asarray(data[:, 1:].numpy())
        jitted = jax.jit(jax_adamw_step, donate_argnums=0)

        def run() -> float:
            state[0], loss = jitted(state[0], inputs, targets)
            return float(loss)  # as the torch step's loss.item()

        check_close("first loss", run(), first, rtol=1e-3, atol=1e-5)
        check_close("second loss (after one AdamW step)", run(), second, rtol=1e-3, atol=1e-5)
        assert_f32(state[0])
        return Cell(run, no_sync)


class GptForwardRow:
    def __init__(self, batch: int) -> None:
        self.batch = batch
        self._setup: tuple[TinyGPT, torch.Tensor, torch.Tensor] | None = None

    def setup(self) -> tuple[TinyGPT, torch.Tensor, torch.Tensor]:
        """The model (eval), the tokens and torch CPU eager's logits."""
        if self._setup is None:
            model, _ = gpt_setup()
            model.eval()
            tokens = torch.randint(0, GPT_VOCAB, (self.batch, GPT_LEN))
            with torch.no_grad():
                logits = model(tokens)
            self._setup = (model, tokens, logits)
        return self._setup

    def build(self, column: Column) -> Cell:
        cpu_model, tokens_cpu, expected = self.setup()
        if column.device == "jax":
            params = jax_params(cpu_model)
            tokens = jnp.asarray(tokens_cpu.numpy())
            forward = jax.jit(jax_gpt_forward)
            check_close("logits", forward(params, tokens), expected, rtol=1e-4, atol=1e-4)
            return Cell(lambda: forward(params, tokens), jax_sync)
        model = TinyGPT(dim=GPT_DIM, layers=GPT_LAYERS, max_len=GPT_LEN)
        model.load_state_dict(cpu_model.state_dict())
        model = model.eval().to(column.device)
        tokens_t = tokens_cpu.to(column.device)
        fn = maybe_compile(model, column)

        def run() -> torch.Tensor:
            with torch.no_grad():
                return fn(tokens_t)

        check_close("logits", run(), expected, rtol=1e-4, atol=1e-4)
        return Cell(run, sync_for(column))


# --------------------------------------------------------------------------------------------
# Row 6: a small conv net's training step

CONV_BATCH, CONV_CLASSES = 32, 10


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 8 * 8, CONV_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def conv_setup() -> tuple[ConvNet, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = ConvNet()
    images = torch.randn(CONV_BATCH, 3, 32, 32)
    labels = torch.randint(0, CONV_CLASSES, (CONV_BATCH,))
    return model, images, labels


def jax_conv(p: dict[str, jax.Array], prefix: str, x: jax.Array) -> jax.Array:
    y = lax.conv_general_dilated(
        x,
        p[f"{prefix}.weight"],
        window_strides=(1, 1),
        padding=((1, 1), (1, 1)),
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
    )
    return y + p[f"{prefix}.bias"][None, :, None, None]


def jax_max_pool2(x: jax.Array) -> jax.Array:
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")


def jax_conv_loss(p: dict[str, jax.Array], images: jax.Array, labels: jax.Array) -> jax.Array:
    x = jax_max_pool2(jax.nn.relu(jax_conv(p, "conv1", images)))
    x = jax_max_pool2(jax.nn.relu(jax_conv(p, "conv2", x)))
    logits = jax_linear(p, "fc", x.reshape(x.shape[0], -1))
    return jax_cross_entropy(logits, labels)


class ConvRow:
    def __init__(self) -> None:
        self._reference: StepReference | None = None

    def reference(self) -> StepReference:
        if self._reference is None:
            self._reference = first_step_reference(conv_setup, F.cross_entropy)
        return self._reference

    def build(self, column: Column) -> Cell:
        if column.device == "jax":
            return jax_sgd_cell(conv_setup, jax_conv_loss, self.reference())
        return torch_sgd_cell(column, conv_setup, F.cross_entropy, self.reference())


# --------------------------------------------------------------------------------------------
# Row 7: greedy generate with a static KV cache

GEN_DIM, GEN_MAX_LEN, PROMPT, NEW_TOKENS = 64, 64, (1, 2, 3, 4), 24
Caches = list[tuple[torch.Tensor, torch.Tensor]]


def gen_model() -> TinyGPT:
    torch.manual_seed(0)
    return TinyGPT(dim=GEN_DIM, max_len=GEN_MAX_LEN).eval()


JaxCaches = list[tuple[jax.Array, jax.Array]]


def jax_decode_step(
    p: dict[str, jax.Array], token: jax.Array, pos: jax.Array, caches: JaxCaches
) -> tuple[jax.Array, jax.Array, JaxCaches]:
    """Block.step for every block, then head and argmax; returns (token, pos + 1, caches)."""
    head_dim = GEN_DIM // GPT_HEADS
    x = p["embed.weight"][token] + p["positions.weight"][pos]
    visible = jnp.arange(GEN_MAX_LEN) <= pos
    new_caches: JaxCaches = []
    for i, (k_cache, v_cache) in enumerate(caches):
        prefix = f"blocks.{i}"
        q, k, v = jnp.split(
            jax_linear(p, f"{prefix}.qkv", jax_layer_norm(p, f"{prefix}.ln1", x)), 3
        )
        k_cache = lax.dynamic_update_slice(k_cache, k.reshape(GPT_HEADS, 1, head_dim), (0, pos, 0))
        v_cache = lax.dynamic_update_slice(v_cache, v.reshape(GPT_HEADS, 1, head_dim), (0, pos, 0))
        new_caches.append((k_cache, v_cache))
        scores = (k_cache @ q.reshape(GPT_HEADS, head_dim, 1))[..., 0] / math.sqrt(head_dim)
        scores = jnp.where(visible, scores, -jnp.inf)
        attended = (jax.nn.softmax(scores, axis=-1)[:, None, :] @ v_cache).reshape(-1)
        x = x + jax_linear(p, f"{prefix}.proj", attended)
        x = jax_mlp_block(p, prefix, x)
    logits = jax_linear(p, "head", jax_layer_norm(p, "ln", x))
    return jnp.argmax(logits), pos + 1, new_caches


class GenerateRow:
    def __init__(self) -> None:
        self._expected: list[int] | None = None

    def expected(self) -> list[int]:
        """TinyGPT.generate's own tokens on CPU; every column must produce them."""
        if self._expected is None:
            self._expected = gen_model().generate(list(PROMPT), NEW_TOKENS)
        return self._expected

    def build(self, column: Column) -> Cell:
        if column.device == "jax":
            return self.build_jax()
        cpu_model = gen_model()
        model = TinyGPT(dim=GEN_DIM, max_len=GEN_MAX_LEN)
        model.load_state_dict(cpu_model.state_dict())
        model = model.eval().to(column.device)

        def step(token: torch.Tensor, pos: torch.Tensor, caches: Caches) -> torch.Tensor:
            return model.decode_step(token, pos, caches)

        compiled = maybe_compile(step, column)

        def run() -> list[int]:
            return model.generate(list(PROMPT), NEW_TOKENS, step=compiled)

        self.check(run())
        return Cell(run, no_sync, work=NEW_TOKENS)  # every token is read back already

    def build_jax(self) -> Cell:
        params = jax_params(gen_model())
        head_dim = GEN_DIM // GPT_HEADS
        decode = jax.jit(jax_decode_step, donate_argnums=3)

        def run() -> list[int]:
            shape = (GPT_HEADS, GEN_MAX_LEN, head_dim)
            caches = [(jnp.zeros(shape), jnp.zeros(shape)) for _ in range(GPT_LAYERS)]
            pos = jnp.zeros((), jnp.int32)
            produced: list[int] = []
            token = jnp.asarray(PROMPT[0])
            for i in range(len(PROMPT) - 1 + NEW_TOKENS):
                next_token, pos, caches = decode(params, token, pos, caches)
                if i + 1 < len(PROMPT):
                    token = jnp.asarray(PROMPT[i + 1])
                    continue
                token = next_token
                produced.append(int(token))
            return produced

        self.check(run())
        return Cell(run, no_sync, work=NEW_TOKENS)

    def check(self, produced: list[int]) -> None:
        if produced != self.expected():
            raise AssertionError(f"generated {produced}, torch CPU {self.expected()}")


# --------------------------------------------------------------------------------------------
# The table


class RowBuilder(Protocol):
    """The row classes above: build(column) returns a cell already checked against torch CPU."""

    def build(self, column: Column) -> Cell: ...


@dataclass(frozen=True)
class Row:
    name: str
    title: str
    unit: str  # "ms" or "tok/s"
    builder: RowBuilder


def all_rows() -> list[Row]:
    return [
        Row("mlp_step", "MLP train step 4x512, b128, SGD", "ms", MlpRow()),
        Row("chain_sum", "chain 25x(x*a+b) 4M f32 + sum", "ms", ChainRow(with_sum=True)),
        Row("chain", "chain 25x(x*a+b) 4M f32", "ms", ChainRow(with_sum=False)),
        Row("gpt_step", "TinyGPT train step 8x32, AdamW", "ms", GptStepRow()),
        Row("gpt_fwd_b1", "TinyGPT forward 1x32, no grad", "ms", GptForwardRow(1)),
        Row("gpt_fwd_b32", "TinyGPT forward 32x32, no grad", "ms", GptForwardRow(32)),
        Row("conv_step", "ConvNet train step b32, SGD", "ms", ConvRow()),
        Row("generate", "TinyGPT greedy generate", "tok/s", GenerateRow()),
    ]


@dataclass
class Results:
    values: dict[tuple[str, str], float] = field(default_factory=dict)
    errors: dict[tuple[str, str], int] = field(default_factory=dict)  # cell -> footnote number
    footnotes: list[str] = field(default_factory=list)


@contextlib.contextmanager
def column_mode(column: Column) -> Iterator[None]:
    """The column's torch_tpu eager mode around a build or a run; Strict again after it, with
    the column's work finished."""
    if column.device != "tpu":
        yield
        return
    torch_tpu.set_eager_mode(column.mode)  # type: ignore[arg-type]
    try:
        yield
    finally:
        try:
            torch.tpu.synchronize()
        finally:
            torch_tpu.set_eager_mode("strict")


def record_failure(results: Results, key: tuple[str, str], error: Exception) -> str:
    """A failed cell is reported in a footnote, not fatal."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    results.footnotes.append(f"{key[0]} / {key[1]}: {type(error).__name__}: {message[:160]}")
    results.errors[key] = len(results.footnotes)
    return f"err ({type(error).__name__})"


def measure_row(
    row: Row, columns: list[Column], warmup: int, repeats: int, results: Results
) -> None:
    """Builds (and checks) every column's cell, warms each up, then times them in interleaved
    rounds, each column run twice per round and its second run timed: the machine's drift
    (other processes, clock changes) then reaches every column of the row alike, and their
    ratios hold."""
    torch._dynamo.reset()  # once per row: the row's compiled columns stay compiled throughout
    cells: dict[str, tuple[Column, Cell]] = {}
    statuses: dict[str, str] = {}
    build_seconds: dict[str, float] = {}
    for column in columns:
        started = time.perf_counter()
        try:
            with column_mode(column):
                cell = row.builder.build(column)
                for _ in range(warmup):
                    timed_run(cell)
            cells[column.label] = (column, cell)
        except Exception as error:
            statuses[column.label] = record_failure(results, (row.name, column.label), error)
        build_seconds[column.label] = time.perf_counter() - started
    samples: dict[str, list[float]] = {label: [] for label in cells}
    for _ in range(repeats):
        for label, (column, cell) in list(cells.items()):
            try:
                with column_mode(column):
                    # An untimed run first: the column's thread pools are awake and the previous
                    # column's have stopped spinning on the cores when the timed run starts.
                    timed_run(cell)
                    samples[label].append(timed_run(cell))
            except Exception as error:
                statuses[label] = record_failure(results, (row.name, label), error)
                del cells[label]
    for label, (_, cell) in cells.items():
        seconds = statistics.median(samples[label])
        value = cell.work / seconds if row.unit == "tok/s" else seconds * 1e3
        results.values[(row.name, label)] = value
        statuses[label] = f"{value:.3f} {row.unit}"
    for column in columns:
        print(
            f"  {row.name:<12} {column.label:<19} {statuses[column.label]:<28} "
            f"(built and warmed up in {build_seconds[column.label]:.1f} s)",
            flush=True,
        )


def format_value(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def print_tables(rows: list[Row], columns: list[Column], results: Results) -> None:
    width = 19
    title_width = max(len(r.title) for r in rows) + 2

    def cell_text(row: Row, column: Column) -> str:
        key = (row.name, column.label)
        if key in results.errors:
            return f"err[{results.errors[key]}]"
        if key in results.values:
            return format_value(results.values[key])
        return "-"

    print()
    print("Medians (ms; generate: tokens/s, higher is better)")
    header = f"{'row':<{title_width}}{'unit':<7}" + "".join(f"{c.label:>{width}}" for c in columns)
    print(header)
    print("-" * len(header))
    for row in rows:
        cells = "".join(f"{cell_text(row, c):>{width}}" for c in columns)
        print(f"{row.title:<{title_width}}{row.unit:<7}{cells}")

    torch_columns = [c for c in columns if c.device != "jax"]
    if any(c.label == JAX for c in columns) and torch_columns:
        print()
        print("x jax: time relative to jax.jit (>1: slower than jax; generate: jax tok/s / tok/s)")
        print_ratios(rows, torch_columns, results, JAX, "x jax", title_width, width)
    tpu_columns = [c for c in columns if c.device == "tpu"]
    if any(c.label == CUDA_EAGER for c in columns) and tpu_columns:
        print()
        print("x CUDA eager: time relative to torch CUDA eager, the GPU user's default")
        print_ratios(rows, tpu_columns, results, CUDA_EAGER, "x CUDA", title_width, width)

    if results.footnotes:
        print()
        for number, note in enumerate(results.footnotes, start=1):
            print(f"[{number}] {note}")


def print_ratios(
    rows: list[Row],
    columns: list[Column],
    results: Results,
    anchor: str,
    suffix: str,
    title_width: int,
    width: int,
) -> None:
    """Each column's time over the anchor column's (tokens/s rows: the anchor's over the
    column's), so >1 is slower than the anchor."""
    header = f"{'row':<{title_width}}" + "".join(
        f"{c.label + ' ' + suffix:>{width + 7}}" for c in columns
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        anchor_value = results.values.get((row.name, anchor))
        cells = []
        for column in columns:
            value = results.values.get((row.name, column.label))
            if value is None or anchor_value is None:
                cells.append("-")
            elif row.unit == "tok/s":
                cells.append(f"{anchor_value / value:.2f}x")
            else:
                cells.append(f"{value / anchor_value:.2f}x")
        print(f"{row.title:<{title_width}}" + "".join(f"{c:>{width + 7}}" for c in cells))


def select(names: str | None, available: list[str], what: str) -> list[str]:
    if names is None:
        return available
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in available]
    if unknown:
        raise SystemExit(f"unknown {what} {unknown}; choose from {available}")
    return [n for n in available if n in chosen]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1 warm-up and 3 repeats per cell")
    parser.add_argument("--rows", help="comma-separated row names (default: all)")
    parser.add_argument("--columns", help="comma-separated column labels (default: all)")
    parser.add_argument("--warmup", type=int, help="warm-up runs per cell (after the check)")
    parser.add_argument("--repeats", type=int, help="timed runs per cell")
    parser.add_argument(
        "--torch-threads",
        type=int,
        help="torch CPU intra-op threads (default: torch's, one per core); 1 avoids OpenMP "
        "stalls when other processes keep the cores busy",
    )
    args = parser.parse_args(argv)

    rows_all = all_rows()
    row_names = select(args.rows, [r.name for r in rows_all], "rows")
    column_labels = select(args.columns, [c.label for c in COLUMNS], "columns")
    rows = [r for r in rows_all if r.name in row_names]
    columns = [c for c in COLUMNS if c.label in column_labels]
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 7)

    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)
    if jax.config.jax_enable_x64:
        raise SystemExit("jax x64 must be off: every column computes in float32")
    print(
        f"torch {torch.__version__} ({torch.get_num_threads()} threads), jax {jax.__version__} "
        f"({jax.devices()[0].platform}), tpu plugin {os.path.basename(torch_tpu.plugin_path())}; "
        f"{warmup} warm-up + {repeats} timed runs per cell, after a correctness check"
    )
    load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    if load > cores / 2 and torch.get_num_threads() > 1:
        print(
            f"note: load average {load:.1f} on {cores} cores: torch CPU's OpenMP threads stall "
            "when the cores are busy elsewhere; --torch-threads 1 gives steadier CPU columns"
        )
    results = Results()
    total = time.perf_counter()
    for row in rows:
        measure_row(row, columns, warmup, repeats, results)
    print(f"(measured in {time.perf_counter() - total:.0f} s)")
    print_tables(rows, columns, results)


if __name__ == "__main__":
    main()
