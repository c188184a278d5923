"""torchvision without its C++ library, for the SGLang environment (see compat.py).

PyPI's torchvision wheels are CUDA builds: beside the CPU torch wheel their ``_C`` library does
not load (it links libc10_cuda), and torchvision's Python then fails at import, registering fake
kernels for ``torchvision::nms`` and ``torchvision::qnms``, ops that library would have defined.
``sglang.srt.configs`` imports torchvision (for vision-language models), so SGLang's runtime
cannot start. This file is run (not imported: it must not import torch or torch_tpu at
interpreter start) by a ``.pth`` file that scripts/setup_sglang.sh writes into the SGLang
environment. It puts a finder first on ``sys.meta_path``: on the first ``import torchvision``
it loads torchvision's library if it can, and where it cannot defines the two schemas (with no
kernels: calling them raises) before torchvision's own import runs. torchvision's other ops
are registered only when its library loaded, so its Python parts then import as usual.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

SCHEMAS = {
    "nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}


def _library_loads(spec: importlib.machinery.ModuleSpec) -> bool:
    import torch

    folders = list(spec.submodule_search_locations or [])
    libraries = [path for folder in folders for path in Path(folder).glob("_C*.so")]
    if not libraries:
        return False
    try:
        torch.ops.load_library(str(libraries[0]))
    except (OSError, RuntimeError):
        return False
    return True


def define_missing_ops(spec: importlib.machinery.ModuleSpec) -> bool:
    """Defines the schemas where torchvision's library cannot load; True if it did."""
    if _library_loads(spec):
        return False
    import torch

    for name, schema in SCHEMAS.items():
        # torch.library.define keeps its library alive for the process (a Library object's
        # definitions go when it is collected).
        torch.library.define(f"torchvision::{name}", schema)
    return True


class TorchvisionOpsFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torchvision":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None:
            define_missing_ops(spec)
        return spec


if "torchvision" not in sys.modules and not any(
    type(finder).__name__ == "TorchvisionOpsFinder" for finder in sys.meta_path
):
    sys.meta_path.insert(0, TorchvisionOpsFinder())
