"""What a node's processes ask of glibc's malloc: one heap shared by a process's threads
(``share_one_heap``), and free pages given back after a large parse (``give_back``).

glibc gives each thread that allocates at the same time as another a heap of its own
(an arena, up to 8 per core), and a heap keeps the large blocks freed in it for reuse
by its own thread.  A streamed large answer reads 8 MiB windows of a stored result and
makes 256 kB chunks in the pool's threads, which take turns: with a heap each, every
thread keeps its own high-water mark and an HTTP process grows by that many windows.
With one heap, the blocks one thread freed are the ones the next reuses.  (Unmapping
every large block when freed, the other cure, makes every chunk a fresh mapping, and
fetches slower; docs/architecture.md has the figures.)  Python's small objects do not
come from malloc, so the threads seldom wait for its lock.
"""

import ctypes
import ctypes.util
import logging
from typing import Any

log = logging.getLogger(__name__)

#: glibc's ``M_ARENA_MAX`` parameter of ``mallopt``.
M_ARENA_MAX = -8


def _glibc(name: str) -> Any:
    """glibc's function ``name`` (a ctypes function); None off glibc (musl has neither
    of ours)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


_trim = _glibc("malloc_trim")


def give_back() -> None:
    """Return the C heap's free pages to the system (blocking: run it in the pool).
    Python's own arenas go back by themselves once empty; what a parse leaves is in
    malloc's heaps (libxml2's nodes, Python's large blocks), which glibc keeps."""
    if _trim is not None:
        _trim(0)


def share_one_heap() -> bool:
    """Limit glibc to one heap for the process (call it before starting threads);
    whether it could (False off glibc)."""
    mallopt = _glibc("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(M_ARENA_MAX, 1) != 1:
        log.warning("glibc refused mallopt(M_ARENA_MAX); large blocks may be kept per thread")
        return False
    return True
