"""tools/pytorch_suites.py's bookkeeping without PyTorch's test files (they are not committed):
the fixed sample is the same on both devices, and a file's source and sample survive the JSON
report and are printed under the table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from torch_tpu.testing import pytorch_suites_sample as sample

ROOT = Path(__file__).resolve().parents[2]


def _tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "pytorch_suites", ROOT / "tools" / "pytorch_suites.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pytorch_suites"] = module
    spec.loader.exec_module(module)
    return module


tool = _tool()


def test_sample_is_the_same_on_both_devices() -> None:
    names = [
        f"test_unary_ufuncs.py::TestUnaryUfuncs{cls}::test_{kind}_{op}_{dev}_{dtype}"
        for kind in ("reference_numerics_normal", "contig_size1", "batch_vs_slicing")
        for op in ("abs", "exp", "sin", "_refs_abs", "nn_functional_relu")
        for dtype in ("float32", "int64", "complex64", "bfloat16")
        for cls, dev in (("CPU", "cpu"), ("PRIVATEUSE1", "tpu"))
    ]
    cpu = {sample.device_free_name(n) for n in names if "CPU::" in n and sample.in_sample(n, 4)}
    tpu = {sample.device_free_name(n) for n in names if "1::" in n and sample.in_sample(n, 4)}
    assert cpu == tpu
    assert 0 < len(cpu) < len(names) // 2  # a sample, neither empty nor everything
    assert all(sample.in_sample(n, 1) for n in names)
    # The key the tool stores is the same device-free name the sample hashes.
    cls, name = "TestUnaryUfuncsPRIVATEUSE1", "test_abs_tpu_int64"
    key = tool.test_key(f"test_unary_ufuncs.{cls}", name, "tpu")
    assert key.endswith(sample.device_free_name(f"a::{cls}::{name}"))


def test_source_and_sample_kept_in_the_report(tmp_path: Path) -> None:
    runs = {
        "test_x.py": {
            "tpu": {"k::A::t1": {"outcome": "passed", "cause": "", "message": "", "seconds": 0.0}},
            "cpu": {"k::A::t1": {"outcome": "passed", "cause": "", "message": "", "seconds": 0.0}},
        }
    }
    meta = {"test_x.py": {"source": "commit abc1234", "sample": 16}}
    stored = tool.compact(runs)
    stored[tool.META] = meta
    report = tmp_path / "r.json"
    report.write_text(tool.json.dumps(stored))
    loaded = tool.load_report(report)
    assert loaded.pop(tool.META) == meta
    assert loaded == runs
    # A report in the earlier form (each passing test its own "passed" entry) still loads.
    report.write_text(
        tool.json.dumps({"test_x.py": {d: {"k::A::t1": "passed"} for d in runs["test_x.py"]}})
    )
    assert tool.load_report(report) == runs
    text = tool.summarize(loaded, ["tpu", "cpu"], meta)
    assert "- test_x.py: commit abc1234; a fixed 1-in-16 sample" in text
    assert "| test_x.py | 1 | 0 | 0 | 1 | 0 | 0 | 0 | 0 |" in text


def test_failure_classified_by_its_own_line_first() -> None:
    # A missing op whose traceback passes through a module with "quantized" in its name is a
    # missing op, not a quantized one (which would be left with the quantized reason).
    text = (
        "NotImplementedError: The operator 'aten::_transformer_encoder_layer_fwd' is not "
        "implemented for the tpu device yet.\n"
        '  File "torch/ao/nn/quantized/modules/linear.py", line 1, in forward\n'
    )
    assert tool.classify(text) == "missing op"
    # What the first line does not say is still found further down.
    assert tool.classify("Error\nworker 'gw1' crashed while running") == "crash"
