"""A pytest plugin that runs a fixed sample of a PyTorch test file (``-p
torch_tpu.testing.pytorch_suites_sample --suites-sample K``; tools/pytorch_suites.py passes it
with ``--sample K``): keeps the tests whose device-free name hashes to 0 modulo K.

The name has its device taken out (``TestFooPRIVATEUSE1::test_x_tpu_float32`` and
``TestFooCPU::test_x_cpu_float32`` hash alike), so the tpu and CPU runs sample the same tests.
The ufunc files instantiate about 40,000 OpInfo tests per device: a whole run takes hours on
two cores, a 1-in-10 sample minutes.
"""

from __future__ import annotations

import re
import zlib

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--suites-sample",
        type=int,
        default=1,
        help="run only the tests whose device-free name hashes to 0 modulo this number",
    )
    parser.addoption(
        "--suites-sample-part",
        type=int,
        default=0,
        help="with --suites-sample K, the residue the kept tests' hashes leave instead of 0 "
        "(parts 0 to K-1 together are the whole file)",
    )


def device_free_name(nodeid: str) -> str:
    """The test's class and name with the device type taken out."""
    parts = nodeid.split("::")
    cls = re.sub(r"(CPU|PRIVATEUSE1|TPU)$", "", parts[-2]) if len(parts) > 1 else ""
    name = re.sub(r"_(cpu|tpu|privateuse1)(?=_|$)", "_DEVICE", parts[-1], count=1)
    return f"{cls}::{name}"


def in_sample(nodeid: str, every: int, part: int = 0) -> bool:
    return every <= 1 or zlib.crc32(device_free_name(nodeid).encode()) % every == part


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    every = config.getoption("--suites-sample")
    part = config.getoption("--suites-sample-part")
    if every <= 1:
        return
    kept = [item for item in items if in_sample(item.nodeid, every, part)]
    dropped = [item for item in items if not in_sample(item.nodeid, every, part)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept
