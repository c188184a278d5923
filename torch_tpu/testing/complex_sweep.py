"""The complex64 sweep's worker (tools/complex_coverage.py): runs op_db entries in complex64 on
tpu and CPU with the complex allow-list lifted, and records which not-yet-allowed ops each
phase used.

    python -m torch_tpu.testing.complex_sweep INDEX,INDEX,... SAMPLES
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch

from torch_tpu.testing.op_sweep import entry_name, run_phase, set_aside_reason


def complex_entries() -> list[int]:
    """op_db indices of the entries CPU computes in complex64 and the sweep can compare."""
    from torch.testing._internal.common_methods_invocations import op_db

    return [
        i
        for i, op in enumerate(op_db)
        if torch.complex64 in op.dtypes and set_aside_reason(op) is None
    ]


def sweep(indices: list[int], samples: int) -> list[dict[str, Any]]:
    from torch.testing._internal.common_methods_invocations import op_db

    import torch_tpu

    survey = torch_tpu._C
    survey._set_complex_survey(True)
    results = []
    for i in indices:
        op = op_db[i]
        result: dict[str, Any] = {"index": i, "name": entry_name(op)}
        phases = [("forward", False)]
        if op.supports_autograd and torch.complex64 in op.supported_backward_dtypes("cpu"):
            phases.append(("backward", True))
        for phase, backward in phases:
            survey._take_complex_survey()
            result[phase] = run_phase(op, torch.complex64, backward, samples)
            result[f"{phase}_ops"] = survey._take_complex_survey()
        results.append(result)
    return results


def main() -> None:
    indices = [int(x) for x in sys.argv[1].split(",")]
    print(json.dumps(sweep(indices, int(sys.argv[2]))))


if __name__ == "__main__":
    main()
