"""A process's threads share one malloc heap (glibc's ``mallopt(M_ARENA_MAX, 1)``).

glibc gives each thread that allocates at the same time as another a heap of its own
(an arena, up to 8 per core), and a heap keeps the large blocks freed in it for reuse
by its own thread.  A streamed large answer reads 8 MiB windows of a stored result and
makes 256 kB chunks in the pool's threads, which take turns: each thread's heap kept
its own high-water mark, and an HTTP process that answered a 3 000² matrix after a few
answers at once grew by +56 MB here and +110 MB in a CI run
(tests/e2e/test_large_fetches.py).  With one heap, the blocks one thread freed are the
ones the next reuses: +8 MB.  (Unmapping every large block when freed, the other cure,
made every chunk a fresh mapping: fetches took 1.5 to 2.7 times as long.)  Python's
small objects do not come from malloc, so the threads seldom wait for its lock.
"""

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

#: glibc's ``M_ARENA_MAX`` parameter of ``mallopt``.
M_ARENA_MAX = -8


def share_one_heap() -> bool:
    """Limit glibc to one heap for the process (call it before starting threads);
    whether it could (False off glibc)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(M_ARENA_MAX, 1) != 1:
        log.warning("glibc refused mallopt(M_ARENA_MAX); large blocks may be kept per thread")
        return False
    return True
