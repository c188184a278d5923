"""Bounded dynamic shapes in torch.compile(backend="tpu"): sizes padded to buckets reuse one
executable per bucket, with results equal to CPU at every actual size."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torch_tpu

DEVICE = "tpu"


class CausalLM(nn.Module):
    """Embedding, causal self-attention, layer norm and an MLP; each token sees earlier ones."""

    def __init__(self, vocab: int = 50, dim: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(512, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        positions = torch.arange(length, device=ids.device)
        x = self.embed(ids) + self.position(positions)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        causal = positions[:, None] >= positions[None, :]
        scores = scores.masked_fill(~causal, float("-inf"))
        x = x + scores.softmax(-1) @ v
        x = x + self.mlp(self.norm(x))
        return self.head(x)


def lm_loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(ids)
    return nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())


def models() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    cpu = CausalLM()
    tpu = CausalLM().to(DEVICE)
    tpu.load_state_dict(cpu.state_dict())
    return cpu, tpu


def test_forward_sweep_1_to_256_compiles_about_log2_times() -> None:
    cpu, tpu = models()
    compiled = torch.compile(tpu, backend="tpu", dynamic=True)
    torch_tpu.reset_metrics()
    checked = {1, 2, 3, 7, 8, 9, 100, 127, 128, 129, 255, 256}
    # Every length up to 128, then a few in the last bucket: the long ones cost the most time.
    with torch.no_grad():
        for length in [*range(1, 129), 129, 200, 255, 256]:
            ids = torch.randint(0, 50, (2, length))
            got = compiled(ids.to(DEVICE))
            assert got.shape == (2, length, 50)
            if length in checked:
                torch.testing.assert_close(got.cpu(), cpu(ids), atol=2e-5, rtol=1e-4)
    compiles = torch_tpu.metrics()["compiles"]
    # Buckets 8, 16, ..., 256 for the dynamic graph, plus the graph Dynamo specializes for
    # length 1 (and a few single-op executables for the checks' host reads).
    assert compiles <= 11, compiles


def test_training_step_buckets_and_gradients_match_cpu() -> None:
    cpu, tpu = models()
    step = torch.compile(lm_loss, backend="tpu", dynamic=True)
    compiles_by_bucket: dict[int, int] = {}
    for length in [5, 9, 12, 16, 33, 40, 64, 65, 100, 127, 7, 128]:
        ids = torch.randint(0, 50, (2, length))
        want = lm_loss(cpu, ids)
        want.backward()
        before = torch_tpu.metrics()["compiles"]
        got = step(tpu, ids.to(DEVICE))
        got.backward()
        bucket = 1 << (length - 1).bit_length()
        compiles_by_bucket[bucket] = compiles_by_bucket.get(bucket, 0) + (
            torch_tpu.metrics()["compiles"] - before
        )
        torch.testing.assert_close(got.cpu(), want, atol=2e-5, rtol=1e-4)
        for name, param in tpu.named_parameters():
            expected = dict(cpu.named_parameters())[name].grad
            assert param.grad is not None, name
            torch.testing.assert_close(param.grad.cpu(), expected, atol=5e-5, rtol=1e-3)
        cpu.zero_grad()
        tpu.zero_grad()
    # After the first step (which also compiles the eager gradient accumulation), each bucket
    # compiles its forward and its backward once, whatever the lengths inside it.
    del compiles_by_bucket[8]
    assert compiles_by_bucket == {16: 2, 64: 2, 128: 2}, compiles_by_bucket


def test_mark_dynamic_bound_caps_the_bucket() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.sum(1), x.amax(1)

    compiled = torch.compile(f, backend="tpu")
    for length in (20, 33, 40):
        x = torch.randn(3, length)
        xt = x.to(DEVICE)
        torch._dynamo.mark_dynamic(xt, 1, min=2, max=40)
        got = compiled(xt)
        torch.testing.assert_close(got[0].cpu(), x.sum(1))
        torch.testing.assert_close(got[1].cpu(), x.amax(1))


@pytest.mark.parametrize("buckets", [True, False])
def test_reductions_over_padded_dims_are_exact(buckets: bool) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            x.mean(1),
            x.softmax(1),
            x.log_softmax(0),
            x.amin(1),
            x.logsumexp(1),
            x.argmax(1),
            x.cumsum(1),
            x.sum(),
        )

    compiled = torch.compile(f, backend="tpu", dynamic=True, options={"buckets": buckets})
    for rows, cols in ((3, 5), (4, 7), (6, 13), (9, 3)):
        x = torch.randn(rows, cols) - 5.0  # all negative: padding zeros must not win a max
        got = compiled(x.to(DEVICE))
        for g, w in zip(got, f(x), strict=True):
            torch.testing.assert_close(g.cpu(), w, atol=1e-5, rtol=1e-5)


def test_integer_and_bool_reductions_over_padded_dims_are_exact() -> None:
    """Padding reads as the reduction's neutral element for its dtype (op_padding.cc): the
    lowest int64 for a max, False for a bool max, not a float -inf that an int cannot hold."""

    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x.amax(1), x.amin(1), x.argmax(1), x.sum(1), (x > -30).amax(1)

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    for rows, cols in ((3, 5), (4, 7), (6, 13)):
        x = torch.randint(-50, -10, (rows, cols))  # all negative: padding zeros would win a max
        got = compiled(x.to(DEVICE))
        for g, w in zip(got, f(x), strict=True):
            torch.testing.assert_close(g.cpu(), w)


def test_padding_table_rows_name_aten_ops() -> None:
    """A misspelt row of the one padding table both paths read (csrc/dispatch/op_padding.cc)
    would never match an op: every row names an aten op (or its in-place form), or one of
    torch_tpu's own ops by its qualified name."""
    table = torch_tpu._C._op_padding()
    assert {"add", "sum", "cat", "torch_tpu::attention"} <= set(table)
    for op in table:
        namespace, _, name = op.rpartition("::")
        ops = getattr(torch.ops, namespace or "aten")
        assert hasattr(ops, name) or hasattr(ops, name + "_"), op


def test_graph_with_an_op_without_padding_rule_runs_exact() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.flip(x, [1]) * 2  # flip moves padding to the front: no padding rule

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    with pytest.warns(UserWarning, match="runs at exact shapes"):
        for cols in (5, 6, 11):
            x = torch.randn(3, cols)
            torch.testing.assert_close(compiled(x.to(DEVICE)).cpu(), f(x))


@pytest.mark.parametrize("n", [4, 5, 6])
def test_integer_arguments_keep_their_value_while_sizes_bucket(n: int) -> None:
    # With dynamic=True, Dynamo makes integer arguments symbols like sizes; one that sizes no
    # tensor is a value (vLLM's vocabulary-shard offsets: `x - start`) and must not be padded
    # to a bucket (it read 0 as 1, 3 as 4, 7 as 8).
    torch._dynamo.reset()

    def shard_offsets(x: torch.Tensor, start: int, end: int) -> torch.Tensor:
        inside = (x >= start) & (x < end)
        return inside * (x - start)

    compiled = torch.compile(shard_offsets, dynamic=True, backend="tpu")
    for start, end in [(0, 256), (3, 300), (7, 512), (256, 512)]:
        x = torch.arange(n) * 97 % 512
        got = compiled(x.to(DEVICE), start, end)
        assert torch.equal(got.cpu(), shard_offsets(x, start, end)), (start, end)
