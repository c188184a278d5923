"""A tiny GPT with a static-shape KV cache, for training-step and greedy-generate checks.

The generate loop keeps every shape fixed: the cache is preallocated to ``max_len``, the
position is a device tensor, new keys/values are written with ``index_copy_`` and future
positions are masked. So each token runs the same ops on the same shapes, and a backend that
caches executables compiles nothing new after the first tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        return x.view(batch, length, self.heads, dim // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(x.shape))
        return x + self.mlp(self.ln2(x))

    def step(
        self, x: torch.Tensor, pos: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
    ) -> torch.Tensor:
        """One token (x: [dim]) at position `pos`, reading and extending the caches."""
        heads, max_len, head_dim = k_cache.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        index = pos.view(1)
        k_cache.index_copy_(1, index, k.view(heads, 1, head_dim))
        v_cache.index_copy_(1, index, v.view(heads, 1, head_dim))
        scores = (k_cache @ q.view(heads, head_dim, 1)).squeeze(-1) / math.sqrt(head_dim)
        visible = torch.arange(max_len, device=x.device) <= pos
        scores = scores.masked_fill(~visible, float("-inf"))
        attended = (torch.softmax(scores, dim=-1).unsqueeze(1) @ v_cache).reshape(-1)
        x = x + self.proj(attended)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(
        self, vocab: int = 64, dim: int = 32, heads: int = 2, layers: int = 2, max_len: int = 64
    ) -> None:
        super().__init__()
        self.max_len = max_len
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))

    def empty_caches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Zeroed (keys, values) caches, one pair per block, for every position."""
        device = self.embed.weight.device
        head_dim = self.embed.weight.shape[1] // self.heads
        return [
            (
                torch.zeros(self.heads, self.max_len, head_dim, device=device),
                torch.zeros(self.heads, self.max_len, head_dim, device=device),
            )
            for _ in self.blocks
        ]

    def decode_step(
        self,
        token: torch.Tensor,
        pos: torch.Tensor,
        caches: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> torch.Tensor:
        """One token at position `pos`: extends the caches, advances `pos` and returns the
        argmax of the next token's logits."""
        x = self.embed(token) + self.positions(pos)
        for block, (k_cache, v_cache) in zip(self.blocks, caches, strict=True):
            x = block.step(x, pos, k_cache, v_cache)
        pos.add_(1)
        return self.head(self.ln(x)).argmax()

    @torch.no_grad()
    def generate(
        self,
        prompt: list[int],
        new_tokens: int,
        on_token: Callable[[int], None] | None = None,
        step: Callable[..., torch.Tensor] | None = None,
    ) -> list[int]:
        """Greedy decoding, one token at a time, reading each new token back to the host
        (as a stopping criterion would). `step` replaces decode_step (a compiled one, say)."""
        step = step if step is not None else self.decode_step
        device = self.embed.weight.device
        caches = self.empty_caches()
        pos = torch.zeros((), dtype=torch.long, device=device)
        produced: list[int] = []
        token = torch.tensor(prompt[0], device=device)
        for i in range(len(prompt) - 1 + new_tokens):
            next_token = step(token, pos, caches)
            if i + 1 < len(prompt):
                token = torch.tensor(prompt[i + 1], device=device)
                continue
            token = next_token
            produced.append(int(token.item()))
            if on_token is not None:
                on_token(len(produced))
        return produced


def training_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> Callable[[], torch.Tensor]:
    """One language-model training step (forward, cross-entropy, backward, optimizer step);
    returns the loss tensor (left on the device)."""

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        return loss

    return step


def tiny_lm_training_step(
    device: torch.device | str, compile_backend: str | None = None
) -> Callable[[], float]:
    """The benchmarks' workload: a TinyGPT (dim 64, 2 layers) AdamW step on an 8x32 batch,
    optionally under torch.compile; each call returns the loss as a float."""
    torch.manual_seed(0)
    model = TinyGPT(dim=64, layers=2, max_len=32).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, 64, (8, 33))
    inputs, targets = data[:, :-1].to(device), data[:, 1:].to(device)
    step = training_step(model, optimizer, inputs, targets)
    fn = torch.compile(step, backend=compile_backend) if compile_backend else step
    return lambda: fn().item()
