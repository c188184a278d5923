"""Prints, one per line, the requirements of the given extras of pyproject.toml, following an
extra that names another (``torch_tpu[jax]``): scripts/setup.sh installs what the extras say,
so the set-up and ``pip install 'torch_tpu[...]'`` cannot drift apart.

    python scripts/extra_requirements.py cpu jax hf
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirements(extras: list[str], table: dict[str, list[str]]) -> list[str]:
    found: list[str] = []
    for extra in extras:
        if extra not in table:
            raise SystemExit(f"unknown extra {extra!r}; pyproject.toml has: {', '.join(table)}")
        for requirement in table[extra]:
            inner = re.fullmatch(r"torch_tpu\[(.+)\]", requirement)
            nested = inner.group(1).split(",") if inner else []
            for item in requirements(nested, table) if inner else [requirement]:
                if item not in found:
                    found.append(item)
    return found


if __name__ == "__main__":
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    print("\n".join(requirements(sys.argv[1:], project["optional-dependencies"])))
