"""torchrun worker: tpu_dist's bad-input and fault cases. Each must end in an error that names
the collective (on every rank involved), within the group's timeout, never a hang. Writes one
JSON line per case to $DIST_RESULTS.<rank>: {"case", "error"} where error is None when the
expected failure happened."""

from __future__ import annotations

import datetime
import json
import os
import time
import traceback
from collections.abc import Callable

import torch
import torch.distributed as dist

TPU = torch.device("tpu")
SHORT = datetime.timedelta(seconds=4)


def expect_error(fn: Callable[[], object], *needles: str) -> None:
    try:
        fn()
    except (RuntimeError, ValueError, TypeError) as error:
        text = str(error)
        missing = [n for n in needles if n not in text]
        assert not missing, f"error {text[:500]!r} does not mention {missing}"
    else:
        raise AssertionError(f"no error (expected one mentioning {needles})")


def main() -> None:
    dist.init_process_group("tpu_dist", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    results: list[dict[str, object]] = []

    def case(name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
            results.append({"case": name, "error": None})
        except Exception:  # noqa: BLE001 - each case reports its own failure
            results.append({"case": name, "error": traceback.format_exc(limit=4)})

    def save() -> None:
        with open(f"{os.environ['DIST_RESULTS']}.{rank}", "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")

    case(
        "mixed_devices",
        lambda: expect_error(
            lambda: dist.all_gather(
                [torch.zeros(2, device=TPU), torch.zeros(2)], torch.ones(2, device=TPU)
            ),
            "all_gather",
            "different devices",
        ),
    )
    case(
        "avg_of_integers",
        lambda: expect_error(
            lambda: dist.all_reduce(
                torch.ones(3, dtype=torch.int32, device=TPU), dist.ReduceOp.AVG
            ),
            "all_reduce",
            "AVG",
        ),
    )
    case(
        "all_to_all_wrong_count",
        lambda: expect_error(
            lambda: dist.all_to_all(
                [torch.zeros(1, device=TPU)] * (world + 1),
                [torch.ones(1, device=TPU)] * (world + 1),
            ),
            "all_to_all",
        ),
    )
    # Every rank gets the error, and the group still works afterwards.
    case(
        "dtype_differs_across_ranks",
        lambda: expect_error(
            lambda: dist.all_reduce(
                torch.ones(4, dtype=torch.float32 if rank == 0 else torch.int32, device=TPU)
            ),
            "all_reduce",
            "differ",
            "Float",
            "Int",
        ),
    )
    case(
        "shape_differs_across_ranks",
        lambda: expect_error(
            lambda: dist.all_reduce(torch.ones(4 + 4 * rank, device=TPU)), "all_reduce", "differ"
        ),
    )
    case(
        "collective_differs_across_ranks",
        lambda: expect_error(
            lambda: (
                dist.all_reduce(torch.ones(4, device=TPU))
                if rank == 0
                else dist.broadcast(torch.ones(4, device=TPU), src=0)
            ),
            "differ",
        ),
    )

    def still_works() -> None:
        x = torch.ones(3, device=TPU)
        dist.all_reduce(x)
        torch.testing.assert_close(x.cpu(), torch.full((3,), float(world)))

    case("group_works_after_errors", still_works)

    # A rank that never arrives: the others fail within the group's timeout.
    short = dist.new_group(timeout=SHORT)

    def never_arrives() -> None:
        if rank == 0:
            start = time.monotonic()
            # The error names the flight record's file: what this rank ran up to the timeout.
            expect_error(
                lambda: dist.all_reduce(torch.ones(2, device=TPU), group=short),
                "all_reduce",
                "the last ops dispatched are in",
            )
            took = time.monotonic() - start
            assert took < 30, f"took {took:.0f} s for a {SHORT.total_seconds()} s timeout"

    case("rank_never_arrives", never_arrives)
    dist.barrier()  # on the default group, which is unaffected

    # A rank that dies: the survivor's next collective fails (connection closed), no hang.
    if rank == world - 1:
        save()
        os._exit(0)

    def peer_died() -> None:
        time.sleep(1)
        start = time.monotonic()
        expect_error(lambda: dist.all_reduce(torch.ones(2, device=TPU)), "all_reduce")
        assert time.monotonic() - start < 60

    case("peer_process_died", peer_died)
    save()
    os._exit(0)  # the group cannot be torn down cleanly with a dead peer


if __name__ == "__main__":
    main()
