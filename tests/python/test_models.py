"""Small models trained on tpu and on CPU from the same initial weights and data: the losses
must agree at every step."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from conftest import TPU, assert_same
from torch import nn

STEPS = 20


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 2 * 2, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)  # 8x8 -> 4x4
        x = F.relu(self.bn2(self.conv2(x)))  # 4x4 -> 2x2
        return self.fc(x.flatten(1))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 20, dim: int = 32, seq: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.layer = nn.TransformerEncoderLayer(
            dim, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True, norm_first=True
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=x.device)
        x = self.layer(x, src_mask=mask, is_causal=True)
        return self.head(self.norm(x))


class HandWrittenAttentionBlock(nn.Module):
    """Pre-norm causal self-attention + MLP, written with plain tensor ops."""

    def __init__(self, vocab: int = 20, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 64), nn.SiLU(), nn.Linear(64, dim))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        attn = scores.masked_fill(causal, float("-inf")).softmax(-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, d))
        x = x + self.mlp(self.ln2(x))
        return self.head(x)


def make_pair(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """The same weights on CPU and on tpu (the tpu copy loaded through state_dict)."""
    on_tpu = copy.deepcopy(model).to(TPU)
    on_tpu.load_state_dict({k: v.to(TPU) for k, v in model.state_dict().items()})
    return model, on_tpu


def train_side_by_side(
    model: nn.Module,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    make_opt: Callable[[nn.Module], torch.optim.Optimizer],
    rtol: float,
    atol: float,
) -> tuple[list[float], list[float]]:
    cpu_model, tpu_model = make_pair(model)
    cpu_opt, tpu_opt = make_opt(cpu_model), make_opt(tpu_model)
    cpu_losses: list[float] = []
    tpu_losses: list[float] = []
    for step, (x, y) in enumerate(batches):
        for m, opt, xs, ys, losses in (
            (cpu_model, cpu_opt, x, y, cpu_losses),
            (tpu_model, tpu_opt, x.to(TPU), y.to(TPU), tpu_losses),
        ):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(m(xs), ys)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert tpu_losses[-1] == pytest.approx(cpu_losses[-1], rel=rtol, abs=atol), (
            f"step {step}: tpu loss {tpu_losses[-1]} vs cpu loss {cpu_losses[-1]}"
        )
    for p in tpu_model.parameters():
        assert p.device.type == "tpu"
    # Training did something, and did the same thing on both devices.
    assert cpu_losses[-1] < cpu_losses[0]
    assert tpu_losses[-1] < tpu_losses[0]
    # Adam-style optimizers step every parameter by about lr whatever its gradient's size, so
    # a gradient that is zero up to rounding (e.g. the attention input bias) may move a
    # parameter by +-lr on one device and not the other: the per-step losses above are the
    # real check, and parameters agree to within a couple of steps' size.
    lr = max(group["lr"] for group in cpu_opt.param_groups)
    param_atol = (
        max(atol * 10, 2 * lr)
        if isinstance(cpu_opt, torch.optim.Adam | torch.optim.AdamW)
        else atol * 10
    )
    assert_same(tpu_model.state_dict(), cpu_model.state_dict(), atol=param_atol, rtol=rtol * 10)
    return tpu_losses, cpu_losses


def test_mlp_regression_sgd() -> None:
    model = MLP()
    w_true = torch.randn(16, 4)
    xs = [torch.randn(32, 16) for _ in range(STEPS)]
    batches = [(x, x @ w_true + 0.1 * torch.randn(32, 4)) for x in xs]
    train_side_by_side(
        model,
        batches,
        F.mse_loss,
        lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
        rtol=1e-3,
        atol=1e-5,
    )


def test_mlp_classification_adamw() -> None:
    model = MLP()
    centers = torch.randn(4, 16) * 2
    batches = []
    for _ in range(STEPS):
        y = torch.randint(0, 4, (32,))
        batches.append((centers[y] + torch.randn(32, 16), y))
    train_side_by_side(
        model,
        batches,
        F.cross_entropy,
        lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01),
        rtol=1e-3,
        atol=1e-5,
    )


def test_cnn_batchnorm_sgd() -> None:
    model = SmallCNN()
    templates = torch.randn(5, 3, 8, 8)
    batches = []
    for _ in range(STEPS):
        y = torch.randint(0, 5, (16,))
        batches.append((templates[y] + 0.5 * torch.randn(16, 3, 8, 8), y))
    tpu_losses, _ = train_side_by_side(
        model,
        batches,
        F.cross_entropy,
        lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9),
        rtol=2e-3,
        atol=1e-5,
    )
    assert len(tpu_losses) == STEPS


def copy_task(
    vocab: int = 20, seq: int = 8, batch: int = 16
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Next-token prediction of a sequence that repeats its first half."""
    batches = []
    for _ in range(STEPS):
        half = torch.randint(0, vocab, (batch, seq // 2 + 1))
        full = torch.cat([half, half[:, 1:]], dim=1)[:, : seq + 1]
        batches.append((full[:, :-1].contiguous(), full[:, 1:].contiguous()))
    return batches


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


@pytest.mark.parametrize(
    "make_model",
    [TinyTransformer, HandWrittenAttentionBlock],
    ids=["encoder_layer", "hand_written"],
)
def test_transformer_adamw(make_model: Callable[[], nn.Module]) -> None:
    train_side_by_side(
        make_model(),
        copy_task(),
        lm_loss,
        lambda m: torch.optim.AdamW(m.parameters(), lr=3e-3),
        rtol=1e-2,
        atol=1e-4,
    )


def test_eval_mode_inference_matches_cpu() -> None:
    cpu_model, tpu_model = make_pair(SmallCNN())
    x = torch.randn(4, 3, 8, 8)
    for m in (cpu_model, tpu_model):
        m.train()
        m(x.to(next(m.parameters()).device))  # update the running stats once
        m.eval()
    with torch.no_grad():
        assert_same(tpu_model(x.to(TPU)), cpu_model(x), atol=1e-4, rtol=1e-4)
    with torch.inference_mode():
        assert_same(tpu_model(x.to(TPU)), cpu_model(x), atol=1e-4, rtol=1e-4)
