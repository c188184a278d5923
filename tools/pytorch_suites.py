"""Runs PyTorch's own device-generic test files on tpu and on CPU, and writes
docs/pytorch_suites.md (and .json): per file, what passed, failed and was skipped on each
device, and every test that passes on CPU but not on tpu, classified by cause.

    .venv/bin/python tools/pytorch_suites.py --tests ~/pytorch/test [--files test_view_ops.py ...]
        [--timeout 120] [--jobs 2] [--devices tpu cpu] [--sample 10] [--source "TEXT"]
        # --devices tpu: runs tpu only, keeping each file's earlier CPU results
    .venv/bin/python tools/pytorch_suites.py --files     # rewrites the report from its JSON
    .venv/bin/python tools/pytorch_suites.py --tests ~/pytorch/test --rerun-failing
        # runs each file's tpu-only failures again (minutes, not the full run's half hour)
    .venv/bin/python tools/pytorch_suites.py --tests ~/pytorch/test --seeds 20
        # runs each tpu-only wrong-value failure under seeds 0..19 on tpu and on CPU: a test
        # whose tolerance depends on its random draws fails on CPU too under some seeds
    .venv/bin/python tools/pytorch_suites.py --tests ~/pytorch/test \
        --files test_unary_ufuncs.py test_binary_ufuncs.py --sample 10 --source "commit ..."
        # the ufunc files hold ~40,000 OpInfo tests per device (hours on two cores): --sample K
        # runs the same 1-in-K of them on both devices (torch_tpu.testing.pytorch_suites_sample);
        # --source says where the files came from; both are kept per file in the report
    .venv/bin/python tools/pytorch_suites.py --tests ~/pytorch/test --files test_torch.py \
        --sample 2 --sample-part 1
        # another part of the same sample: its results join the file's earlier parts', and
        # parts 0 to K-1 together are the whole file

The test files come from a PyTorch checkout close to the installed torch (they are not in the
wheel and are not committed here). Each file runs under pytest once per device with
PYTORCH_TESTING_DEVICE_ONLY_FOR set, so torch.testing._internal.common_device_type
instantiates its tests for that device alone (the tpu classes appear once torch_tpu is loaded,
which autoload does). Every test has a time limit (pytest-timeout), and a test that kills its
process is reported as a crash by pytest-xdist, which replaces the worker and goes on.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The report's entry (beside the files' results) for where each file came from and its sample.
META = "_files"
# A device's stored results: the passing tests' names by file and class, every other record.
PASSED, OTHERS = "passed", "others"
DEFAULT_FILES = [
    "test_view_ops.py",
    "test_indexing.py",
    "test_type_promotion.py",
    "test_shape_ops.py",
    "test_reductions.py",
]

# First match wins: (cause, pattern over the failure's message and text).
CAUSES = [
    ("timeout", r"Timeout \(?>|Failed: Timeout"),
    ("crash", r"worker '\w+' crashed|Fatal Python error|Segmentation fault"),
    # Indices in a device tensor are checked inside the executable and reported at the next
    # sync point, as CUDA's device asserts are (tests that expect the error at the call skip
    # CUDA for that reason).
    ("index checked on the device, reported at sync", r"found on the device at this sync point"),
    ("missing op (quantized)", r"[Qq]uantiz"),
    ("missing op", r"is not implemented for the tpu device|Could not run '[^']+' with arguments"),
    ("complex not supported", r"does not support complex tensors"),
    ("CPU-resident tensor refused", r"Expected all tensors to be on the same device"),
    ("compile error", r"PJRT_Client_Compile|stablehlo builder"),
    ("internal assert", r"INTERNAL ASSERT FAILED"),
    (
        "wrong or missing error",
        r"Regex pattern did not match|not raised|did not raise|DID NOT RAISE|"
        r"Expected .* to raise|assertRaises",
    ),
    ("wrong value", r"not close|not equal|mismatch|AssertionError|assert "),
]


# tpu-only failures left on purpose, and why (first match over the test's key and message):
# what XLA has no type for (quantized), and checks made where CUDA makes them.
LEFT_WITH_REASON = [
    (
        r"[Qq]uantiz",
        "quantized tensors: XLA has no quantized element types, and torch_tpu does not emulate "
        "PyTorch's quantized backend (nor does torch_xla)",
    ),
    (
        r"test_(scalar_support|reference_numerics(_extremal_values)?)_(_refs_)?pow_DEVICE_complex64",
        "complex64 z ** w is glibc's cpowf on CPU (and in NumPy, the reference), exp(w log z) with "
        "float roundings on the way that w log z amplifies (~5e-6 off the exact value); tpu takes "
        "the same float steps, but glibc's float atan2 and log are not always correctly rounded, "
        "so ~1% of random inputs land past the test's 1.3e-6 of CPU (test_ufunc_parity.py::"
        "test_complex64_pow_takes_glibcs_float_steps; tpu is as close to the complex128 result "
        "as CPU: test_complex64_pow_is_as_close_to_exact_as_cpus)",
    ),
    (
        r"test_reference_numerics_(_refs_)?(add|sub)_DEVICE_complex32",
        "the test holds complex32 results to the unrounded complex64 ones within 1e-5, below "
        "float16's ulp (0.0039 at 4): it fails wherever a drawn pair's sum or difference does not "
        "fit float16, on any device; tpu's generator draws such a pair (0.5947 - 0.4666i minus "
        "0.3577 + 4.1719i: -4.638427734375 rounds to -4.63671875 on CPU and tpu alike), CPU's not",
    ),
    (
        r"test_reference_numerics_large_values_(_refs_)?(pow|float_power)_DEVICE_complex",
        "operands past 1e6 (exponents to 1e20) make w log z ~1e21, and the signs of the results, "
        "all infinite there, follow cos and sin of it: they hang on the last bit of log z, which "
        "tpu's log and glibc's clog round apart (every differing element is an infinite CPU result "
        "with an operand past 1e6; finite results agree)",
    ),
    (
        r"test_fmod_remainder_by_zero_integral",
        "integer fmod/remainder by zero: CPU raises ZeroDivisionError (a check of every divisor "
        "on the host, a sync), and the test asserts CUDA's undefined all-ones pattern for every "
        "other device; tpu answers what XLA's remainder defines, the dividend, as ROCm does (its "
        "branch in the test is taken under torch.version.hip alone)",
    ),
    (
        r"test_type_promotion__refs_copysign_DEVICE",
        "torch._refs.copysign itself refuses a CPU scalar tensor beside a device tensor, before "
        "any tpu kernel runs; its OpInfo skips this test for CUDA for the same error, under the "
        "test class's old name (TestBinaryUfuncsDevice), so the skip no longer applies",
    ),
    (
        r"NestedTensor(tpu|PrivateUse1)",
        "nested tensors: PyTorch's nested-tensor kernels are registered for CPU, CUDA and HPU "
        "only (NestedTensorCPU, ...), so a nested tensor on any out-of-tree device finds no ops; "
        "the test takes its nested branch on every native device",
    ),
    (
        r"test_upsamplingBiMode2d_nonsupported_dtypes\w*_mode_(bilinear|bicubic)_uint8\w* "
        r"AssertionError: RuntimeError not raised",
        "the test expects every device but CPU to refuse uint8 bilinear and bicubic resizing "
        "(CUDA has no uint8 kernels for them); tpu computes them as CPU does, and "
        "test_upsamplingBiMode2d_consistency checks those uint8 results against float on tpu",
    ),
    (
        r"test_one_hot_DEVICE AssertionError: RuntimeError not raised",
        "ATen's one_hot skips its host-side class checks (a sync) for cuda, mps, xla and "
        "PrivateUse1 devices and leaves bad classes to scatter's device-side check (reported at "
        "the next sync here, as CUDA's device assert); the test exempts cuda, xla and mps only",
    ),
    (
        r"found on the device at this sync point",
        "indices in a device tensor are checked inside the executable and reported at the next "
        "sync point, as CUDA's device asserts are; these tests skip CUDA for the same reason",
    ),
    (
        r"Type comparison failed: <class 'torch\.tpu\.\w+Storage'>",
        "tpu tensors' legacy storage classes live on the device module (torch.tpu.FloatStorage), "
        "as CUDA's do (torch.cuda.FloatStorage), and storage_type() returns them as it does for "
        "CUDA; the test expects a device module's class for CUDA alone",
    ),
    (
        r"map2?_ is only implemented on CPU tensors",
        "Tensor.map_ and map2_ call a Python function per element, and PyTorch implements them "
        "for CPU tensors alone; the tests skip them for CUDA for the same reason",
    ),
    (
        r"a slice of a tpu storage",
        "a tpu storage's bytes are one device buffer that each write replaces, so a second "
        "storage over part of them (untyped_storage()[a:b], which shares memory on CPU and CUDA) "
        "cannot be made; a tensor sliced over the storage reads and writes those bytes",
    ),
    (
        r"(test_gather_backward_deterministic_path|test_scatter_add_one_dim_deterministic)"
        r".*Timeout",
        "its reference is a Python loop of 20,000 to 90,000 single-element reads and updates of "
        "a device tensor (test_gather_backward's CUDA takes another branch), each a device "
        "execution: past the time limit",
    ),
]


def reason_left(key: str, result: dict[str, Any]) -> str | None:
    for pattern, reason in LEFT_WITH_REASON:
        if re.search(pattern, f"{key} {result['message']}"):
            return reason
    seeds = result.get("seeds")
    if seeds and seeds["cpu"] < seeds["of"]:
        return (
            f"its tolerance depends on the random draws: under seeds 0-{seeds['of'] - 1} it "
            f"passes {seeds['cpu']} times on CPU and {seeds['tpu']} times on tpu (tpu's "
            "generator draws other numbers than CPU's, as CUDA's does)"
        )
    return None


def classify(text: str) -> str:
    # A test that names CUDA in its own failure assumes it; CUDA deep in a traceback does not.
    head = first_line(text)
    if re.search(r"\bcuda\b|CUDA", head):
        return "CUDA-only assumption"
    # The failure's own line first: a word deep in its traceback (a module named "quantized")
    # must not outrank what the error says.
    for part in (head, text):
        for cause, pattern in CAUSES:
            if re.search(pattern, part):
                return cause
    return "other"


def run_file(
    path: Path,
    device: str,
    timeout: int,
    jobs: int,
    only: list[str] | None = None,
    sample: int = 1,
    part: int = 0,
) -> dict[str, dict[str, Any]]:
    """{test key: {"outcome", "cause", "message", "seconds"}} for one file on one device (or for
    the tests of `only`, test keys, alone; or for the 1-in-`sample` of its tests)."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "junit.xml"
        command = [sys.executable, "-m", "pytest", str(path), "-q", "-p", "no:cacheprovider"]
        command += ["--timeout", str(timeout), "--junitxml", str(report)]
        command += ["-o", "junit_family=xunit1"]
        if only is not None:
            command += ["-k", " or ".join(key_to_name(key, device) for key in only)]
        if jobs > 1:
            command += ["-n", str(jobs), "--max-worker-restart", "1000"]
        if device == "tpu":
            command += ["-p", "torch_tpu.testing.pytorch_suites_plugin"]
        if sample > 1 and only is None:
            command += ["-p", "torch_tpu.testing.pytorch_suites_sample"]
            command += ["--suites-sample", str(sample), "--suites-sample-part", str(part)]
        env = dict(os.environ, PYTORCH_TESTING_DEVICE_ONLY_FOR=device)
        # The suites import their neighbours (common helpers next to them).
        env["PYTHONPATH"] = os.pathsep.join([str(path.parent), env.get("PYTHONPATH", "")])
        subprocess.run(
            command, cwd=path.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        if not report.exists():
            return {}
        return parse_junit(report, device)


def test_key(classname: str, name: str, device: str) -> str:
    """The test's name with its device taken out, so the tpu and CPU runs line up."""
    cls = classname.rsplit(".", 1)[-1]
    # Test classes are named after the device type: TestFooCPU, TestFooPRIVATEUSE1 (or TPU).
    for suffix in (device.upper(), "PRIVATEUSE1"):
        if cls.endswith(suffix):
            cls = cls[: -len(suffix)]
            break
    name = re.sub(rf"_{device}(?=_|$)", "_DEVICE", name, count=1)
    return f"{path_of(classname)}::{cls}::{name}"


def key_to_name(key: str, device: str) -> str:
    """A test key's test function name on `device`, for pytest's -k."""
    return key.rsplit("::", 1)[-1].replace("_DEVICE", f"_{device}", 1)


def path_of(classname: str) -> str:
    return classname.rsplit(".", 1)[0] if "." in classname else ""


def parse_junit(report: Path, device: str) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        key = test_key(case.get("classname", ""), case.get("name", ""), device)
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                message = f"{child.get('message', '')}\n{child.text or ''}"
            elif child.tag == "skipped":
                outcome = "skipped"
                message = child.get("message", "")
        results[key] = {
            "outcome": outcome,
            "cause": classify(message) if outcome == "failed" else "",
            "message": first_line(message),
            "seconds": float(case.get("time", "0") or 0),
        }
    return results


def first_line(message: str) -> str:
    for line in message.splitlines():
        line = line.strip()
        if line:
            return line[:240]
    return ""


def summarize(
    runs: dict[str, dict[str, dict[str, dict[str, Any]]]],
    devices: list[str],
    meta: dict[str, dict[str, Any]] | None = None,
) -> str:
    meta = meta or {}
    lines = ["# PyTorch's device-generic test files on tpu", ""]
    lines += [
        "Written by `tools/pytorch_suites.py` (see its docstring for how to run it). A *tpu-only "
        "failure* passes on CPU and fails (or times out, or crashes) on tpu.",
        "",
    ]
    header = "| file |"
    rule = "| --- |"
    for device in devices:
        header += f" {device} passed | {device} failed | {device} skipped |"
        rule += " ---: | ---: | ---: |"
    if "tpu" in devices and "cpu" in devices:
        header += " tpu-only failures | left with a reason |"
        rule += " ---: | ---: |"
    lines += [header, rule]
    causes: collections.Counter[str] = collections.Counter()
    only_tpu: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for file, by_device in runs.items():
        row = f"| {file} |"
        for device in devices:
            counts = collections.Counter(r["outcome"] for r in by_device.get(device, {}).values())
            row += f" {counts['passed']} | {counts['failed']} | {counts['skipped']} |"
        if "tpu" in devices and "cpu" in devices:
            cpu, tpu = by_device.get("cpu", {}), by_device.get("tpu", {})
            failing = [
                (key, result)
                for key, result in sorted(tpu.items())
                if result["outcome"] == "failed" and cpu.get(key, {}).get("outcome") == "passed"
            ]
            only_tpu[file] = failing
            causes.update(result["cause"] for _, result in failing)
            left = sum(reason_left(key, result) is not None for key, result in failing)
            row += f" {len(failing)} | {left} |"
        lines.append(row)
    notes = [f"- {file}: {describe(meta[file])}" for file in runs if describe(meta.get(file, {}))]
    if notes:
        lines += ["", "Where each file came from (not committed here), and what of it ran:", ""]
        lines += notes
    if causes:
        lines += ["", "## tpu-only failures by cause", "", "| cause | tests |", "| --- | ---: |"]
        lines += [f"| {cause} | {count} |" for cause, count in causes.most_common()]
    for file, failing in only_tpu.items():
        if not failing:
            continue
        lines += ["", f"## {file}: tpu-only failures", ""]
        for key, result in failing:
            name = key.split("::", 1)[-1]
            reason = reason_left(key, result)
            left = f" **Left:** {reason}." if reason else ""
            lines.append(f"- `{name}` ({result['cause']}): {result['message']}{left}")
    return "\n".join(lines) + "\n"


def describe(info: dict[str, Any]) -> str:
    parts = [info["source"]] if info.get("source") else []
    sample = info.get("sample", 1)
    ran = info.get("parts", [0])
    if sample > 1 and len(ran) == sample:
        parts.append(f"all of its tests, run in {sample} parts (`--sample {sample} --sample-part`)")
    elif sample > 1:
        which = "" if ran == [0] else f" (parts {', '.join(map(str, ran))} of {sample})"
        parts.append(
            f"a fixed 1-in-{sample} sample of its tests{which}, the same on both devices "
            "(`--sample`)"
        )
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=Path, help="PyTorch's test/ folder")
    parser.add_argument("--files", nargs="*", default=DEFAULT_FILES)
    parser.add_argument("--devices", nargs="*", default=["tpu", "cpu"])
    parser.add_argument("--timeout", type=int, default=120, help="seconds per test")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "pytorch_suites.md")
    parser.add_argument(
        "--rerun-failing",
        action="store_true",
        help="run only the report's tpu-only failures of each file again, on tpu, and update them",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=0,
        help="run each tpu-only wrong-value failure under this many seeds, on tpu and on CPU",
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=1,
        help="run the same 1-in-K of each file's tests on every device (kept per file)",
    )
    parser.add_argument(
        "--sample-part",
        type=int,
        default=0,
        help="with --sample K, run part R (0 to K-1) of the file; its results join the parts "
        "run before",
    )
    parser.add_argument(
        "--source", help="where the files run now came from (a commit), kept per file"
    )
    parser.add_argument("--seed-worker", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seed_worker is not None:
        # One device per process (PYTORCH_TESTING_DEVICE_ONLY_FOR is read at import).
        print(json.dumps(pass_counts(args.tests / args.files[0], args.seed_worker, args.seeds)))
        return

    runs: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    report = args.out.with_suffix(".json")
    everything = load_report(report) if report.exists() else {}
    meta: dict[str, dict[str, Any]] = everything.pop(META, {})
    started = time.time()
    if args.files and args.tests is None:
        sys.exit(
            "pytorch_suites: --tests is needed to run files (--files alone rewrites the report)"
        )
    for file in args.files:
        path = (args.tests / file).resolve()
        if not path.exists():
            sys.exit(f"pytorch_suites: {path} does not exist")
        if args.rerun_failing:
            runs[file] = rerun_failing(path, everything.get(file, {}), args.timeout, args.jobs)
            continue
        if args.seeds:
            runs[file] = with_seed_counts(path, everything.get(file, {}), args.seeds)
            continue
        # A file run again with --devices tpu keeps its sample, so both devices run the same tests.
        info = meta.setdefault(file, {})
        # Another part of the file's sample adds to the parts run before; anything else starts
        # the file afresh.
        adding = args.sample_part > 0 and info.get("sample") == args.sample
        if args.sample > 1 or set(args.devices) >= {"tpu", "cpu"}:
            info["sample"] = args.sample
            info["parts"] = sorted({*info.get("parts", [0]), args.sample_part} if adding else {0})
        if args.source:
            info["source"] = args.source
        # A device not run now keeps its earlier results (--devices tpu after a tpu change).
        runs[file] = {
            device: results
            for device, results in everything.get(file, {}).items()
            if device not in args.devices or adding
        }
        for device in args.devices:
            t0 = time.time()
            runs[file][device] = {
                **runs[file].get(device, {}),
                **run_file(
                    path,
                    device,
                    args.timeout,
                    args.jobs,
                    sample=info.get("sample", 1),
                    part=args.sample_part,
                ),
            }
            print(
                f"{file} on {device}: {len(runs[file][device])} tests in {time.time() - t0:.0f} s",
                flush=True,
            )
    # The files run now replace their earlier results; the report keeps the other files'.
    for file, by_device in runs.items():
        keep_seed_counts(by_device, everything.get(file, {}))
    everything.update(runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    present = {device for by_device in everything.values() for device in by_device}
    args.out.write_text(summarize(everything, [d for d in ("tpu", "cpu") if d in present], meta))
    stored = compact(everything)
    if meta:
        stored[META] = meta
    report.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out} ({time.time() - started:.0f} s)")


def keep_seed_counts(
    new: dict[str, dict[str, dict[str, Any]]], old: dict[str, dict[str, dict[str, Any]]]
) -> None:
    """Seed counts (--seeds) describe a test, not a run: a test that fails again with the same
    cause keeps its earlier counts."""
    earlier = old.get("tpu", {})
    for key, result in new.get("tpu", {}).items():
        before = earlier.get(key, {})
        if "seeds" in before and "seeds" not in result and result["cause"] == before["cause"]:
            result["seeds"] = before["seeds"]


def rerun_failing(
    path: Path, by_device: dict[str, dict[str, dict[str, Any]]], timeout: int, jobs: int
) -> dict[str, dict[str, dict[str, Any]]]:
    """The file's stored results, with its tpu-only failures run again on tpu."""
    tpu = dict(by_device.get("tpu", {}))
    failing = tpu_only_failures(by_device)
    if failing:
        t0 = time.time()
        tpu.update(run_file(path, "tpu", timeout, jobs, only=failing))
        print(f"{path.name}: {len(failing)} failing tests again in {time.time() - t0:.0f} s")
    return {**by_device, "tpu": tpu}


def tpu_only_failures(by_device: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    cpu, tpu = by_device.get("cpu", {}), by_device.get("tpu", {})
    return [
        key
        for key, result in tpu.items()
        if result["outcome"] == "failed" and cpu.get(key, {}).get("outcome") == "passed"
    ]


def with_seed_counts(
    path: Path, by_device: dict[str, dict[str, dict[str, Any]]], seeds: int
) -> dict[str, dict[str, dict[str, Any]]]:
    """The file's stored results, each tpu-only wrong-value failure with how often it passes
    under `seeds` seeds on each device."""
    tpu = dict(by_device.get("tpu", {}))
    keys = [k for k in tpu_only_failures(by_device) if tpu[k]["cause"] == "wrong value"]
    if not keys:
        return by_device
    counts: dict[str, dict[str, int]] = {key: {"of": seeds} for key in keys}
    for device in ("tpu", "cpu"):
        command = [sys.executable, __file__, "--tests", str(path.parent), "--files", path.name]
        command += ["--seeds", str(seeds), "--seed-worker", *keys]
        env = dict(os.environ, PYTORCH_TESTING_DEVICE_ONLY_FOR=device)
        done = subprocess.run(command, cwd=path.parent, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"pytorch_suites: the seed runs on {device} failed:\n{done.stderr[-2000:]}")
        for key, passed in json.loads(done.stdout.splitlines()[-1]).items():
            counts[key][device] = passed
    for key in keys:
        tpu[key] = {**tpu[key], "seeds": counts[key]}
        passed = counts[key]
        print(f"{key}: passes {passed['cpu']}/{seeds} on CPU, {passed['tpu']}/{seeds} on tpu")
    return {**by_device, "tpu": tpu}


def pass_counts(path: Path, keys: list[str], seeds: int) -> dict[str, int]:
    """{test key: how many of seeds 0..seeds-1 it passes under} on the device that
    PYTORCH_TESTING_DEVICE_ONLY_FOR names, each test run in this process through unittest."""
    import importlib
    import unittest

    sys.path.insert(0, str(path.parent))
    module = importlib.import_module(path.stem)
    from torch.testing._internal import common_utils

    device = os.environ["PYTORCH_TESTING_DEVICE_ONLY_FOR"]
    counts = {}
    for key in keys:
        _, cls_name, test_name = key.split("::")
        cls = next(
            getattr(module, cls_name + suffix)
            for suffix in (device.upper(), "PRIVATEUSE1")
            if hasattr(module, cls_name + suffix)
        )
        counts[key] = 0
        for seed in range(seeds):
            # TestCase.setUp seeds torch, random and numpy with common_utils.SEED.
            common_utils.SEED = seed
            outcome = unittest.TestResult()
            cls(key_to_name(key, device)).run(outcome)
            counts[key] += outcome.wasSuccessful()
    return counts


def compact(runs: dict[str, Any]) -> dict[str, Any]:
    """The passing tests (most) stored as names listed under their file and class, the others
    as their records: the report stays small."""
    stored: dict[str, Any] = {}
    for file, by_device in runs.items():
        stored[file] = {}
        for device, tests in by_device.items():
            passed: dict[str, list[str]] = {}
            others = {}
            for key, record in sorted(tests.items()):
                if record["outcome"] == "passed":
                    group, name = key.rsplit("::", 1)
                    passed.setdefault(group, []).append(name)
                else:
                    others[key] = record
            stored[file][device] = {PASSED: passed, OTHERS: others}
    return stored


def load_report(path: Path) -> dict[str, Any]:
    runs = json.loads(path.read_text())
    meta = runs.pop(META, None)
    passed_record = {"outcome": "passed", "cause": "", "message": "", "seconds": 0.0}
    for by_device in runs.values():
        for device, tests in by_device.items():
            if PASSED not in tests:  # the earlier form: each test its own entry
                by_device[device] = {
                    key: dict(passed_record) if record == "passed" else record
                    for key, record in tests.items()
                }
                continue
            expanded = {
                f"{group}::{name}": dict(passed_record)
                for group, names in tests[PASSED].items()
                for name in names
            }
            expanded.update(tests[OTHERS])
            by_device[device] = expanded
    if meta is not None:
        runs[META] = meta
    return runs


if __name__ == "__main__":
    main()
