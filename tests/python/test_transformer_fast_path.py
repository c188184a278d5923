"""nn.TransformerEncoderLayer's fast path (eval, no grad, batch_first) on tpu, against CPU.

torch sends cpu, cuda and the PrivateUse1 device down the fused path
(aten::_transformer_encoder_layer_fwd, aten::_native_multi_head_attention); PyTorch's
test_nn.py reaches it through test_transformerencoderlayer*. Each case runs in Strict and in
DeferAndFuse mode.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from conftest import assert_close_to_cpu
from torch import nn

import torch_tpu


@pytest.fixture(params=["strict", "defer_and_fuse"])
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    with torch_tpu.eager_mode(request.param):
        yield request.param


def encoder_layer(activation: str, norm_first: bool) -> nn.TransformerEncoderLayer:
    layer = nn.TransformerEncoderLayer(
        d_model=8,
        nhead=2,
        dim_feedforward=16,
        dropout=0.0,
        activation=activation,
        batch_first=True,
        norm_first=norm_first,
    )
    return layer.eval()


@pytest.mark.parametrize(("activation", "norm_first"), [("relu", False), ("gelu", True)])
@pytest.mark.parametrize("masks", ["none", "padding", "attention", "both"])
def test_encoder_layer_fast_path_matches_cpu(
    mode: str, activation: str, norm_first: bool, masks: str
) -> None:
    torch.manual_seed(0)
    layer = encoder_layer(activation, norm_first)
    src = torch.randn(3, 5, 8)
    padding = torch.tensor([[False] * 5, [False, False, False, True, True], [False] * 4 + [True]])
    attention = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    kwargs = {}
    if masks in ("padding", "both"):
        kwargs["src_key_padding_mask"] = padding
    if masks in ("attention", "both"):
        kwargs["src_mask"] = attention

    def run(x: torch.Tensor, **kw: torch.Tensor) -> torch.Tensor:
        module = layer.to(x.device)
        with torch.no_grad():
            return module(x, **kw)

    assert_close_to_cpu(run, src, atol=1e-5, rtol=1e-5, **kwargs)
    # The fused op ran on tpu (the module did not take the composite path).
    tpu_kwargs = {name: mask.to("tpu") for name, mask in kwargs.items()}
    with torch.autograd.profiler.profile() as prof:
        run(src.to("tpu"), **tpu_kwargs)
    assert "aten::_transformer_encoder_layer_fwd" in [e.name for e in prof.function_events]


def test_fully_masked_row_gives_no_nan(mode: str) -> None:
    # Every key of the only sequence masked: the fast path's attention attends to nothing, as the
    # non-fast path does (PyTorch's test expects no NaN on devices other than cpu and cuda).
    torch.manual_seed(0)
    layer = encoder_layer("relu", False).to("tpu")
    src = torch.tensor([[[20.0, 30.0, 40.0, 50.0, 1.0, 2.0, 3.0, 4.0]]], device="tpu")
    with torch.no_grad():
        out = layer(src, src_key_padding_mask=torch.tensor([[True]], device="tpu"))
    assert not torch.isnan(out.cpu()).any()
    # With its one key masked out the attention adds only out_proj's bias: the residual and the
    # feed-forward block are left, computed here on CPU.
    layer_cpu = layer.to("cpu")
    with torch.no_grad():
        x = layer_cpu.norm1(src.cpu() + layer_cpu.self_attn.out_proj.bias)
        expected = layer_cpu.norm2(x + layer_cpu._ff_block(x))
    torch.testing.assert_close(out.cpu(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("average", [False, True])
def test_native_multi_head_attention_matches_cpu(
    mode: str, need_weights: bool, average: bool
) -> None:
    torch.manual_seed(0)
    embed, heads = 8, 2
    query, key = torch.randn(2, 6, embed), torch.randn(2, 6, embed)
    qkv_weight, qkv_bias = torch.randn(3 * embed, embed), torch.randn(3 * embed)
    proj_weight, proj_bias = torch.randn(embed, embed), torch.randn(embed)
    padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])

    def run(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, k, w, b, pw, pb, mask = args
        out, weights = torch._native_multi_head_attention(
            q, k, k, embed, heads, w, b, pw, pb, mask, need_weights, average, 1
        )
        return (out, weights) if need_weights else (out,)

    assert_close_to_cpu(
        run, query, key, qkv_weight, qkv_bias, proj_weight, proj_bias, padding, atol=1e-4, rtol=1e-4
    )


def test_empty_input_is_returned(mode: str) -> None:
    layer = encoder_layer("relu", False)

    def run(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return layer.to(x.device)(x)

    assert_close_to_cpu(run, torch.rand(0, 10, 8))


def test_native_multi_head_attention_refuses_mismatched_shapes() -> None:
    embed = 8
    weights = [torch.randn(3 * embed, embed), torch.randn(3 * embed)]
    weights += [torch.randn(embed, embed), torch.randn(embed)]
    for device in ("cpu", "tpu"):
        query = torch.randn(2, 4, embed, device=device)
        key = torch.randn(2, 6, embed, device=device)
        with pytest.raises(RuntimeError, match="query`/`key`/`value` shapes to match"):
            torch._native_multi_head_attention(
                query, key, key, embed, 2, *[w.to(device) for w in weights]
            )
