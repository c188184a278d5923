"""Views over the whole of vLLM's preallocated step buffers.

The GPU runner hands out the front of a buffer sized for the largest step (``buffer[:n]``), so
the shapes of a step's tensors follow its request or token count and every count would compile
its own executable. A view over the buffer's full length, or over a padded bucket of its rows,
has one shape for every step.
"""

from __future__ import annotations

import torch


def elements_from(view: torch.Tensor) -> int:
    """The elements of `view`'s storage from its offset on."""
    return view.untyped_storage().nbytes() // view.element_size() - view.storage_offset()


def whole_buffer(vector: torch.Tensor) -> torch.Tensor:
    """The 1-D buffer that `vector` is the front of, at its full length."""
    return vector.as_strided((elements_from(vector),), (1,))


def leading_rows(view: torch.Tensor, rows: int) -> torch.Tensor | None:
    """`rows` rows of the buffer that `view` is the front of (its rows past `view`'s are stale
    and are for padding), or None where the buffer has fewer."""
    if view.dim() == 0 or not view.is_contiguous():
        return None
    if rows * view.stride(0) > elements_from(view):
        return None
    return view.as_strided((rows, *view.shape[1:]), view.stride())
