"""Functional collectives in graphs compiled with ``backend="tpu"`` (torch_tpu._graph_collectives)
on 2 ranks: the graph is cut at its collectives, the compute between them is compiled and
replayed, the collectives run through tpu_dist; results equal the same function run eagerly on
CPU through Gloo, forward and backward (dist_workers/compiled_collectives_worker.py)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from dist_workers.launch import assert_passed, run_worker

from torch_tpu._graph_collectives import has_collectives, split_at_collectives, stretches


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, dict[str, Any]]]:
    return run_worker(tmp_path_factory, "compiled_collectives_worker.py", timeout=240)


def test_a_forward_with_collectives_is_two_programs_a_call(
    results: list[dict[str, dict[str, Any]]],
) -> None:
    # all-gather, then compute, then reduce-scatter, then compute: the two stretches are
    # replayed (joined graphs, nothing recorded again) and each runs once, the first when the
    # reduce-scatter needs its result.
    assert_passed(results, "forward")
    for rank in results:
        assert rank["forward"]["counts"] == [{"executions": 2, "joined_graphs": 2}] * 2


def test_collectives_in_the_backward_graph(results: list[dict[str, dict[str, Any]]]) -> None:
    # funcol's autograd all-gather: its backward is a reduce-scatter inside AOTAutograd's
    # backward graph. Both graphs' stretches replay on every call, at the same cost each time.
    assert_passed(results, "forward_backward")
    for rank in results:
        counts = rank["forward_backward"]["counts"]
        assert all(count["joined_graphs"] == 2 for count in counts), counts
        assert len({count["executions"] for count in counts}) == 1, counts


def test_a_graph_is_cut_at_its_collectives() -> None:
    def traced(x: torch.Tensor) -> torch.Tensor:
        y = torch.ops._c10d_functional.all_reduce.default(x * 2, "sum", "0")
        y = torch.ops._c10d_functional.wait_tensor.default(y)
        return y + 1

    gm = torch.fx.symbolic_trace(traced)
    assert has_collectives(gm)
    split = split_at_collectives(gm, compile_stretch=lambda sub: sub)
    assert stretches(split) == ["compute", "all_reduce+wait_tensor", "compute"]
    plain = torch.fx.symbolic_trace(lambda x: x * 2)
    assert not has_collectives(plain)
