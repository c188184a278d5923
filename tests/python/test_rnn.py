"""nn.LSTM / nn.GRU and their cells on tpu against CPU. ATen runs a tpu tensor's cells through
its fused kernels (_thnn_fused_lstm_cell, _thnn_fused_gru_cell and their backwards), which CPU
never uses: the modules' outputs and gradients must still be CPU's, and the fused ops must keep
ATen's own contract (gate order, workspace, absent biases and gradients)."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from conftest import TPU, assert_same
from torch import nn

import torch_tpu

TOL = {"atol": 1e-5, "rtol": 1e-5}


def _on_tpu(module: nn.Module) -> nn.Module:
    return copy.deepcopy(module).to(TPU)


def _leaf(shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """The same random leaf on CPU and on tpu, both requiring grad."""
    cpu = torch.randn(shape, requires_grad=True)
    return cpu, cpu.detach().to(TPU).requires_grad_()


def _assert_same_grads(tpu_module: nn.Module, cpu_module: nn.Module) -> None:
    for (name, expected), got in zip(
        cpu_module.named_parameters(), tpu_module.parameters(), strict=True
    ):  # fmt: skip
        assert got.grad is not None, name
        torch.testing.assert_close(got.grad.cpu(), expected.grad, **TOL, msg=name)


# (num_layers, bias, batch_first, bidirectional): every option on and off at least once.
CONFIGS = [(1, True, False, False), (2, False, True, True), (2, True, False, True)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "L{}-bias{}-bf{}-bi{}".format(*c))
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_rnn_forward_and_backward_match_cpu(
    kind: str, config: tuple[int, bool, bool, bool]
) -> None:
    num_layers, bias, batch_first, bidirectional = config
    torch.manual_seed(0)
    cpu_rnn = getattr(nn, kind)(
        4, 6, num_layers=num_layers, bias=bias, batch_first=batch_first, bidirectional=bidirectional
    )
    tpu_rnn = _on_tpu(cpu_rnn)
    seq, batch, directions = 5, 3, 2 if bidirectional else 1
    x, x_tpu = _leaf((batch, seq, 4) if batch_first else (seq, batch, 4))
    h0, h0_tpu = _leaf((num_layers * directions, batch, 6))
    c0, c0_tpu = _leaf((num_layers * directions, batch, 6))
    state, state_tpu = ((h0, c0), (h0_tpu, c0_tpu)) if kind == "LSTM" else (h0, h0_tpu)

    out, final = cpu_rnn(x, state)
    out_tpu, final_tpu = tpu_rnn(x_tpu, state_tpu)
    assert_same(out_tpu, out, **TOL)
    assert_same(final_tpu, final, **TOL)

    # Every output feeds the loss, the final states too, so each gradient path is taken.
    finals = final if kind == "LSTM" else (final,)
    finals_tpu = final_tpu if kind == "LSTM" else (final_tpu,)
    weights = torch.randn(out.shape)
    loss = (out * weights).sum() + sum(f.square().sum() for f in finals)
    loss_tpu = (out_tpu * weights.to(TPU)).sum() + sum(f.square().sum() for f in finals_tpu)
    loss.backward()
    loss_tpu.backward()
    inputs = [(x, x_tpu), (h0, h0_tpu)] + ([(c0, c0_tpu)] if kind == "LSTM" else [])
    for cpu_leaf, tpu_leaf in inputs:
        assert_same(tpu_leaf.grad, cpu_leaf.grad, **TOL)
    _assert_same_grads(tpu_rnn, cpu_rnn)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("with_state", [True, False])
@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
def test_cell_forward_and_backward_match_cpu(kind: str, with_state: bool, bias: bool) -> None:
    torch.manual_seed(0)
    cpu_cell = getattr(nn, kind)(4, 6, bias=bias)
    tpu_cell = _on_tpu(cpu_cell)
    x, x_tpu = _leaf((3, 4))
    h, h_tpu = _leaf((3, 6))
    c, c_tpu = _leaf((3, 6))
    state = ((h, c) if kind == "LSTMCell" else h) if with_state else None
    state_tpu = ((h_tpu, c_tpu) if kind == "LSTMCell" else h_tpu) if with_state else None

    result = cpu_cell(x, state)
    result_tpu = tpu_cell(x_tpu, state_tpu)
    assert_same(result_tpu, result, **TOL)
    outputs = result if isinstance(result, tuple) else (result,)
    outputs_tpu = result_tpu if isinstance(result_tpu, tuple) else (result_tpu,)
    sum(o.square().sum() for o in outputs).backward()
    sum(o.square().sum() for o in outputs_tpu).backward()
    assert_same(x_tpu.grad, x.grad, **TOL)
    if with_state:
        assert_same(h_tpu.grad, h.grad, **TOL)
        if kind == "LSTMCell":
            assert_same(c_tpu.grad, c.grad, **TOL)
    _assert_same_grads(tpu_cell, cpu_cell)


def test_cell_double_backward_matches_cpu() -> None:
    """With create_graph, autograd takes ATen's differentiable cell backward instead."""
    torch.manual_seed(0)
    cpu_cell = nn.GRUCell(4, 6)
    tpu_cell = _on_tpu(cpu_cell)
    x, x_tpu = _leaf((3, 4))
    (grad,) = torch.autograd.grad(cpu_cell(x).square().sum(), x, create_graph=True)
    (grad_tpu,) = torch.autograd.grad(tpu_cell(x_tpu).square().sum(), x_tpu, create_graph=True)
    assert_same(grad_tpu, grad, **TOL)
    grad.sum().backward()
    grad_tpu.sum().backward()
    assert_same(x_tpu.grad, x.grad, **TOL)


def _gates(batch: int, hidden: int, count: int) -> list[torch.Tensor]:
    return [torch.randn(batch, count * hidden), torch.randn(batch, count * hidden)]


def test_fused_lstm_cell_follows_atens_contract() -> None:
    """Gates i, f, g, o; the workspace holds them activated; the backward's gradient of the
    gates and cx, and the bias gradient only with biases."""
    torch.manual_seed(0)
    input_gates, hidden_gates = _gates(3, 5, 4)
    cx, input_bias, hidden_bias = torch.randn(3, 5), torch.randn(20), torch.randn(20)
    args = [input_gates, hidden_gates, cx, input_bias, hidden_bias]
    hy, cy, workspace = torch.ops.aten._thnn_fused_lstm_cell(*[a.to(TPU) for a in args])

    pre = (input_gates + hidden_gates + input_bias + hidden_bias).chunk(4, 1)
    i, f, g, o = pre[0].sigmoid(), pre[1].sigmoid(), pre[2].tanh(), pre[3].sigmoid()
    assert_same(workspace, torch.cat([i, f, g, o], 1), **TOL)
    assert_same(cy, f * cx + i * g, **TOL)
    assert_same(hy, o * (f * cx + i * g).tanh(), **TOL)

    grad_hy, grad_cy = torch.randn(3, 5), torch.randn(3, 5)
    backward = torch.ops.aten._thnn_fused_lstm_cell_backward_impl
    on_tpu = [t.to(TPU) for t in (grad_hy, grad_cy, cx, cy.cpu(), workspace.cpu())]
    grad_gates, grad_cx, grad_bias = backward(*on_tpu, True)
    # The reference: autograd through the same formulas on CPU.
    leaves = [t.clone().requires_grad_() for t in (input_gates, cx)]
    pre = (leaves[0] + hidden_gates + input_bias + hidden_bias).chunk(4, 1)
    c_new = pre[1].sigmoid() * leaves[1] + pre[0].sigmoid() * pre[2].tanh()
    h_new = pre[3].sigmoid() * c_new.tanh()
    torch.autograd.backward([h_new, c_new], [grad_hy, grad_cy])
    assert_same(grad_gates, leaves[0].grad, **TOL)
    assert_same(grad_cx, leaves[1].grad, **TOL)
    assert_same(grad_bias, leaves[0].grad.sum(0), **TOL)

    # No biases: no bias gradient. No gradient of hy: it counts as zeros.
    no_bias = backward(None, on_tpu[1], *on_tpu[2:], False)
    assert no_bias[2] is None
    hy_free = backward(torch.zeros(3, 5, device=TPU), *on_tpu[1:], False)
    assert_same(no_bias[:2], hy_free[:2], **TOL)
    # No gradients at all: every result undefined, as on CUDA.
    assert backward(None, None, *on_tpu[2:], True) == (None, None, None)


def test_fused_gru_cell_follows_atens_contract() -> None:
    """Gates r, z, n; the workspace holds [r, z, n, hx, hidden n + hidden bias n]; the backward
    gives both gates' gradients, hx's, and the biases' only with biases."""
    torch.manual_seed(0)
    input_gates, hidden_gates = _gates(3, 5, 3)
    hx, input_bias, hidden_bias = torch.randn(3, 5), torch.randn(15), torch.randn(15)
    args = [input_gates, hidden_gates, hx, input_bias, hidden_bias]
    hy, workspace = torch.ops.aten._thnn_fused_gru_cell(*[a.to(TPU) for a in args])

    i_r, i_z, i_n = (input_gates + input_bias).chunk(3, 1)
    h_r, h_z, h_n = (hidden_gates + hidden_bias).chunk(3, 1)
    r, z = (i_r + h_r).sigmoid(), (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    assert_same(workspace, torch.cat([r, z, n, hx, h_n], 1), **TOL)
    assert_same(hy, n + z * (hx - n), **TOL)

    grad_hy = torch.randn(3, 5)
    backward = torch.ops.aten._thnn_fused_gru_cell_backward
    grads = backward(grad_hy.to(TPU), workspace, True)
    leaves = [t.clone().requires_grad_() for t in (input_gates, hidden_gates, hx)]
    i_r, i_z, i_n = (leaves[0] + input_bias).chunk(3, 1)
    h_r, h_z, h_n = (leaves[1] + hidden_bias).chunk(3, 1)
    r, z = (i_r + h_r).sigmoid(), (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    (n + z * (leaves[2] - n)).backward(grad_hy)
    expected = [leaf.grad for leaf in leaves] + [leaves[0].grad.sum(0), leaves[1].grad.sum(0)]
    assert_same(list(grads), expected, **TOL)
    assert backward(grad_hy.to(TPU), workspace, False)[3:] == (None, None)


def test_fused_gru_cell_checks_sizes_as_atens_kernels() -> None:
    """torch has no Meta kernel for the GRU cell: the lowering makes CUDA's checks itself."""
    input_gates, hidden_gates = (t.to(TPU) for t in _gates(2, 4, 3))
    with pytest.raises(RuntimeError, match="prev_hidden"):
        torch.ops.aten._thnn_fused_gru_cell(
            input_gates, hidden_gates, torch.zeros(2, 5, device=TPU)
        )
    with pytest.raises(RuntimeError, match="workspace"):
        torch.ops.aten._thnn_fused_gru_cell_backward(
            torch.zeros(2, 4, device=TPU), torch.zeros(2, 12, device=TPU), False
        )


def test_each_fused_cell_call_is_one_execution() -> None:
    """The forward and backward of a cell each run as one executable in Strict."""
    input_gates, hidden_gates = (t.to(TPU) for t in _gates(2, 4, 4))
    cx = torch.randn(2, 4, device=TPU)
    gru_workspace = torch.rand(2, 20, device=TPU)
    calls = [
        lambda: torch.ops.aten._thnn_fused_lstm_cell(input_gates, hidden_gates, cx),
        lambda: torch.ops.aten._thnn_fused_lstm_cell_backward_impl(
            cx, None, cx, cx, input_gates, True
        ),
        lambda: torch.ops.aten._thnn_fused_gru_cell(input_gates[:, :12], hidden_gates[:, :12], cx),
        lambda: torch.ops.aten._thnn_fused_gru_cell_backward(cx, gru_workspace, True),
    ]
    for call in calls:
        call()  # compiles
        torch.tpu.synchronize()
        before = torch_tpu.metrics()["executions"]
        call()
        assert torch_tpu.metrics()["executions"] - before == 1


class WordLanguageModel(nn.Module):
    """pytorch/examples' word_language_model in miniature: Embedding -> LSTM -> Linear."""

    def __init__(self, vocabulary: int = 20, width: int = 8) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, width)
        self.rnn = nn.LSTM(width, width, num_layers=2)
        self.decoder = nn.Linear(width, vocabulary)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embedding(tokens))
        return self.decoder(out)


def _train(model: nn.Module, batches: list[torch.Tensor], compiled: bool) -> Iterator[float]:
    """Yields each step's loss after its SGD update."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    device = next(model.parameters()).device

    def loss_of(tokens: torch.Tensor) -> torch.Tensor:
        logits = model(tokens[:-1])
        return F.cross_entropy(logits.flatten(0, 1), tokens[1:].flatten())

    step_loss = torch.compile(loss_of, backend="tpu") if compiled else loss_of
    for tokens in batches:
        optimizer.zero_grad()
        loss = step_loss(tokens.to(device))
        loss.backward()
        optimizer.step()
        yield loss.item()


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse", "compile", "compile_around_rnn"])
def test_word_language_model_trains_as_on_cpu(mode: str) -> None:
    torch.manual_seed(0)
    cpu_model = WordLanguageModel()
    tpu_model = _on_tpu(cpu_model)
    batches = [torch.randint(0, 20, (7, 3)) for _ in range(3)]
    expected = list(_train(cpu_model, batches, compiled=False))
    if mode == "compile":
        # Dynamo traces RNN modules only when asked; traced, AOTAutograd decomposes aten::lstm
        # into matmuls and pointwise ops, and the fused cells take no part.
        with torch._dynamo.config.patch(allow_rnn=True):
            got = list(_train(tpu_model, batches, compiled=True))
    elif mode == "compile_around_rnn":
        # By default Dynamo breaks the graph around the LSTM, which then runs eagerly, through
        # the fused cells, between the compiled embedding and decoder.
        got = list(_train(tpu_model, batches, compiled=True))
    else:
        with torch_tpu.eager_mode(mode):
            got = list(_train(tpu_model, batches, compiled=False))
    torch.testing.assert_close(got, expected, **TOL)
    for (name, p), q in zip(cpu_model.named_parameters(), tpu_model.parameters(), strict=True):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), **TOL, msg=name)
