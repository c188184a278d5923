"""MkDocs hooks for the documentation site (mkdocs.yml names this file).

Pages that other work adds later get their place in the navigation only when they exist, so
that `mkdocs build --strict` neither fails on a missing page nor on a page left out of the nav.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# (section title, page title, path under docs/, the page it follows)
OPTIONAL_PAGES = [
    ("User guide", "Flight recorder", "guide/flight_recorder.md", "guide/profiling.md"),
]


def on_config(config: Any, **_: Any) -> Any:
    docs = Path(config["docs_dir"])
    for section_title, title, path, after in OPTIONAL_PAGES:
        if not (docs / path).exists():
            continue
        for section in config["nav"]:
            entries = section.get(section_title) if isinstance(section, dict) else None
            if entries is None or any(path in entry.values() for entry in entries):
                continue
            index = next(
                (i + 1 for i, entry in enumerate(entries) if after in entry.values()),
                len(entries),
            )
            entries.insert(index, {title: path})
    return config
