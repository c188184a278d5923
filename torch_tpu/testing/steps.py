"""Training steps the benchmarks share."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def mse_training_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor, targets: torch.Tensor
) -> Callable[[], torch.Tensor]:
    """One regression training step (zero_grad, forward, MSE loss, backward, optimizer step);
    returns the loss tensor (left on the device)."""

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    return step
