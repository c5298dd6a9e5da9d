"""What one user may keep stored (docs/protocol.md §15): ``max_stored_bytes``, checked
at each start.

One XDima 2000² job stores 27.8 MB, kept 48 h unfetched: without a bound one user fills
the disk.  The figure is what the payloads (request, result, fault, progress) of the
user's jobs not yet erased take as stored, all services together (``store.stored_bytes``,
summed from an index: a few ms per 100 000 of the user's jobs).  So that a user far
below the bound (every user, on most nodes) does not pay that at each start, a figure
under half the bound is reused in this process for ``REUSE_S``; nearer, every start
measures afresh, so a refusal is exact to the last finished job.

A soft bound: it refuses new jobs, never a job already started (its result is stored
past the bound), nor the child jobs a running parent asks for (they count towards the
next start).  Refused, nothing is stored.
"""

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..protocol.faults import QuotaExceededFault

if TYPE_CHECKING:
    from ..store import JobStore

#: How long a measurement under half the bound stands in for a fresh one (seconds).
REUSE_S = 2.0


class StoredBytesQuota:
    def __init__(self, store: "JobStore", clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.clock = clock
        self._seen: dict[str, tuple[int, float]] = {}  # owner → (bytes, when measured)
        self._lock = threading.Lock()

    def stored(self, owner: str, limit: int) -> int:
        """``owner``'s stored bytes: measured, or a recent figure under half of ``limit``."""
        now = self.clock()
        with self._lock:
            seen = self._seen.get(owner)
        if seen is not None and seen[0] * 2 < limit and now - seen[1] < REUSE_S:
            return seen[0]
        stored = self.store.stored_bytes(owner)
        with self._lock:
            self._seen[owner] = (stored, now)
        return stored

    def check(self, owner: str, limit: int) -> None:
        """Refuse a start of ``owner`` at or past ``limit`` bytes (0: no limit)."""
        if not limit:
            return
        stored = self.stored(owner, limit)
        if stored >= limit:
            raise QuotaExceededFault(
                f"your stored jobs take {stored} bytes, at or past max_stored_bytes of {limit}; "
                "this job was refused",
                hint="Fetch and delete your finished jobs (deleteJob), or wait until retention "
                "erases them; then start again.",
            )
