"""The clock that decides between nodes: the database's (docs/protocol.md §15).

A lease written by one node is judged by another; a queueing timeout, a retention or a
retry's due time is written on one node and acted on by another.  Judged by each node's
own clock, a node whose clock runs ahead would take over every job of a live node.  So
every such time is
read from ``now_ms()``, which is the database's clock (PostgreSQL's
``clock_timestamp()``) as this process last measured it, carried forward by the
process's monotonic clock: a node's wall clock may be wrong by minutes, or jump, without
moving it.  The measurement is taken again every ``RESAMPLE_S`` on a thread of its own,
so ``now_ms()`` never waits for the database; one taken over a slow round trip is not
used (its error would be half that trip).  SQLite is one host's database: its clock is
that host's, and ``now_ms()`` is ``time.time()``.
"""

import logging
import threading
import time
from collections.abc import Callable

from ..support.logs import OncePerPeriod

log = logging.getLogger(__name__)
_failure_log = OncePerPeriod(log, 60.0)

#: How often the database's clock is read again.
RESAMPLE_S = 10.0
#: A reading over a round trip longer than this is not used (unless it is the first).
MAX_ROUND_TRIP_S = 0.5


class DatabaseClock:
    """Milliseconds since the epoch on the database's clock, estimated in this process
    from readings of ``read_ms`` (a blocking call answering the database's time)."""

    def __init__(self, read_ms: Callable[[], int], resample_s: float = RESAMPLE_S):
        self._read_ms = read_ms
        self._resample_s = resample_s
        self._base: tuple[float, float] | None = None  # (database ms, monotonic s), last read
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.offset_ms = 0  # the database's clock minus this host's, last seen
        self.sample(first=True)
        self._thread = threading.Thread(target=self._resample, name="database clock", daemon=True)
        self._thread.start()

    def sample(self, first: bool = False) -> bool:
        """Read the database's clock now; False when the reading was not used."""
        began = time.monotonic()
        try:
            database_ms = self._read_ms()
        except Exception as exc:  # the store is unreachable: keep the last reading
            _failure_log.warning("the database's clock could not be read: %s", exc)
            return False
        ended = time.monotonic()
        if ended - began > MAX_ROUND_TRIP_S and not (first and self._base is None):
            return False
        # the database read its clock somewhere in the round trip: in its middle, most likely
        at = database_ms + (ended - began) * 500
        with self._lock:
            self._base = (at, ended)
            self.offset_ms = int(at - time.time() * 1000)
        return True

    def now_ms(self) -> int:
        with self._lock:
            base = self._base
        if base is None:  # never read: this host's clock, for now
            return int(time.time() * 1000)
        return int(base[0] + (time.monotonic() - base[1]) * 1000)

    def close(self) -> None:
        self._closed.set()

    def _resample(self):
        while not self._closed.wait(self._resample_s):
            self.sample()


_clock: DatabaseClock | None = None


def use(clock: DatabaseClock | None) -> None:
    """Make ``clock`` this process's ``now_ms()`` (None: the host's clock)."""
    global _clock
    _clock = clock


def stop_using(clock: DatabaseClock) -> None:
    """``clock`` is closed: the host's clock again, if it was the one in use."""
    global _clock
    if _clock is clock:
        _clock = None


def now_ms() -> int:
    """Now, in ms since the epoch, on the clock that decides between nodes."""
    clock = _clock
    return clock.now_ms() if clock is not None else int(time.time() * 1000)
