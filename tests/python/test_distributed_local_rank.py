"""One chip per process, addressed as PyTorch code addresses it (torchrun, 2 ranks on the CPU
plugin): each process reports LOCAL_WORLD_SIZE devices and `tpu:LOCAL_RANK` is its chip, so
set_device(local_rank), torch.accelerator.set_device_index(local_rank),
torch.device("tpu", local_rank), DDP(device_ids=[local_rank]) (compared with Gloo on the CPU),
init_process_group(device_id=...) and init_device_mesh run unchanged; naming another rank's
chip raises an error that says whose it is."""

from __future__ import annotations

from typing import Any

import pytest
from dist_workers.launch import assert_passed, run_worker

CASES = ["numbering", "other_ranks_chip", "ddp_against_gloo", "device_mesh"]


@pytest.fixture(scope="session")
def local_rank_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, dict[str, Any]]]:
    return run_worker(tmp_path_factory, "local_rank_worker.py", timeout=240)


@pytest.mark.parametrize("case", CASES)
def test_torchrun_process_addresses_its_chip_as_local_rank(
    case: str, local_rank_results: list[dict[str, dict[str, Any]]]
) -> None:
    assert_passed(local_rank_results, case)
