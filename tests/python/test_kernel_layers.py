"""torch_tpu's ready layer kernels (torch_tpu.kernels.layers: a jax RMSNorm, a Pallas masked
flash attention) against PyTorch's own on CPU, forward and gradients; and TorchTitan's config
swapping them in (torch_tpu.integrations.torchtitan) for a model whose output stays the stock
model's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_mask

pytest.importorskip("jax")
from torch_tpu.kernels import layers  # noqa: E402

TPU = torch.device("tpu")


def _leaves(*tensors: torch.Tensor, device: torch.device | str) -> list[torch.Tensor]:
    return [t.detach().to(device, copy=True).requires_grad_() for t in tensors]


def test_rms_norm_matches_torch() -> None:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(3, 7, 48, generator=g), torch.randn(48, generator=g)
    xc, wc = _leaves(x, w, device="cpu")
    xt, wt = _leaves(x, w, device=TPU)
    expected = F.rms_norm(xc, (48,), wc, 1e-5)
    before = (layers.rms_norm.runs, layers.rms_norm.backward_op.runs)
    got = layers.rms_norm(xt, wt, 1e-5)
    torch.testing.assert_close(got.cpu(), expected.detach())
    cotangent = torch.randn(expected.shape, generator=g)
    expected.backward(cotangent)
    got.backward(cotangent.to(TPU))
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
    torch.testing.assert_close(wt.grad.cpu(), wc.grad)
    assert (layers.rms_norm.runs, layers.rms_norm.backward_op.runs) == (
        before[0] + 1,
        before[1] + 1,
    )


def _packed_documents(lengths: list[int]) -> torch.Tensor:
    return torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])


@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2)], ids=["mha", "gqa"])
def test_masked_attention_matches_sdpa_under_a_packed_document_mask(
    heads: int, kv_heads: int
) -> None:
    # Causal within each packed document: later documents never see key block 0, so the
    # kernel's running maximum starts over fully masked blocks.
    batch, length, dim = 2, 128, 16
    g = torch.Generator().manual_seed(1)
    q = torch.randn(batch, heads, length, dim, generator=g)
    k, v = (torch.randn(batch, kv_heads, length, dim, generator=g) for _ in range(2))
    documents = torch.stack([_packed_documents([40, 50, 38]), _packed_documents([100, 28])])

    def same_document_causal(b: torch.Tensor, h: torch.Tensor, qi: torch.Tensor, ki: torch.Tensor):
        return (ki <= qi) & (documents[b, qi] == documents[b, ki])

    mask = create_mask(same_document_causal, batch, None, length, length, device="cpu")
    qc, kc, vc = _leaves(q, k, v, device="cpu")
    expected = F.scaled_dot_product_attention(qc, kc, vc, attn_mask=mask, enable_gqa=True)
    qt, kt, vt = _leaves(q, k, v, device=TPU)
    got = layers.masked_attention(qt, kt, vt, mask[:, 0].to(TPU), dim**-0.5)
    torch.testing.assert_close(got.cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
    cotangent = torch.randn(expected.shape, generator=g)
    expected.backward(cotangent)
    got.backward(cotangent.to(TPU))
    for name, mine, theirs in (("q", qt, qc), ("k", kt, kc), ("v", vt, vc)):
        torch.testing.assert_close(mine.grad.cpu(), theirs.grad, rtol=1e-5, atol=1e-5, msg=name)


def test_torchtitan_overrides_swap_the_layers_and_keep_the_output() -> None:
    pytest.importorskip("torchtitan")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "recipes" / "titan"))
    import compat

    compat.stand_in_for_triton_kernels()  # TorchTitan's model modules import Triton kernels
    from torchtitan.config.override import OverrideConfig, apply_overrides
    from torchtitan.models.common.attention import FlexAttention
    from torchtitan.models.llama3 import model_registry

    from torch_tpu.integrations import torchtitan as titan

    # The stock model's flex attention as the recipe runs it on CPU: the same mask, dense,
    # through scaled_dot_product_attention (flex attention itself needs Inductor).
    dense = compat._dense_mask_attention()

    def tiny(inner: type) -> torch.nn.Module:
        spec = model_registry("debugmodel")
        spec.model.layers = spec.model.layers[:1]
        for layer in spec.model.layers:
            layer.attention.inner_attention = inner.Config()
        return spec

    stock, swapped = tiny(dense), tiny(FlexAttention)
    factories = ("jax_rms_norm", "pallas_attention")
    targets = [f"torch_tpu.integrations.torchtitan.{name}" for name in factories]
    apply_overrides(OverrideConfig(imports=targets), swapped)
    layer = swapped.model.layers[0]
    assert type(layer.attention_norm) is titan.JaxRMSNorm.Config
    assert type(layer.attention.inner_attention) is titan.PallasAttention.Config

    torch.manual_seed(0)
    reference = stock.model.build()
    reference.init_states()
    model = swapped.model.build()
    model.load_state_dict(reference.state_dict())  # the same parameter names and shapes
    model.to(TPU)
    # Two packed documents a row (TorchTitan's EOS id is the tokenizer's; 0 here is arbitrary).
    tokens = torch.randint(1, 2000, (2, 64), generator=torch.Generator().manual_seed(2))
    positions = torch.cat([torch.arange(24), torch.arange(40)]).expand(2, 64)
    masks = reference.get_attention_masks(positions)
    runs = layers.masked_attention.runs
    with torch.no_grad():
        expected = reference(tokens, attention_masks=masks, positions=positions)
        got = model(
            tokens.to(TPU),
            attention_masks=model.get_attention_masks(positions.to(TPU)),
            positions=positions.to(TPU),
        )
    assert layers.masked_attention.runs == runs + 1
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4)
