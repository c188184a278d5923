"""A sequence rerun whole at every step as it grows by a token: a Transformer without a KV
cache generating word by word, as pytorch/examples' word_language_model and minGPT-style
models do. Once the tokens grow in a bucket (a cat), what is computed from them stays in
buckets (matrix products, layer norm and softmax by rows, copies of views, attention over the
sequence), so a step at a new length inside a met bucket compiles nothing, and every output
equals CPU's."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_tpu

DEVICE = "tpu"

pytestmark = pytest.mark.usefixtures("size_buckets_on")


def compiled() -> int:
    counts = torch_tpu.metrics()
    return counts["compiles"] + counts["disk_cache_hits"]


class SequenceFirstModel(nn.Module):
    """word_language_model's TransformerModel in short: embedding, a positional table read by
    its first rows, nn.TransformerEncoder (sequence first), decoder and log_softmax."""

    def __init__(self, tokens: int, width: int) -> None:
        super().__init__()
        self.width = width
        self.embed = nn.Embedding(tokens, width)
        self.register_buffer("positions", torch.randn(256, 1, width) * 0.1)
        layer = nn.TransformerEncoderLayer(width, 2, 2 * width, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.decoder = nn.Linear(width, tokens)

    def forward(self, source: torch.Tensor) -> torch.Tensor:
        x = self.embed(source) * math.sqrt(self.width)
        x = x + self.positions[: x.size(0)]
        return F.log_softmax(self.decoder(self.encoder(x)), dim=-1)


class CausalModel(nn.Module):
    """A batch-first causal block as minGPT/nanoGPT write it: one linear for q, k and v, split,
    heads transposed, scaled_dot_product_attention(is_causal=True), heads transposed back."""

    def __init__(self, tokens: int, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(tokens, width)
        self.qkv = nn.Linear(width, 3 * width)
        self.project = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, tokens)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)

        def split_heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, length, self.heads, width // self.heads).transpose(1, 2)

        y = F.scaled_dot_product_attention(
            split_heads(q), split_heads(k), split_heads(v), is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(batch, length, width)
        x = self.norm(x + self.project(y))
        return F.softmax(self.head(x), dim=-1)


def generate(
    model: nn.Module, device_model: nn.Module, ids: torch.Tensor, until: int, dim: int
) -> tuple[list[int], torch.Tensor]:
    """Grows `ids` along `dim` to `until` tokens, each step's whole output checked against
    CPU's (CPU picks the next token for both); returns the compiles of each step and the
    grown ids on the device."""
    device_ids = ids.to(DEVICE)
    compiles = []
    with torch.no_grad():
        while ids.shape[dim] < until:
            before = compiled()
            out = device_model(device_ids)
            expected = model(ids)
            torch.testing.assert_close(out.cpu(), expected, atol=2e-5, rtol=1e-4)
            last = expected.select(dim, -1).reshape(-1, expected.shape[-1])
            token = last.argmax(-1).view([1, 1])
            ids = torch.cat([ids, token], dim)
            device_ids = torch.cat([device_ids, token.to(DEVICE)], dim)
            compiles.append(compiled() - before)
    return compiles, device_ids


def executions(run: Callable[[], torch.Tensor]) -> int:
    before = torch_tpu.metrics()["executions"]
    run().cpu()
    return torch_tpu.metrics()["executions"] - before


@pytest.mark.parametrize(
    "make, start, dim",
    [
        # Length 40 is also the width (sequence first) or the head dim (causal): a dim as long
        # as the sequence that is not the sequence's keeps its buckets too.
        (lambda: SequenceFirstModel(tokens=97, width=40), [[5]] * 29, 0),
        (lambda: CausalModel(tokens=61, width=80, heads=2), [[3, 7] * 14], 1),
    ],
    ids=["sequence_first", "causal_batch_first"],
)
def test_a_growing_sequence_compiles_nothing_inside_a_met_bucket(
    make: Callable[[], nn.Module], start: list[list[int]], dim: int
) -> None:
    torch.manual_seed(0)
    model, device_model = make().eval(), make().eval()
    device_model.load_state_dict(model.state_dict())
    device_model.to(DEVICE)
    before = torch_tpu.metrics()["size_bucket_ops"]
    # Strict runs op by op (DeferAndFuse compiles each step's graph once per length).
    with torch_tpu.eager_mode("strict"):
        compiles, grown = generate(model, device_model, torch.tensor(start), until=44, dim=dim)
    assert torch_tpu.metrics()["size_bucket_ops"] > before
    # Lengths 33 and 34 meet the bucket of 64 (the cat's first two lengths there); from 35 on a
    # step compiles nothing (at exact sizes each length compiled 14 executables, in the
    # sequence-first model).
    assert compiles[-9:] == [0] * 9, compiles
    # And launches what a step at exact sizes launches, no more.
    with torch.no_grad(), torch_tpu.eager_mode("strict"):
        at_bucket = executions(lambda: device_model(grown))
        torch_tpu._C._set_size_buckets(False)
        exact = grown.cpu().to(DEVICE)
        assert executions(lambda: device_model(exact)) == at_bucket


def test_ops_across_the_sequence_stay_exact() -> None:
    """A softmax, a sum or a scan over the sequence's own dim reads every position: those run
    at exact sizes, and padding never reaches them."""
    torch.manual_seed(2)
    table = torch.randn(31, 16)
    ids = torch.randint(31, (12, 1))
    device_ids, device_table = ids.to(DEVICE), table.to(DEVICE)
    for _ in range(6):
        token = torch.randint(31, (1, 1))
        ids, device_ids = torch.cat([ids, token]), torch.cat([device_ids, token.to(DEVICE)])
        x, device_x = F.embedding(ids, table), F.embedding(device_ids, device_table)
        for op in (
            lambda t: F.softmax(t, dim=0),
            lambda t: t.sum(0),
            lambda t: t.cumsum(0),
            lambda t: F.layer_norm(t.transpose(0, 2), (t.shape[0],)),
            lambda t: t.transpose(0, 2).contiguous() @ torch.ones_like(t[:, 0, :1]),
        ):
            torch.testing.assert_close(op(device_x).cpu(), op(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["strict", "debug"])
def test_an_out_of_range_token_in_a_grown_sequence_still_raises(mode: str) -> None:
    table = torch.randn(40, 8).to(DEVICE)
    ids = torch.arange(20).view(20, 1).to(DEVICE)
    with torch_tpu.eager_mode(mode):
        for token in range(20, 38):
            ids = torch.cat([ids, torch.tensor([[token]]).to(DEVICE)])
            F.embedding(ids, table).cpu()
        ids = torch.cat([ids, torch.tensor([[40]]).to(DEVICE)])
        with pytest.raises(IndexError):
            F.embedding(ids, table).cpu()


def test_what_a_bucket_holds_past_the_length_never_reaches_attention() -> None:
    """Past the length a bucket holds whatever its producer computed there: here log of a
    negative row (NaN), where the real rows are finite. A masked key weighs 0, and 0 x NaN
    would still be NaN: the padded rows of keys and values are read as zeros."""
    table = torch.rand(16, 8) + 0.5
    table[0] = -1.0  # padded positions of a grown index read row 0
    ids = torch.randint(1, 16, (20, 1))
    device_ids, device_table = ids.to(DEVICE), table.to(DEVICE)

    def attend(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        x = torch.log(F.embedding(ids, table))  # [L, 1, 8]
        heads = x.view(1, -1, 2, 4).transpose(1, 2)
        return F.scaled_dot_product_attention(heads, heads, heads).transpose(1, 2).contiguous()

    for _ in range(8):
        token = torch.randint(1, 16, (1, 1))
        ids, device_ids = torch.cat([ids, token]), torch.cat([device_ids, token.to(DEVICE)])
        torch.testing.assert_close(attend(device_ids, device_table).cpu(), attend(ids, table))
