"""The process's own memory, for tests and soaks that bound its growth."""

from __future__ import annotations

import ctypes
import ctypes.util
import os


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def heap_bytes() -> int:
    """The C heap in use: allocated chunks plus mmapped blocks (glibc's mallinfo2), so memory
    that was freed but kept by the allocator does not hide growth, as it does in the RSS."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def rss_bytes() -> int:
    """The resident set size."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
