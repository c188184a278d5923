"""Edge inputs where tpu once answered differently from CPU: each result equals CPU's."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.nn import functional as F

from torch_tpu.testing.process_memory import heap_bytes

INF, NAN = float("inf"), float("nan")

CASES: dict[str, tuple[Callable[..., torch.Tensor], list[torch.Tensor]]] = {
    "atan_of_infinities_and_huge": (
        torch.atan,
        [torch.tensor([INF, -INF, 1e30, -1e20, 0.5, -3.0, NAN])],
    ),
    "atan_float64": (torch.atan, [torch.tensor([INF, -1e300, 2.0], dtype=torch.float64)]),
    "sign_of_nan_is_zero": (torch.sign, [torch.tensor([NAN, -0.0, 2.0, -INF])]),
    "sign_of_bool": (torch.sign, [torch.tensor([True, False])]),
    "threshold_keeps_nan": (lambda x: F.threshold(x, 1.0, 5.0), [torch.tensor([NAN, 0.0, 2.0])]),
    "masked_select_of_empty": (lambda x: torch.masked_select(x, x > 0), [torch.empty(0)]),
    "index_empty_dim_with_empty_mask": (
        lambda x: x[torch.zeros(0, 3, dtype=torch.bool)],
        [torch.empty(0, 3)],
    ),
    "softmax_into_strided_out": (
        lambda x: (lambda out: (torch.softmax(x, 0, out=out[::2]), out)[1])(
            torch.zeros(10, device=x.device)
        ),
        [torch.randn(5)],
    ),
    "mode_into_empty_outs": (
        lambda x: torch.stack(
            list(
                torch.mode(
                    x,
                    1,
                    out=(
                        torch.empty(0, dtype=x.dtype, device=x.device),
                        torch.empty(0, dtype=torch.long, device=x.device),
                    ),
                )
            )
        ),
        [torch.tensor([[1, 2, 2], [3, 3, 1]])],
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_matches_cpu(case: str) -> None:
    fn, inputs = CASES[case]
    want = fn(*inputs)
    got = fn(*(t.to("tpu") for t in inputs))
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)


def test_resize_to_the_same_sizes_keeps_strides() -> None:
    base = torch.zeros(4, 6, device="tpu")
    view = base.t()
    view.resize_(6, 4)  # as ATen: same sizes, nothing changes
    assert view.stride() == (1, 6)


def test_scalars_new_at_every_step_do_not_accumulate() -> None:
    # An optimizer's bias correction or a scheduled lr is a new host float every step; each
    # distinct value used to keep a device buffer (~1.6 KB) until 4096 had piled up.
    x = torch.ones(8, device="tpu")
    for i in range(500):  # warm: compiled, caches at their bound
        x = x.add(x, alpha=1.0 + i * 1e-6)
    torch.tpu.synchronize()
    before = heap_bytes()
    for i in range(500, 25_500):  # 50k ops: a leak of 20 bytes an op would show
        x = x.add(x, alpha=1.0 + i * 1e-6)
        x = x * 0.5
    torch.tpu.synchronize()
    grown = heap_bytes() - before
    assert grown < 1_000_000, f"heap grew {grown} bytes over 50k ops"


def test_cpu_index_tensors_and_masks_index_tpu_tensors() -> None:
    # CUDA takes index tensors and masks that live on the CPU; so does tpu.
    x = torch.arange(12.0).reshape(3, 4)
    on_tpu = x.to("tpu")
    rows, mask, cols = torch.tensor([0, 2]), torch.tensor([True, False, True]), torch.tensor([3, 1])
    assert torch.equal(on_tpu[rows].cpu(), x[rows])
    assert torch.equal(on_tpu[mask].cpu(), x[mask])
    assert torch.equal(on_tpu[:, cols].cpu(), x[:, cols])
    written, want = on_tpu.clone(), x.clone()
    written[rows] = 5.0
    want[rows] = 5.0
    written[mask, 0] = torch.tensor(7.0)
    want[mask, 0] = 7.0
    assert torch.equal(written.cpu(), want)


def test_flip_of_a_zero_dim_tensor() -> None:
    x = torch.tensor(2.5)
    assert torch.equal(torch.flip(x.to("tpu"), (0,)).cpu(), torch.flip(x, (0,)))


def test_nonzero_out_resizes_as_on_cpu() -> None:
    x = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    out = torch.empty(0, dtype=torch.long, device="tpu")
    torch.nonzero(x.to("tpu"), out=out)
    assert torch.equal(out.cpu(), torch.nonzero(x))


def test_randperm_is_a_seeded_permutation_on_the_device() -> None:
    generator = torch.Generator(device="tpu")
    draws = []
    for _ in range(2):
        generator.manual_seed(7)
        draws.append(torch.randperm(50, generator=generator, device="tpu"))
    assert draws[0].device.type == "tpu" and draws[0].dtype == torch.int64
    assert torch.equal(draws[0].cpu(), draws[1].cpu())
    assert sorted(draws[0].cpu().tolist()) == list(range(50))
    out = torch.empty(0, dtype=torch.long, device="tpu")
    torch.randperm(5, out=out)
    assert sorted(out.cpu().tolist()) == list(range(5))


LAYOUT_CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "mul_of_transposed": lambda x: x.transpose(1, 2) * 2,
    "neg_of_permuted": lambda x: -x.permute(0, 2, 3, 1),
    "add_transposed_and_contiguous": lambda x: x.transpose(1, 2) + x.transpose(1, 2).contiguous(),
    "channels_last_relu": lambda x: F.relu(x.contiguous(memory_format=torch.channels_last)),
    "clone_preserves": lambda x: x.transpose(2, 3).clone(),
    "contiguous_input": lambda x: x * 3,
}


@pytest.mark.parametrize("case", list(LAYOUT_CASES))
def test_results_are_laid_out_as_aten_lays_them_out(case: str) -> None:
    # Compiled graphs are traced with ATen's strides and view results accordingly, and eager
    # code may .view() a result where ATen's layout allows it: both need the same strides.
    x = torch.randn(2, 3, 4, 5)
    expected = LAYOUT_CASES[case](x)
    actual = LAYOUT_CASES[case](x.to("tpu"))
    assert actual.stride() == expected.stride()
    assert torch.equal(actual.cpu(), expected)
    assert torch.equal(
        actual.transpose(1, 2).reshape(-1).cpu(), expected.transpose(1, 2).reshape(-1)
    )
