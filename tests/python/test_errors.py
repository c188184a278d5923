"""Errors a PyTorch user expects: the same exception types as on CPU, never a crash."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import assert_close_to_cpu
from torch.nn import functional as F

# An op with no tpu kernel yet (LAPACK's Bunch-Kaufman pivoting is not lowered).
UNIMPLEMENTED_OP = "aten::linalg_ldl_factor_ex"


def unimplemented(x: torch.Tensor) -> torch.Tensor:
    return torch.linalg.ldl_factor(x).LD


def test_mismatched_devices(tpu: torch.device) -> None:
    a = torch.ones(4, 6, device=tpu)
    b = torch.ones(4, 6)
    with pytest.raises(RuntimeError, match="same device"):
        a + b
    with pytest.raises(RuntimeError, match="same device"):
        b * a
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(torch.ones(6, 4), a.t())
    with pytest.raises(RuntimeError):
        a.add_(b)
    # A zero-dim CPU tensor is a scalar and may mix with any device, as with CUDA.
    torch.testing.assert_close((a + torch.tensor(2.0)).cpu(), torch.full((4, 6), 3.0))
    # The process is still healthy.
    torch.testing.assert_close((a * 2).cpu(), torch.full((4, 6), 2.0))


def test_shape_mismatch(tpu: torch.device) -> None:
    a = torch.ones(4, 6, device=tpu)
    b = torch.ones(5, 6, device=tpu)
    with pytest.raises(RuntimeError, match="must match the size"):
        a + b
    with pytest.raises(RuntimeError):
        a.add_(torch.ones(2, 4, 6, device=tpu))  # in-place cannot broadcast self
    with pytest.raises(RuntimeError):
        a.view(5, 5)
    with pytest.raises(RuntimeError):
        torch.cat([a, torch.ones(4, 5, device=tpu)])
    torch.testing.assert_close((a + a).cpu(), torch.full((4, 6), 2.0))


def test_mm_bad_shapes(tpu: torch.device) -> None:
    a = torch.ones(4, 6, device=tpu)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.mm(a, a)
    with pytest.raises(RuntimeError):
        torch.matmul(a, torch.ones(5, device=tpu))
    with pytest.raises(RuntimeError):
        torch.bmm(a, a)
    torch.testing.assert_close(torch.mm(a, a.t()).cpu(), torch.full((4, 4), 6.0))


def test_inplace_dtype_cast_error_matches_cpu(tpu: torch.device) -> None:
    cpu_int = torch.ones(4, dtype=torch.int64)
    with pytest.raises(RuntimeError) as cpu_error:
        cpu_int.add_(torch.ones(4) * 0.5)
    tpu_int = cpu_int.to(tpu)
    with pytest.raises(RuntimeError) as tpu_error:
        tpu_int.add_(torch.ones(4, device=tpu) * 0.5)
    assert "can't be cast" in str(cpu_error.value)
    assert str(tpu_error.value) == str(cpu_error.value)
    with pytest.raises(RuntimeError, match="can't be cast"):
        tpu_int.mul_(1.5)
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.ones(4, dtype=torch.bool, device=tpu).add_(tpu_int)
    # The failed ops left the tensor untouched.
    assert torch.equal(tpu_int.cpu(), torch.ones(4, dtype=torch.int64))


def test_integer_alpha_with_float_error(tpu: torch.device) -> None:
    a = torch.ones(4, dtype=torch.int32, device=tpu)
    with pytest.raises(RuntimeError, match="alpha must not be a floating point"):
        torch.add(a, a, alpha=0.5)


def test_index_out_of_range_is_an_error_not_a_crash(tpu: torch.device) -> None:
    a = torch.ones(4, 6, device=tpu)
    with pytest.raises(IndexError):
        a[4]
    with pytest.raises((IndexError, RuntimeError)):
        a.select(1, 7)


def test_item_on_multi_element_tensor(tpu: torch.device) -> None:
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        torch.ones(3, device=tpu).item()


def test_unimplemented_op_raises_not_implemented(tpu: torch.device) -> None:
    x = torch.linspace(0, 3, 6).to(tpu)
    x = torch.diag(x + 1) + 0.5  # symmetric
    with pytest.raises(NotImplementedError) as info:
        unimplemented(x)
    message = str(info.value)
    assert UNIMPLEMENTED_OP in message
    assert "tpu" in message
    assert "TORCH_TPU_CPU_FALLBACK=1" in message
    # A second call raises the same way and the process keeps working.
    with pytest.raises(NotImplementedError):
        unimplemented(x)
    torch.testing.assert_close(x.diagonal().cpu(), torch.linspace(0, 3, 6) + 1.5)


def test_unimplemented_linalg_op_raises_not_implemented(tpu: torch.device) -> None:
    a = torch.eye(3).to(tpu)
    with pytest.raises(NotImplementedError, match="TORCH_TPU_CPU_FALLBACK"):
        torch.linalg.eig(a)


FALLBACK_SCRIPT = textwrap.dedent(
    """\
    import warnings
    import torch
    x = torch.diag(torch.linspace(1, 4, 6)) + 0.5  # symmetric
    t = x.to("tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # count every warning the C++ side raises
        first = torch.linalg.ldl_factor(t).LD
        second = torch.linalg.ldl_factor(t * 1).LD
        a = torch.diag(torch.tensor([3.0, 2.0, 1.0])).to("tpu")
        s = torch.linalg.eigvals(a).real
    print("device", first.device, second.device, s.device)
    print("close", torch.allclose(first.cpu(), torch.linalg.ldl_factor(x).LD))
    print("eigvals", s.cpu().flatten().tolist())
    messages = [str(w.message) for w in caught]
    print("ldl_warnings", sum("ldl_factor" in m for m in messages))
    print("eigvals_warnings", sum("eigvals" in m for m in messages))
    for m in messages:
        print("warning:", m)
    """
)


def test_cpu_fallback_opt_in_runs_and_warns_once() -> None:
    env = dict(os.environ, TORCH_TPU_CPU_FALLBACK="1")
    proc = subprocess.run(
        [sys.executable, "-c", FALLBACK_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "device tpu:0 tpu:0 tpu:0" in out
    assert "close True" in out
    assert "eigvals [3.0, 2.0, 1.0]" in out
    assert "ldl_warnings 1" in out, out
    assert "eigvals_warnings 1" in out, out
    assert "TORCH_TPU_CPU_FALLBACK=1" in out


def test_errors_inside_autograd_backward_are_catchable(tpu: torch.device) -> None:
    x = torch.ones(4, device=tpu, requires_grad=True)
    y = (x * 2).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad.cpu(), torch.full((4,), 2.0))


def test_compile_failure_is_runtime_error_with_plugin_message(tpu: torch.device) -> None:
    import torch_tpu

    bad_module = "func.func public @main(%x: tensor<2xf32>) -> tensor<3xf32> { return %x }"
    with pytest.raises(RuntimeError, match="PJRT_Client_Compile") as info:
        torch_tpu._C._compile(bad_module)
    # The compiler's own words come through, not just our prefix.
    assert len(str(info.value)) > len("PJRT_Client_Compile: ")
    good_module = (
        "func.func public @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
        "  %0 = stablehlo.add %x, %x : tensor<2xf32>\n  return %0 : tensor<2xf32>\n}"
    )
    torch_tpu._C._compile(good_module)
    torch.testing.assert_close((torch.ones(2, device=tpu) * 3).cpu(), torch.full((2,), 3.0))


@pytest.mark.cpu_plugin
def test_device_properties_report_plugin(tpu: torch.device) -> None:
    properties = torch.tpu.get_device_properties(tpu)
    assert properties.platform_name == "cpu"
    assert properties.pjrt_api_version.startswith("0.")
    assert properties.ffi_custom_calls


def same_error_as_cpu(call: Any, *tensors: torch.Tensor) -> None:
    """`call` raises on CPU; on tpu it raises the same class with the same message."""
    with pytest.raises(Exception) as on_cpu:  # noqa: PT011 - the class is what is compared
        call(*tensors)
    with pytest.raises(on_cpu.type) as on_tpu:
        call(*(t.to("tpu") for t in tensors))
    assert str(on_tpu.value) == str(on_cpu.value)


# Each of these crashed the process (SIGSEGV/SIGFPE) before ATen's argument checks ran first.
FORMER_CRASHES = {
    "roll_0d": (lambda x: torch.roll(x, 0, 0), [torch.tensor(1.0)]),
    "avg_pool2d_0d": (lambda x: F.avg_pool2d(x, 1), [torch.tensor(1.0)]),
    "avg_pool3d_0d": (lambda x: F.avg_pool3d(x, 1), [torch.tensor(1.0)]),
    "avg_pool3d_7d": (lambda x: F.avg_pool3d(x, 1), [torch.randn(1, 1, 1, 1, 2, 2, 2)]),
    "max_pool2d_bad_kernel": (lambda x: F.max_pool2d(x, 0), [torch.randn(1, 1, 4, 4)]),
    "conv2d_wrong_rank": (
        lambda x, w: F.conv2d(x, w),
        [torch.randn(2, 3), torch.randn(1, 3, 1, 1)],
    ),
    "gather_rank_mismatch": (
        lambda x, i: torch.gather(x, 0, i),
        [torch.randn(3, 3), torch.zeros(3, dtype=torch.long)],
    ),
}


@pytest.mark.parametrize("case", FORMER_CRASHES)
def test_bad_arguments_raise_as_on_cpu(case: str) -> None:
    call, tensors = FORMER_CRASHES[case]
    same_error_as_cpu(call, *tensors)


def test_complex_floor_division_is_an_error_not_a_crash(tpu: torch.device) -> None:
    a = torch.tensor([1 + 2j], device=tpu)
    with pytest.raises((RuntimeError, NotImplementedError), match="complex|Complex"):
        torch.div(a, a, rounding_mode="floor")
    torch.testing.assert_close((a * 2).cpu(), torch.tensor([2 + 4j]))


# In-place and out= writes into an expanded view: CPU refuses; tpu used to answer silently.
OVERLAPPING_WRITES = {
    "add_": lambda x: x.add_(torch.arange(3.0, device=x.device)),
    "mul_": lambda x: x.mul_(2.0),
    "exp_": lambda x: x.exp_(),
    "copy_": lambda x: x.copy_(torch.arange(3.0, device=x.device)),
    "clamp_": lambda x: x.clamp_(0, 1),
    "addcmul_": lambda x: x.addcmul_(x.new_ones(3), x.new_ones(3)),
    "cumsum_out": lambda x: torch.cumsum(x.new_ones(3), 0, out=x),
    "mm_out": lambda x: torch.mm(x.new_ones(1, 2), x.new_ones(2, 3), out=x.view(1, 3)),
}


@pytest.mark.parametrize("case", OVERLAPPING_WRITES)
def test_write_into_overlapping_view_raises_as_on_cpu(case: str) -> None:
    same_error_as_cpu(lambda x: OVERLAPPING_WRITES[case](x.expand(3)), torch.zeros(1))


# Writes into a view sharing part of an input's memory: CPU refuses (PyTorch's test_torch.py's
# *_mem_overlap tests); tpu answered. In a fresh process: the check once depended on what ran
# before (it missed these after a refused conv2d call).
PARTIAL_OVERLAP_SCRIPT = textwrap.dedent(
    """
    import torch
    cases = {
        "ilshift_float": lambda x: x[:-1].__ilshift__(x[1:]),
        "add_": lambda x: x[:-1].add_(x[1:]),
        "copy_": lambda x: x[1:].copy_(x[:-1]),
        "index_add_": lambda x: x.index_add_(0, torch.tensor([0, 1], device=x.device), x[:2]),
        "add_out": lambda x: torch.add(x[:3], 1, out=x[1:4]),
        "add_self": lambda x: x.add_(x),  # the same memory in full: allowed
        # Indexed writes refuse their own memory in full too.
        "put_": lambda x: x.put_(torch.tensor([0, 1], device=x.device), x[:2]),
        "scatter_": lambda x: x.scatter_(0, torch.tensor([2, 1, 0], device=x.device), x),
        "index_put_": lambda x: x.index_put_((torch.tensor([2, 1], device=x.device),), x[0]),
        "masked_fill_": lambda x: (lambda m: m[1:].masked_fill_(m[:-1], False))(x > 0),
    }
    for name, call in cases.items():
        seen = []
        for device in ("cpu", "tpu"):
            try:
                call(torch.rand(5, device=device))
                seen.append("ok")
            except RuntimeError as error:
                seen.append(str(error))
        print(name, seen[0] == seen[1], seen[0][:40])
    """
)


def test_write_over_part_of_an_input_raises_as_on_cpu() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PARTIAL_OVERLAP_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 10, proc.stdout
    for line in lines:
        assert " True " in line, line
    assert "unsupported operation" in lines[0] and lines[5].endswith("ok")


def test_fill_into_overlapping_view_works_as_on_cpu(tpu: torch.device) -> None:
    x = torch.zeros(1, device=tpu)
    x.expand(3).fill_(2.0)  # CPU allows fills (and masked/indexed writes) here
    torch.testing.assert_close(x.cpu(), torch.full((1,), 2.0))


# Dtypes CPU's product kernels refuse while their Meta kernels accept them.
PRODUCT_DTYPES = {
    "mm_bool": (torch.mm, [torch.ones(2, 2, dtype=torch.bool)] * 2),
    "dot_bool": (torch.dot, [torch.ones(2, dtype=torch.bool)] * 2),
    "addmm_self_double": (
        torch.addmm,
        [torch.ones(2, 2, dtype=torch.float64), torch.ones(2, 2), torch.ones(2, 2)],
    ),
    "mv_mixed": (torch.mv, [torch.ones(2, 2, dtype=torch.float64), torch.ones(2)]),
}


@pytest.mark.parametrize("case", PRODUCT_DTYPES)
def test_product_dtypes_refused_as_on_cpu(case: str) -> None:
    call, tensors = PRODUCT_DTYPES[case]
    same_error_as_cpu(call, *tensors)


# Indexing an empty dimension: CPU refuses before reading the index (its class depends on the
# rank); this used to fail to compile on tpu.
EMPTY_DIMENSION = {
    "index_select_1d": (lambda t, i: t.index_select(0, i), [torch.zeros(0), torch.tensor([0])]),
    "index_select_2d": (
        lambda t, i: t.index_select(0, i),
        [torch.zeros(0, 3), torch.tensor([0])],
    ),
}


@pytest.mark.parametrize("case", EMPTY_DIMENSION)
def test_indexing_an_empty_dimension_raises_as_on_cpu(case: str) -> None:
    call, tensors = EMPTY_DIMENSION[case]
    same_error_as_cpu(call, *tensors)


def legit_batch_norm(x: torch.Tensor) -> Any:
    channels = x.shape[1]
    mean, var = torch.zeros(channels, device=x.device), torch.ones(channels, device=x.device)
    return torch.ops.aten._native_batch_norm_legit(x, None, None, mean, var, True, 0.1, 1e-5)


@pytest.mark.parametrize(
    "x",
    [torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3, dtype=torch.bool), torch.ones(0, 5, 5)],
    ids=["int64", "bool", "empty"],
)
def test_batch_norm_input_checks_as_on_cpu(x: torch.Tensor) -> None:
    same_error_as_cpu(legit_batch_norm, x)


def test_functional_batch_norm_of_an_empty_batch_works_as_on_cpu(tpu: torch.device) -> None:
    x = torch.ones(0, 5, 5)
    want = F.batch_norm(x, torch.zeros(5), torch.ones(5), training=True)
    got = F.batch_norm(
        x.to(tpu), torch.zeros(5, device=tpu), torch.ones(5, device=tpu), training=True
    )
    assert got.shape == want.shape


# Argument checks CPU makes and tpu used to skip, answering silently (found by the bad-input
# fuzz, tools/bad_input.py): the same class and message now.
ARGUMENT_CHECKS = {
    "index_add_float_index": (
        lambda t, i, s: t.index_add(0, i, s),
        [torch.zeros(3, 2), torch.tensor([0.0]), torch.ones(1, 2)],
    ),
    "index_copy_int32_index": (
        lambda t, i, s: t.index_copy(0, i, s),
        [torch.zeros(3, 2), torch.tensor([0], dtype=torch.int32), torch.ones(1, 2)],
    ),
    "index_fill_int32_index": (
        lambda t, i: t.index_fill(0, i, 1.0),
        [torch.zeros(3, 2), torch.tensor([0], dtype=torch.int32)],
    ),
    "put_source_of_another_dtype": (
        lambda t, i, s: t.put(i, s),
        [torch.zeros(3, dtype=torch.long), torch.tensor([0]), torch.ones(1)],
    ),
    "index_select_two_values_of_a_scalar": (
        lambda t, i: t.index_select(0, i),
        [torch.tensor(1.0), torch.tensor([0, 0])],
    ),
    "lstsq_other_of_more_dims": (
        torch.linalg.lstsq,
        [torch.randn(3, 4, 3), torch.randn(1, 1, 3, 4, 2)],
    ),
    "grid_sample_double_grid": (
        lambda x, g: F.grid_sample(x, g, align_corners=False),
        [torch.randn(1, 1, 4, 4), torch.rand(1, 2, 2, 2, dtype=torch.float64)],
    ),
    "put_source_and_index_of_other_sizes": (
        lambda t, i, s: t.put(i, s, accumulate=True),
        [torch.zeros(3, 3), torch.tensor([0, 1, 2, 3]), torch.ones(3)],
    ),
    "index_reduce_of_a_zero_dim_self": (
        lambda t, i, s: t.index_reduce(0, i, s, "mean"),
        [torch.tensor(1.0), torch.tensor([0, 0]), torch.tensor(2.0)],
    ),
    # An op without a tpu kernel still refuses a bad call with CPU's error, not "not
    # implemented".
    "missing_op_refuses_bad_input_as_cpu": (
        torch.linalg.eig,
        [torch.ones(5, 5, dtype=torch.long)],
    ),
    "missing_op_refuses_a_scalar_as_cpu": (torch.linalg.eigvals, [torch.tensor(1.0)]),
    # From PyTorch's own test_indexing.py and test_reductions.py: checks made on every call,
    # Scalars' and strings' values included, in CPU's order.
    "index_fill_complex_value_into_real": (
        lambda t, i: t.index_fill_(1, i, 1 + 1j),
        [torch.ones(2, 2), torch.tensor([0])],
    ),
    "index_fill_complex_value_into_bool": (
        lambda t, i: t.index_fill_(1, i, 1 + 1j),
        [torch.ones(2, 2, dtype=torch.bool), torch.tensor([0])],
    ),
    "mask_assignment_shape_before_dtype": (
        lambda a, v: a.__setitem__(a > -1, v),
        [torch.arange(4), torch.tensor([1.0, 2.0, 3.0])],
    ),
    "histc_max_below_min": (lambda x: torch.histc(x, 4, 5, 1), [torch.tensor([1.0, 2.0])]),
    "histc_infinite_data_range": (torch.histc, [torch.tensor([1.0, float("inf")])]),
    "histc_nan_data_range": (torch.histc, [torch.tensor([float("nan")])]),
    "searchsorted_bad_side": (
        lambda s, v: torch.searchsorted(s, v, side="bad"),
        [torch.tensor([1.0, 2.0]), torch.tensor([1.5])],
    ),
    "searchsorted_float_sorter": (
        lambda s, v, i: torch.searchsorted(s, v, sorter=i),
        [torch.tensor([2.0, 1.0]), torch.tensor([1.5]), torch.tensor([1.0, 0.0])],
    ),
    # (A tensor of its own on each device: CPU's failed resize_ leaves the sizes it was given.)
    "resize_whose_bytes_overflow": (
        lambda x: torch.empty((), dtype=x.dtype, device=x.device).resize_([2, 4, 2**29, 2**29]),
        [torch.empty((), dtype=torch.float64)],
    ),
    "histogram_out_of_another_dtype": (
        lambda v, h, e: torch.histogram(v, 1, out=(h, e)),
        [torch.ones(3), torch.empty(0, dtype=torch.float64), torch.empty(0)],
    ),
    "histogram_empty_bins": (torch.histogram, [torch.empty(0), torch.empty(0)]),
    "histogram_negative_bin_count": (lambda x: torch.histogram(x, -1), [torch.tensor(1.0)]),
    "histogram_weight_of_another_size": (
        lambda x, w: torch.histogram(x, 1, weight=w),
        [torch.ones(2, 2), torch.ones(1)],
    ),
    "histogram_bins_dtype_before_shape": (
        torch.histogram,
        [torch.tensor(1.0), torch.tensor(1.0, dtype=torch.float64)],
    ),
    # Operands that CPU wants in the input's dtype, given as integers or bools (issue 47,
    # point 4's dtype checks: tpu promoted them and answered).
    "index_add_long_source": (
        lambda t, i, s: t.index_add(0, i, s),
        [torch.zeros(3, 2), torch.tensor([0]), torch.ones(1, 2, dtype=torch.long)],
    ),
    "index_add_inplace_long_source": (
        lambda t, i, s: t.index_add_(0, i, s),
        [torch.zeros(3, 2), torch.tensor([0]), torch.ones(1, 2, dtype=torch.long)],
    ),
    "index_copy_bool_source": (
        lambda t, i, s: t.index_copy(0, i, s),
        [torch.zeros(3, 2), torch.tensor([0]), torch.ones(1, 2, dtype=torch.bool)],
    ),
    "index_reduce_long_source": (
        lambda t, i, s: t.index_reduce(0, i, s, "prod"),
        [torch.zeros(3, 2), torch.tensor([0]), torch.ones(1, 2, dtype=torch.long)],
    ),
    "layer_norm_long_weight": (
        lambda x, w: F.layer_norm(x, (4,), w),
        [torch.randn(2, 4), torch.ones(4, dtype=torch.long)],
    ),
    "layer_norm_long_bias": (
        lambda x, w, b: F.layer_norm(x, (4,), w, b),
        [torch.randn(2, 4), torch.ones(4), torch.ones(4, dtype=torch.long)],
    ),
    "binary_cross_entropy_long_target": (
        F.binary_cross_entropy,
        [torch.full((3,), 0.5), torch.ones(3, dtype=torch.long)],
    ),
    "nll_loss_long_weight": (
        lambda x, t, w: F.nll_loss(x, t, weight=w),
        [torch.randn(2, 3), torch.tensor([0, 1]), torch.ones(3, dtype=torch.long)],
    ),
    "multi_margin_loss_long_weight": (
        lambda x, t, w: F.multi_margin_loss(x, t, weight=w),
        [torch.randn(2, 3), torch.tensor([0, 1]), torch.ones(3, dtype=torch.long)],
    ),
    "embedding_bag_long_per_sample_weights": (
        lambda i, w, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p),
        [
            torch.tensor([0, 1]),
            torch.ones(3, 2),
            torch.tensor([0]),
            torch.ones(2, dtype=torch.long),
        ],
    ),
    "softmax_backward_long_output": (
        lambda g, o: torch.ops.aten._softmax_backward_data(g, o, 1, torch.float32),
        [torch.ones(2, 3), torch.ones(2, 3, dtype=torch.long)],
    ),
    "log_softmax_backward_long_output": (
        lambda g, o: torch.ops.aten._log_softmax_backward_data(g, o, 1, torch.float32),
        [torch.ones(2, 3), torch.ones(2, 3, dtype=torch.long)],
    ),
    # addr_ keeps its target's shape: CPU refuses a target the outer product would resize.
    "addr_inplace_into_another_shape": (
        lambda t, a, b: t.addr_(a, b),
        [torch.zeros(1, 3), torch.ones(2), torch.ones(3)],
    ),
    "addr_inplace_into_a_vector": (
        lambda t, a, b: t.addr_(a, b),
        [torch.zeros(3), torch.ones(2), torch.ones(3)],
    ),
}


@pytest.mark.parametrize("case", ARGUMENT_CHECKS)
def test_argument_checks_as_on_cpu(case: str) -> None:
    call, tensors = ARGUMENT_CHECKS[case]
    same_error_as_cpu(call, *tensors)


# The same checks, where CPU's message names its own tensor type or kernel.
ARGUMENT_CHECKS_OWN_MESSAGE = {
    "addr_self_of_more_dims": (
        lambda s, a, b: torch.addr(s, a, b),
        [torch.zeros(2, 3, 5, 10), torch.ones(5), torch.ones(10)],
        "expand",
    ),
    "grid_sample_integer_input": (
        lambda x, g: F.grid_sample(x, g, align_corners=False),
        [torch.ones(1, 1, 4, 4, dtype=torch.long), torch.rand(1, 2, 2, 2)],
        "not implemented for 'Long'",
    ),
    "geqrf_integer_input": (torch.geqrf, [torch.ones(2, 2, dtype=torch.long)], "'Long'"),
    "histogram_bool_input": (
        lambda x: torch.histogram(x, 3),
        [torch.ones(4, dtype=torch.bool)],
        "'Bool'",
    ),
    "group_norm_numel_not_n_c_hw": (
        lambda x: torch.ops.aten.native_group_norm(x, None, None, 2, 6, 5, 2, 1e-5),
        [torch.zeros(0, 6, 5)],
        "N \\* C \\* HxW",
    ),
    # Normalization parameters: the input's dtype, or float32 for a 16-bit float input.
    "batch_norm_double_weight": (
        lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, training=True),
        [torch.randn(4, 3, 2), torch.ones(3, dtype=torch.float64), torch.zeros(3)]
        + [torch.zeros(3), torch.ones(3)],
        "mixed dtype",
    ),
    "batch_norm_double_running_mean": (
        lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, training=True),
        [torch.randn(4, 3, 2), torch.ones(3), torch.zeros(3)]
        + [torch.zeros(3, dtype=torch.float64), torch.ones(3)],
        "expected scalar type Float but found Double",
    ),
    "group_norm_double_weight": (
        lambda x, w: F.group_norm(x, 2, w),
        [torch.randn(2, 4, 3), torch.ones(4, dtype=torch.float64)],
        "mixed dtype",
    ),
    # segment_reduce has floating kernels only, and integer segmentations (CUDA's too).
    "segment_reduce_integer_data": (
        lambda d, n: torch.segment_reduce(d, "sum", lengths=n),
        [torch.ones(4, dtype=torch.long), torch.tensor([2, 2])],
        "not implemented for 'Long'",
    ),
    "segment_reduce_of_fewer_dims_than_lengths": (
        lambda d, n: torch.segment_reduce(d, "max", lengths=n),
        [torch.tensor(1.0), torch.tensor([1])],
        "dim",
    ),
    "segment_reduce_float_lengths": (
        lambda d, n: torch.segment_reduce(d, "sum", lengths=n),
        [torch.ones(4), torch.tensor([2.0, 2.0], dtype=torch.float64)],
        "not implemented for 'Double'",
    ),
}


@pytest.mark.parametrize("case", ARGUMENT_CHECKS_OWN_MESSAGE)
def test_argument_checks_raise_the_cpu_class(case: str) -> None:
    call, tensors, message = ARGUMENT_CHECKS_OWN_MESSAGE[case]
    with pytest.raises(RuntimeError) as on_cpu:
        call(*tensors)
    with pytest.raises(RuntimeError, match=message) as on_tpu:
        call(*(t.to("tpu") for t in tensors))
    assert on_tpu.type is on_cpu.type


def test_addr_still_broadcasts_self_as_on_cpu(tpu: torch.device) -> None:
    s, a, b = torch.randn(1, 4), torch.randn(3), torch.randn(4)
    got = torch.addr(s.to(tpu), a.to(tpu), b.to(tpu), beta=2.0, alpha=0.5)
    torch.testing.assert_close(got.cpu(), torch.addr(s, a, b, beta=2.0, alpha=0.5))


def test_lu_unpack_refuses_pivots_of_another_batch_shape(tpu: torch.device) -> None:
    lu = torch.randn(2, 3, 3, 3, device=tpu)
    with pytest.raises(
        RuntimeError, match="pivots' batch dimensions \\[\\] must be LU's, \\[2, 3\\]"
    ):
        torch.lu_unpack(lu, torch.tensor([1, 2, 3], dtype=torch.int32, device=tpu))
    factor, pivots = torch.linalg.lu_factor(torch.randn(2, 3, 3))
    got = torch.lu_unpack(factor.to(tpu), pivots.to(tpu))
    for mine, cpu in zip(got, torch.lu_unpack(factor, pivots), strict=True):
        torch.testing.assert_close(mine.cpu(), cpu)


# Result dtypes that CPU's kernels fix in their own way (the fuzz's mixed-dtype calls).
MIXED_DTYPE_RESULTS = {
    # huber_loss writes into a tensor like its input.
    "huber_loss": (
        lambda x, y: F.huber_loss(x, y, reduction="none", delta=0.7),
        [torch.randn(5), torch.randn(5, dtype=torch.float64)],
    ),
    "huber_loss_mean": (
        lambda x, y: F.huber_loss(x, y),
        [torch.randn(5, dtype=torch.float64), torch.randn(5)],
    ),
    # solve_triangular returns A's dtype.
    "solve_triangular": (
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=True),
        [torch.randn(3, 3).triu() + 3 * torch.eye(3), torch.randn(3, 2, dtype=torch.float64)],
    ),
    # grad * mask * scale, promoted, with the mask's values.
    "native_dropout_backward": (
        lambda g, m: torch.ops.aten.native_dropout_backward(g, m, 2.0),
        [torch.randn(4, 4), torch.randn(4, 4, dtype=torch.float64)],
    ),
    # ... and the float scale makes a bool or integer product a float.
    "native_dropout_backward_of_integers": (
        lambda g, m: torch.ops.aten.native_dropout_backward(g, m, 2.0),
        [torch.tensor([3, 4]), torch.tensor([True, False])],
    ),
}


@pytest.mark.parametrize("case", MIXED_DTYPE_RESULTS)
def test_mixed_dtype_results_as_on_cpu(case: str) -> None:
    call, tensors = MIXED_DTYPE_RESULTS[case]
    want = call(*tensors)
    got = call(*(t.to("tpu") for t in tensors))
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want)


# Calls CPU answers that tpu used to refuse (found by the bad-input fuzz).
ANSWERED_AS_ON_CPU = {
    "sgn_of_bool": (torch.sgn, [torch.tensor([True, False, True])]),
    "adaptive_avg_pool_of_an_empty_bool_batch": (
        lambda x: F.adaptive_avg_pool1d(x, 5),
        [torch.zeros(0, 8, 8, dtype=torch.bool)],
    ),
    # torch's Python Meta kernel trips on its own check here (an int given as a bool).
    "upsample_nearest_of_an_empty_batch": (
        lambda x: F.interpolate(x, size=3, mode="nearest"),
        [torch.empty(0, 3, 4)],
    ),
    # min == max: the data's range (a range of one value widens by one on each side).
    "histc_equal_min_and_max": (lambda x: torch.histc(x, 4, 5, 5), [torch.tensor([1.0, 2, 1])]),
    "histc_equal_min_and_max_one_value": (
        lambda x: torch.histc(x, 4, 5, 5),
        [torch.tensor([3.0, 3.0])],
    ),
    "histogramdd_of_points_without_coordinates": (
        lambda v: torch.histogramdd(v, 3).hist,
        [torch.randn(5, 0)],
    ),
    # Linear systems broadcast their batches.
    "solve_batched_a_vector_b": (torch.linalg.solve, [torch.randn(2, 3, 4, 4), torch.randn(4)]),
    "solve_broadcast_batches": (
        torch.linalg.solve,
        [torch.randn(3, 1, 4, 4), torch.randn(2, 4, 2)],
    ),
    "lu_solve_broadcast_batches": (
        lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b),
        [torch.randn(2, 1, 4, 4), torch.randn(3, 4, 2)],
    ),
    "solve_triangular_broadcast_batches": (
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=True),
        [torch.randn(4, 4).triu() + 4 * torch.eye(4), torch.randn(2, 3, 4, 2)],
    ),
    "triangular_solve_broadcast_batches": (
        lambda b, a: tuple(torch.triangular_solve(b, a, upper=False)),
        [torch.randn(2, 1, 4, 3), torch.randn(5, 4, 4).tril() + 4 * torch.eye(4)],
    ),
    # Unpacking only selects and permutes: every dtype, and an LU of no rows, as on CPU.
    "lu_unpack_of_integers": (
        lambda lu, pivots: tuple(torch.lu_unpack(lu, pivots)),
        [torch.arange(12).reshape(3, 4), torch.tensor([2, 2, 3], dtype=torch.int32)],
    ),
    "lu_unpack_of_bools": (
        lambda lu, pivots: tuple(torch.lu_unpack(lu, pivots)),
        [torch.arange(9).reshape(3, 3) % 2 == 0, torch.tensor([3, 2, 3], dtype=torch.int32)],
    ),
    "lu_unpack_of_no_rows": (
        lambda lu, pivots: tuple(torch.lu_unpack(lu, pivots)),
        [torch.zeros(0, 5), torch.tensor([1, 2, 3], dtype=torch.int32)],
    ),
}


@pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated")
@pytest.mark.parametrize("case", ANSWERED_AS_ON_CPU)
def test_answered_as_on_cpu(case: str) -> None:
    call, tensors = ANSWERED_AS_ON_CPU[case]
    assert_close_to_cpu(call, *tensors, rtol=1e-4, atol=1e-4)


def test_adaptive_avg_pool_of_bool_is_refused_as_on_cpu() -> None:
    x = torch.ones(1, 2, 4, dtype=torch.bool)
    with pytest.raises(NotImplementedError, match="'Bool'"):
        F.adaptive_avg_pool1d(x, 2)
    with pytest.raises(NotImplementedError, match="'Bool'"):
        F.adaptive_avg_pool1d(x.to("tpu"), 2)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: torch.histc(x, 3, 0, 1),
        lambda x: F.max_unpool1d(x[None, None], torch.tensor([[[0, 1]]], device=x.device), 2),
        lambda x: F.max_unpool2d(
            x.reshape(1, 1, 1, 2), torch.tensor([[[[0, 1]]]], device=x.device), 2, (1, 2)
        ),
    ],
    ids=["histc", "max_unpool1d", "max_unpool2d"],
)
def test_bool_input_without_a_kernel_is_refused_as_on_cpu(call: Callable[..., Any]) -> None:
    # Neither CPU nor CUDA has a bool kernel for these (both compute integers; so does tpu).
    x = torch.tensor([True, False])
    with pytest.raises(NotImplementedError, match="'Bool'"):
        call(x)
    with pytest.raises(NotImplementedError, match="'Bool'"):
        call(x.to("tpu"))


def test_ctc_loss_of_empty_log_probs_names_it(tpu: torch.device) -> None:
    # CPU refuses an empty log_probs by name; tpu failed inside its lowering with an IndexError.
    args = [torch.tensor([], dtype=torch.long) for _ in range(3)]
    for device in ("cpu", tpu):
        with pytest.raises(RuntimeError, match="log_probs tensor must not be empty"):
            F.ctc_loss(
                torch.rand(0, 0, 4, device=device),
                *[a.to(device) for a in args],
                reduction="none",
            )


@pytest.mark.parametrize("op", ["elu_", "celu_"])
def test_inplace_elu_with_negative_alpha_refuses_backward_as_cpu(
    tpu: torch.device, op: str
) -> None:
    # The result of elu_ with alpha < 0 cannot give the input's sign back: CPU refuses the
    # backward (tpu computed a gradient from the wrong branch).
    for device in ("cpu", tpu):
        a = torch.tensor([-1.0, 1.0], device=device, requires_grad=True)
        b = getattr(F, op)(a.clone(), alpha=-2)
        with pytest.raises(RuntimeError, match="call out-of-place version"):
            b.backward(torch.ones(2, device=device))
        # A positive alpha still differentiates, as on CPU.
        c = getattr(F, op)(a.clone(), alpha=2)
        c.sum().backward()
    assert_close_to_cpu(lambda x: F.elu(x, alpha=2.0), torch.tensor([-1.0, 0.5]))


def test_calls_cpu_accepts_are_accepted(tpu: torch.device) -> None:
    # random_(to) with no generator read its absent generator as `to` and refused the call.
    torch.manual_seed(0)
    x = torch.empty(4000, device=tpu).random_(2).cpu()
    assert set(x.unique().tolist()) == {0.0, 1.0}
    y = torch.empty(4000, device=tpu, dtype=torch.int64).random_(3, 7).cpu()
    assert set(y.unique().tolist()) == {3, 4, 5, 6}
    # threshold_ on an expanded tensor: every alias gets the same value, so CPU allows it.
    assert_close_to_cpu(
        lambda t: F.threshold(t.expand(6, 6), 0.5, 0.5, inplace=True),
        torch.randn(1, 6),
    )


@pytest.mark.parametrize("dims", [2, 3])
def test_max_unpool_alerts_under_deterministic_algorithms_as_on_cpu(dims: int) -> None:
    # Repeated indices leave which value lands unspecified: CPU refuses under determinism.
    from torch.testing._internal.common_utils import DeterministicGuard

    unpool = F.max_unpool2d if dims == 2 else F.max_unpool3d
    shape = (1, 1) + (3,) * dims

    def call(x: torch.Tensor) -> Any:
        with DeterministicGuard(True):
            return unpool(x, torch.zeros_like(x, dtype=torch.long), 1)

    same_error_as_cpu(call, torch.randn(shape))


def test_put_alerts_under_deterministic_algorithms_as_on_cpu() -> None:
    # Without accumulating, which of repeated indices' values lands is unspecified: every
    # device refuses under determinism (with the call's executable cached before); adding
    # them up is allowed.
    from torch.testing._internal.common_utils import DeterministicGuard

    def call(x: torch.Tensor, accumulate: bool) -> Any:
        index = torch.zeros(2, dtype=torch.long, device=x.device)
        x.put_(index, torch.ones(2, device=x.device), accumulate=accumulate)
        with DeterministicGuard(True):
            return x.put_(index, torch.ones(2, device=x.device), accumulate=accumulate)

    same_error_as_cpu(lambda x: call(x, False), torch.randn(5))
    x = torch.randn(5)
    torch.testing.assert_close(call(x.to("tpu"), True).cpu(), call(x.clone(), True))


def test_is_set_to_as_on_cpu(tpu: torch.device) -> None:
    for device in ("cpu", tpu):
        t1 = torch.empty(3, 4, device=device)
        t3 = torch.tensor([], device=device).set_(t1)
        assert t1.is_set_to(t3) and t3.is_set_to(t1)
        assert not t1.is_set_to(torch.empty(3, 4, device=device))
        assert not t1.is_set_to(t1.view(4, 3))


def test_masked_fill_into_expanded_tensor_warns_as_on_cpu(tpu: torch.device) -> None:
    for device in ("cpu", tpu):
        x = torch.rand(1, device=device).expand(6)
        mask = torch.tensor([True, False, True, True, False, False], device=device)
        with pytest.warns(UserWarning, match="masked_fill_ on expanded tensors"):
            x.masked_fill_(mask, 0.0)
