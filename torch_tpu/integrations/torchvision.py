"""torchvision without its C++ operators: the import works, as torchvision intends.

torchvision loads its operators (``nms``, ``roi_align``, ``deform_conv2d``, ...) from ``_C.so``
and, when that fails, runs without them: its Python parts (datasets, transforms, models) work
and each operator raises "Couldn't load custom C++ ops". The registry's torchvision wheels are
CUDA builds whose ``_C.so`` needs ``libtorch_cuda.so``, which a CPU torch lacks, so that is the
path they take here. Two of torchvision's fake-tensor registrations (``torchvision::nms`` and
``qnms``) skip the check the others make and fail on the undefined operator, ending
``import torchvision``. This defines those two schemas, with no kernels, when and only when
``_C.so`` did not load: the operators then raise torchvision's own error, and a torchvision
whose operators load is left untouched.
"""

from __future__ import annotations

from types import ModuleType

import torch

from . import after_import

# The schemas torchvision's C++ library declares for the two operators (csrc/ops/nms.cpp).
_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_library: list[torch.library.Library] = []  # kept alive: dropping it would undefine the ops


def _define_missing_schemas(extension: ModuleType) -> None:
    if extension._has_ops():  # its _C.so loaded and defined them
        return
    library = torch.library.Library("torchvision", "FRAGMENT")
    for name, schema in _SCHEMAS.items():
        if not hasattr(torch.ops.torchvision, name):
            library.define(schema)
    _library.append(library)


def install() -> None:
    # torchvision/__init__ imports .extension (which tries _C.so) before _meta_registrations.
    after_import("torchvision.extension", _define_missing_schemas)
