"""torch.autocast("tpu"): CUDA's op policy, and a small transformer trained under bfloat16
autocast with losses close to float32."""

from __future__ import annotations

import torch
from torch import nn

from torch_tpu.testing.tiny_gpt import TinyGPT

DEVICE = "tpu"


def test_op_policy_matches_cuda_lists() -> None:
    a = torch.randn(4, 8, device=DEVICE)
    b = torch.randn(8, 3, device=DEVICE)
    image = torch.randn(1, 2, 6, 6, device=DEVICE)
    kernel = torch.randn(3, 2, 3, 3, device=DEVICE)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        product = a @ b
        assert product.dtype == torch.bfloat16  # lower precision: matmul
        assert nn.functional.linear(a, b.t()).dtype == torch.bfloat16
        assert nn.functional.conv2d(image, kernel).dtype == torch.bfloat16
        assert product.softmax(-1).dtype == torch.float32  # float32: softmax, sums, exp
        assert product.sum().dtype == torch.float32
        assert product.exp().dtype == torch.float32
        assert nn.functional.layer_norm(product, (3,)).dtype == torch.float32
        assert (product + 1).dtype == torch.bfloat16  # no rule: runs in its input dtype
        assert torch.addcmul(a, a.bfloat16(), a).dtype == torch.float32  # promote
    # The values are those of the same computation in bfloat16 on the CPU.
    want = a.cpu().bfloat16() @ b.cpu().bfloat16()
    torch.testing.assert_close(product.cpu(), want, atol=1e-2, rtol=1e-2)
    assert (a @ b).dtype == torch.float32  # outside the region


def test_float16_autocast() -> None:
    a = torch.randn(4, 8, device=DEVICE)
    with torch.autocast(DEVICE, dtype=torch.float16):
        assert (a @ a.t()).dtype == torch.float16


def train(autocast: bool, steps: int = 25) -> list[float]:
    torch.manual_seed(0)
    model = TinyGPT(vocab=64, dim=32, heads=2, layers=2, max_len=32).to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (8, 17), generator=generator).to(DEVICE)
    losses = []
    for _ in range(steps):
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=autocast):
            logits = model(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_transformer_trains_under_bfloat16_autocast_close_to_float32() -> None:
    full = train(autocast=False)
    mixed = train(autocast=True)
    assert mixed[-1] < 0.8 * mixed[0], mixed  # it learns
    for step, (f, m) in enumerate(zip(full, mixed, strict=True)):
        assert abs(f - m) <= 0.05 * f, (step, f, m)
