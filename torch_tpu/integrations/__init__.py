"""Glue that lets libraries which enumerate accelerators by name pick ``tpu`` by themselves."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType

_pending: dict[str, Callable[[ModuleType], None]] = {}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a patch on a module right after it executes, before anyone imports names from it."""

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        patch = _pending.pop(name)
        loader = spec.loader
        exec_module = loader.exec_module  # type: ignore[union-attr]

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign,union-attr]
        return spec


_finder = _AfterImport()


def after_import(name: str, patch: Callable[[ModuleType], None]) -> None:
    """Applies `patch` to module `name` now if it is loaded, else as soon as it is."""
    module = sys.modules.get(name)
    if module is not None:
        patch(module)
        return
    _pending[name] = patch
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def install() -> None:
    from . import accelerate, fbgemm, torchrec

    accelerate.install()
    fbgemm.install()
    torchrec.install()
