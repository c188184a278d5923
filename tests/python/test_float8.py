"""Eight-bit floats on tpu: stored, moved, viewed and converted bit for bit as on CPU (torch
computes little in them itself; collectives that do not reduce move them)."""

from __future__ import annotations

import pytest
import torch

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
# In range, out of range (saturated by e4m3fn, NaN in the fnuz kinds), infinities, tiny.
EDGES = [0.3, -2.5, 448.0, 500.0, -1000.0, 57344.0, 1e6, 1e-9, -0.0]


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.cpu().view(torch.uint8)


def same(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal bit for bit, except that any NaN matches any NaN (payloads may differ)."""
    nan = torch.isnan(want.float())
    assert torch.equal(torch.isnan(got.cpu().float()), nan)
    assert torch.equal(bits(got)[~nan], bits(want)[~nan])


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
@pytest.mark.parametrize("source", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_convert_matches_cpu(dtype: torch.dtype, source: torch.dtype) -> None:
    values = torch.tensor([*EDGES, float("inf"), float("-inf"), float("nan")], dtype=source)
    same(values.to("tpu").to(dtype), values.to(dtype))
    back = values.to(dtype)
    torch.testing.assert_close(
        back.to("tpu").to(source).cpu(), back.to(source), equal_nan=True, rtol=0, atol=0
    )


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_integers_convert_and_round_trip(dtype: torch.dtype) -> None:
    ints = torch.tensor([0, 3, -7, 500, -1000])
    same(ints.to("tpu").to(dtype), ints.to(dtype))
    x = torch.randn(5, 4).to(dtype)
    assert torch.equal(bits(x.to("tpu")), bits(x))


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_views_cat_and_copies(dtype: torch.dtype) -> None:
    x = torch.randn(4, 6).to(dtype)
    on_tpu = x.to("tpu")
    assert torch.equal(bits(on_tpu.t().contiguous()), bits(x.t().contiguous()))
    assert torch.equal(bits(on_tpu[1:3, ::2]), bits(x[1:3, ::2]))
    assert torch.equal(bits(torch.cat([on_tpu, on_tpu[:1]])), bits(torch.cat([x, x[:1]])))
    assert torch.equal(bits(on_tpu.view(torch.uint8)), x.view(torch.uint8))
    target = torch.empty(4, 6, dtype=dtype, device="tpu")
    target.copy_(x)
    assert torch.equal(bits(target), bits(x))


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_full_and_overflowing_fill(dtype: torch.dtype) -> None:
    for value in (0.0, 1.5, -0.25):
        want = torch.full((3,), value, dtype=dtype)
        assert torch.equal(bits(torch.full((3,), value, dtype=dtype, device="tpu")), bits(want))
    if dtype == torch.float8_e5m2:
        return  # it has infinities: 1e6 overflows to inf, as on CPU
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.full((2,), 1e6, dtype=dtype)  # CPU refuses ...
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.full((2,), 1e6, dtype=dtype, device="tpu")  # ... and so does tpu
