"""What a worker process keeps of the memory its jobs free: up to ``[workers]
kept_memory_bytes``, for its next job.

A job that makes a large result (a distance matrix's arrays) asks the C library for
tens of megabytes at once.  glibc gives each such block its own mapping and hands it
back to the kernel as soon as it is freed, so every such job starts on pages the kernel
must find, zero and map again, in the job's time: system time that grows with the
result, several times more on a virtual machine whose free memory goes back to its host
(free page reporting, ballooning: the host faults each page in again).  Kept, the next
job's arrays land on pages the process already has (docs/architecture.md, "Worker
processes": the figures).

So, where the bound is not 0, the worker tells glibc (``mallopt``) to take large blocks
from its heap rather than from mappings of their own, and to give the heap's free top
back only past the bound; after each job, where the process may hold more free memory
than the bound (its peak passed its size at the start by more), it looks (its resident
size) and gives back what is free past the bound (``malloc_trim``: also the free pages
inside the heap, which the top's rule does not reach).  A worker's resident size
between jobs is then its size at the start, plus what its jobs keep alive, plus at most
about the bound.

With 0 (or where the C library is not glibc: the calls are glibc's) nothing is changed:
freed blocks go back at once, as before.  Changed to 0 while workers run, they take
glibc's fixed defaults back and give back what they keep.
"""

import ctypes
import os
import resource

# mallopt's parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4
# glibc's defaults for them, taken back when the bound becomes 0
_DEFAULT_TRIM_THRESHOLD = _DEFAULT_TOP_PAD = 128 * 1024
_DEFAULT_MMAP_MAX = 65536
_INT_MAX = 2**31 - 1  # (mallopt takes an int)


def _glibc() -> ctypes.CDLL | None:
    """The C library this process runs on, if it is glibc (the only one whose
    ``mallopt`` and ``malloc_trim`` do what is described above)."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version"):  # (only glibc has it)
        return None
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    return libc


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # (kB on Linux)


class KeptMemory:
    """A worker process's part of the rule: ``keep`` when the bound is given or changes,
    ``after_job`` after each job."""

    def __init__(self) -> None:
        self._libc = _glibc()
        self._bound = 0
        self._base = 0  # resident bytes when the bound was first set (the process's own)

    def keep(self, bound: int) -> None:
        """Keep up to ``bound`` bytes of freed memory from now on (0: none)."""
        if self._libc is None or bound == self._bound:
            return
        if bound:
            if not self._base:
                self._base = _resident_bytes()
            self._libc.mallopt(_M_MMAP_MAX, 0)
            self._libc.mallopt(_M_TRIM_THRESHOLD, min(bound, _INT_MAX))
            self._libc.mallopt(_M_TOP_PAD, min(bound, _INT_MAX))
        else:
            self._libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
            self._libc.mallopt(_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
            self._libc.mallopt(_M_TOP_PAD, _DEFAULT_TOP_PAD)
            self._libc.malloc_trim(0)
        self._bound = bound

    def after_job(self) -> None:
        """Give back what is free past the bound.  One ``getrusage`` where the process
        never grew past its start by more than the bound (every small job); a look at
        its resident size only where it did."""
        if not self._bound or _peak_bytes() - self._base <= self._bound:
            return
        if _resident_bytes() - self._base > self._bound:
            self._libc.malloc_trim(self._bound)  # type: ignore[union-attr]
