"""``python -m torch_tpu diagnose TRACE_DIR_OR_SCRIPT [--steps N] [--json] [-- script args]``.

Exits 0 when no problem was found, 1 when some were (as ``doctor`` does), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import diagnose_script, diagnose_trace


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_tpu diagnose",
        description="Diagnose a torch.profiler trace folder, or a script defining step().",
    )
    parser.add_argument("target", help="a trace folder or file, or a Python script")
    parser.add_argument("--steps", type=int, default=5, help="steps to run a script for")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    # The script's own arguments follow "--".
    script_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    options = parser.parse_args(argv[: len(argv) - len(script_args) - (1 if "--" in argv else 0)])
    target = Path(options.target)
    if not target.exists():
        print(f"diagnose: {target} does not exist", file=sys.stderr)
        return 2
    if target.is_file() and target.suffix == ".py":
        report = diagnose_script(target, max(options.steps, 1), script_args)
    else:
        try:
            report = diagnose_trace(target)
        except (FileNotFoundError, ValueError) as error:  # no trace there, or not JSON
            print(f"diagnose: {error}", file=sys.stderr)
            return 2
    print(report.to_json() if options.json else report)
    return 1 if report.findings else 0
