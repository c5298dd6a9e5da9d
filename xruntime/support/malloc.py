"""Large blocks go back to the system when freed (glibc's ``mallopt``).

glibc serves a block of 128 kB or more with its own ``mmap`` and unmaps it on ``free``,
but it raises that threshold to the size of each such block freed (up to 32 MB).
After a process's first large answer, its 8 MiB windows of a stored result and its
256 kB chunks come from the heap instead, and each thread of the pool that made one
keeps its own heap (an arena) at the high-water mark: an HTTP process that streamed a
3 000² matrix kept +50 MB, and its peak reached +110 MB once the pool's threads took
turns (measured with tests/e2e/test_large_fetches.py).  Setting the threshold fixes
it, so such blocks are always unmapped when freed; small objects are unaffected.
"""

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

#: glibc's ``M_MMAP_THRESHOLD`` parameter of ``mallopt``.
M_MMAP_THRESHOLD = -3
#: Blocks of this size or more are mapped on their own (glibc's initial threshold).
LARGE_BLOCK = 128 * 1024


def return_large_blocks() -> bool:
    """Fix glibc's mmap threshold at LARGE_BLOCK; whether it could (False off glibc)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK) != 1:
        log.warning("glibc refused mallopt(M_MMAP_THRESHOLD); large blocks may be kept")
        return False
    return True
