"""The main job: the mission snippet on the tpu device, then a small model trained on tpu and
on CPU side by side, printing both losses step by step."""

from __future__ import annotations

import torch
from torch import nn


def snippet() -> None:
    device = torch.device("tpu")
    x = torch.randn((4, 4), device=device)
    y = torch.ones((4, 4), device=device)
    result = torch.matmul(x, y).cpu()
    print(f"Executed on device: {x.device}")
    print(f"Result shape on CPU: {result.shape}, sum: {result.sum():.4f}")


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 4))


def train(
    device: str,
    state: dict[str, torch.Tensor],
    data: torch.Tensor,
    labels: torch.Tensor,
    steps: int,
) -> list[float]:
    model = make_model().to(device)
    model.load_state_dict(state)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    inputs, targets = data.to(device), labels.to(device)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    snippet()
    torch.manual_seed(0)
    data = torch.randn(128, 16)
    labels = (data[:, :4].sum(dim=1) > 0).long() + 2 * (data[:, 4:8].sum(dim=1) > 0).long()
    state = make_model().state_dict()
    steps = 15
    tpu_losses = train("tpu", state, data, labels, steps)
    cpu_losses = train("cpu", state, data, labels, steps)
    print(f"\nTraining an MLP with AdamW on tpu ({torch.tpu.get_device_name()}) and on CPU:")
    print(f"{'step':>4} | {'loss (tpu)':>10} | {'loss (cpu)':>10}")
    for step, (a, b) in enumerate(zip(tpu_losses, cpu_losses, strict=True)):
        print(f"{step:>4} | {a:>10.5f} | {b:>10.5f}")
    drift = max(abs(a - b) for a, b in zip(tpu_losses, cpu_losses, strict=True))
    print(f"largest |tpu - cpu| loss difference: {drift:.2e}")


if __name__ == "__main__":
    main()
