"""The buckets a step's token and request counts are padded to: every distinct shape compiles
its own executable, and traffic makes every count."""

from __future__ import annotations

SMALLEST_BUCKET = 8


def padded_count(count: int, limit: int) -> int:
    """`count` rounded up to a power of two, at least SMALLEST_BUCKET and at most `limit` (or
    `count` where that is larger)."""
    return min(max(SMALLEST_BUCKET, 1 << (count - 1).bit_length()), max(limit, count))
