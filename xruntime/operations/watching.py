"""Held watchJob long polls: coroutines woken by the notifier, never a thread each.

Every job that has waiters has one ``JobWatch``.  It reads the job when its first
waiter arrives and once for each change it is told of (changes told while a read is
under way cost one more read, not one each), and hands that one snapshot to all its
waiters.  So 10 000 watchers of one job cost one read when it changes, and the
answer they share is encoded once per binding (``Dispatcher``).  The decision of
when to answer follows docs/protocol.md §4, in ``Watches.watch``.

Runs on the event loop of an HTTP process; ``Notifier`` calls reach it from any
thread (the change feed's, the blocking pool's).

A change before a watcher's progress update period is over wakes nobody: waiting
for its period, a watcher waits for the job's end alone, and its timer, at the end of
its period, looks whether the job changed meanwhile (``JobWatch.quiet``): a change
touches no quiet watcher.  So stopJob on a job with 10 000 watchers (RUNNING →
STOPPING, then its end) wakes each of them once, not twice, and a job reporting
progress often does not wake its watchers at each report.

Waking many watchers at once pauses Python's cyclic garbage collector until each has
taken its first step (for an ended job: sent its answer).  A full collection in a
process holding 5 000 watches takes 0.1–0.6 s, and one is often due just then
(benchmarks/longpoll.py saw one in the middle of every other burst of answers, in
this tree and in older ones); after the burst, with those watches gone, it is cheaper.

One user's held watches are counted per HTTP process (``Watches.held``): past
``max_held_watches`` calls, or ``max_held_watched_ids`` ids watched together, the next
answers ``QuotaExceededFault`` at once (docs/protocol.md §14).  And a watch answered at
its ``maximumPollingPeriod`` answers up to ``JITTER`` of it later (at most
``JITTER_MAX_S``), so that many watches that arrived together do not all end, and come
back, in the same millisecond.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import gc
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar, cast

from ..protocol import states
from ..protocol.faults import QuotaExceededFault
from ..store import WouldWait
from ..store.changes import MISSED
from ..support import metrics
from ..support.blocking import blocking
from .soon import soon

if TYPE_CHECKING:
    from ..engine.notifier import Notifier
    from ..protocol.types import Job
    from ..store import JobRecord, JobStore

log = logging.getLogger(__name__)

#: A snapshot older than this (s) is read again before a watch answers it without a
#: change (at maximumPollingPeriod), in case a change notification was lost.
STALE_AFTER = 1.0
#: The synchronous form re-reads its job this often (s) while nothing changes.
RUN_RECHECK = 5.0
#: Waking at least this many watchers at once pauses the garbage collector meanwhile.
BURST = 100
#: A watch answered at its maximumPollingPeriod answers up to this share of it later,
#: at random, and at most JITTER_MAX_S later (docs/protocol.md §4).
JITTER = 0.02
JITTER_MAX_S = 0.25

#: The context the watches' timers run in: their callbacks read no context variable, and
#: a timer given none copies the current one (about 100 bytes a held watch).
_TIMERS = contextvars.Context()
#: What ``Watches.held`` answers when nothing bounds a user's watches (accounts off):
#: no generator and its context manager held with every watch (about 420 bytes).
_UNCOUNTED = contextlib.nullcontext()

_T = TypeVar("_T")
#: What a watcher's future is answered: a snapshot, or None (its time is up, or closing).
Answer = asyncio.Future["Snapshot | None"]


class Snapshot:
    """The job as one read saw it (``rec`` None: no such job)."""

    __slots__ = ("rec", "read_at", "view", "changes")

    def __init__(self, rec: JobRecord | None) -> None:
        self.rec = rec
        self.read_at = time.monotonic()
        self.view: Job | None = None  # the Job answer built once for every watcher it wakes
        self.changes = 0  # its JobWatch's count of changes, this one's included

    @property
    def final(self) -> bool:
        return self.rec is None or self.rec.status in states.TERMINAL


#: What a watcher who may not see the job is answered: no job (UNKNOWN).
UNSEEN = Snapshot(None)


class JobWatch:
    """The waiters of one job, and the last snapshot of it."""

    def __init__(self, watches: Watches, job_id: str) -> None:
        self.watches = watches
        self.job_id = job_id
        self.snapshot: Snapshot | None = None
        self.members = 0
        self.changes = 0  # snapshots published that differ from the one before
        self._waiters: set[Answer] = set()  # waiting for a change
        self._quiet: dict[Answer, _QuietWait] = {}  # waiting for the end
        self._readers: set[asyncio.Future[Snapshot]] = set()  # waiting for a read
        self._groups: set[_Group] = set()  # watchJobs calls that watch this job among others
        self._reading = False
        self._again = False

    def changed(self) -> None:
        """The job changed: read it (once more after a read under way)."""
        if self._reading:
            self._again = True
            return
        try:
            if self._read_here():
                return
        except Exception:  # (its waiters answer the failure)
            return
        self._read_later()

    def _read_later(self) -> None:
        """A task reads the job (in the pool where the store may wait)."""
        self._reading = True
        asyncio.get_running_loop().create_task(self._read())

    def _read_here(self) -> bool:
        """On SQLite, read the job and publish it here, on the loop: no task, no future,
        no turn of the loop between the change and the read (the same peek the task's
        read runs on the loop under ``store.at_once()``).  False where the read would
        wait (not in WAL mode; then the task reads); a failure is every waiter's answer,
        and raised."""
        store = self.watches.store
        if not store.answers_at_once:
            return False
        try:
            with store.at_once():
                rec = store.peek(self.job_id)
        except WouldWait:
            return False
        except Exception as exc:  # the database is away: every waiter answers it
            self.failed(exc)
            raise
        self._publish(Snapshot(rec))
        return True

    async def _read(self) -> None:
        try:
            while True:
                self._again = False
                store = self.watches.store
                rec = await soon(store, store.peek, self.job_id)  # (a read: never waits)
                self._publish(Snapshot(rec))
                if not self._again:
                    break
        except Exception as exc:  # the database is away: every waiter answers a fault
            self.failed(exc)
        finally:
            self._reading = False

    def failed(self, exc: BaseException) -> None:
        """A read failed (the database is away): every waiter answers ``exc``."""
        waiters = self._waiters | self._readers | set(self._quiet)
        self._waiters, self._readers, self._quiet = set(), set(), {}
        for fut in waiters:
            if not fut.done():
                fut.set_exception(exc)
        for group in list(self._groups):
            group.failed(exc)

    def _publish(self, snapshot: Snapshot) -> None:
        previous, self.snapshot = self.snapshot, snapshot
        _resolve(self._readers, snapshot)
        self._readers = set()
        if previous is None or snapshot.final or _state(previous) != _state(snapshot):
            self.changes += 1
            snapshot.changes = self.changes
            self.wake(snapshot)  # a read that finds nothing new wakes no watcher
        else:
            snapshot.changes = self.changes

    def wake(self, value: Snapshot | None = None) -> None:
        """Answer the waiters ``value``: a change, the job's end, or None (closing).
        Before its end, a watcher waiting quietly is left alone: its timer, at its
        period's end, sees the change then (``_QuietWait``)."""
        waiters, self._waiters = self._waiters, set()
        if value is None or value.final:
            waiters.update(self._quiet)
            self._quiet = {}
        _resolve(waiters, value)
        for group in self._groups:
            group.changed(self, value)
        if len(waiters) + len(self._groups) >= BURST:
            _pause_collection()  # (after: its end is queued behind their steps)

    async def quiet(self, than: Snapshot, earliest: float, latest: float) -> Snapshot | None:
        """For a watcher in its progress update period (``than``: the snapshot it has
        seen; ``earliest``, ``latest``: loop times): the job's final snapshot the moment
        it comes; else None at ``earliest`` if the job has changed since ``than``
        (before or meanwhile), at its first change after ``earliest``, or at ``latest``."""
        if self.snapshot is not None and self.snapshot.final:
            return self.snapshot
        if self.watches.closed:
            return None
        fut: Answer = asyncio.get_running_loop().create_future()
        wait = self._quiet[fut] = _QuietWait(fut, self, than.changes, earliest, latest)
        try:
            found = await fut
        finally:
            wait.timer.cancel()
            self._quiet.pop(fut, None)
            self._waiters.discard(fut)  # (there once its period is over)
        return found if found is not None and found.final else None

    async def next(self, than: Snapshot, timeout: float) -> Snapshot | None:
        """A snapshot newer than ``than``; None after ``timeout`` s or when closing."""
        if self.snapshot is not than and self.snapshot is not None:
            return self.snapshot
        if self.watches.closed:
            return None
        loop = asyncio.get_running_loop()
        fut: Answer = loop.create_future()
        self._waiters.add(fut)
        timer = loop.call_later(max(0.0, timeout), _expire, fut, context=_TIMERS)
        try:
            found = await fut
        finally:
            timer.cancel()
            self._waiters.discard(fut)
        return found if found is not None and found is not than else None

    def next_read(self) -> asyncio.Future[Snapshot]:
        """The snapshot the read under way publishes (or its failure)."""
        fut: asyncio.Future[Snapshot] = asyncio.get_running_loop().create_future()
        self._readers.add(fut)
        return fut

    def stale(self, max_age: float) -> bool:
        """No snapshot, or one older than ``max_age`` s (and not closing)."""
        snap = self.snapshot
        return snap is None or (
            not self.watches.closed and time.monotonic() - snap.read_at > max_age
        )

    async def current(self, max_age: float) -> Snapshot:
        """The last snapshot, read (again) when there is none or it is older than
        ``max_age`` s."""
        snap = self.snapshot
        if snap is not None and (self.watches.closed or time.monotonic() - snap.read_at <= max_age):
            return snap
        if self._reading:
            self._again = True  # (read once more after the read under way)
        elif self._read_here():
            return cast(Snapshot, self.snapshot)
        else:
            self._read_later()
        fut: asyncio.Future[Snapshot] = asyncio.get_running_loop().create_future()
        self._readers.add(fut)  # a read always publishes, or raises
        try:
            return await fut
        finally:
            self._readers.discard(fut)


class _QuietWait:
    """One quiet waiter's future and timer.  The timer is set at ``earliest`` (its
    progress update period's end) and decides then: the job has changed since the
    snapshot the waiter has seen (``seen``: its count of changes), so the future is
    answered None now; else it joins the job's waiters (the next change answers it)
    and the timer is set again, at ``latest``.  A change before the period's end
    touches no quiet waiter: stopJob's STOPPING on a job with 5 000 watchers in one
    process moved 5 000 timers (about 0.1 s) just before the job's end, which then
    waited behind them (benchmarks/longpoll.py)."""

    __slots__ = ("future", "job", "seen", "latest", "timer")

    def __init__(
        self, future: Answer, job: JobWatch, seen: int, earliest: float, latest: float
    ) -> None:
        self.future, self.job, self.seen, self.latest = future, job, seen, latest
        self.timer = asyncio.get_running_loop().call_at(
            earliest, self._period_over, context=_TIMERS
        )

    @property
    def moved(self) -> bool:
        """Whether the job has changed since: the wait answers at its period's end."""
        snap = self.job.snapshot
        return snap is not None and snap.changes != self.seen

    def _period_over(self) -> None:
        if self.future.done():
            return
        if self.moved:
            self.future.set_result(None)
        else:  # from now on the job's next change answers it, as any waiter's
            self.job._waiters.add(self.future)
            self.timer = asyncio.get_running_loop().call_at(
                self.latest, _expire, self.future, context=_TIMERS
            )


class _Group:
    """One watchJobs call, among the members of each of its jobs' JobWatch: it notes
    which of them changed and answers by watchJob's rules (docs/protocol.md §4) taken
    over all of them: at once on a job's end; at ``earliest`` (loop time) when one
    changed before it; at the first change after it; else at ``latest`` (None)."""

    __slots__ = ("future", "earliest", "changed_jobs", "timer")

    def __init__(self, earliest: float, latest: float) -> None:
        loop = asyncio.get_running_loop()
        self.future: Answer = loop.create_future()
        self.earliest = earliest
        self.changed_jobs: dict[JobWatch, None] = {}  # in the order they changed
        self.timer = loop.call_at(latest, _expire, self.future, context=_TIMERS)

    def changed(self, job: JobWatch, value: Snapshot | None) -> None:
        """``job`` published a change (``value``), or the process closes (None)."""
        if value is None:
            _expire(self.future)
            return
        self.changed_jobs[job] = None
        if self.future.done():
            return
        loop = asyncio.get_running_loop()
        if value.final or loop.time() >= self.earliest:
            self.future.set_result(value)
        elif len(self.changed_jobs) == 1:  # the first change: answered when the period ends
            self.timer.cancel()
            self.timer = loop.call_at(self.earliest, _settle, self.future, value, context=_TIMERS)

    def failed(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


def _state(snapshot: Snapshot) -> tuple[str, str | None] | None:
    return (snapshot.rec.status, snapshot.rec.progress) if snapshot.rec is not None else None


def _resolve(futures: Iterable[asyncio.Future[_T]], value: _T) -> None:
    for fut in futures:
        if not fut.done():
            fut.set_result(value)


def _expire(fut: Answer) -> None:
    _settle(fut, None)


def _settle(fut: Answer, value: Snapshot | None) -> None:
    if not fut.done():
        fut.set_result(value)


_pauses = [0]


def _latest(arrived: float, maximum_ms: int) -> float:
    """When a watch that arrived at ``arrived`` (loop time) answers without a change:
    ``maximum_ms`` later, and a random jitter of up to 2 % of it (at most 250 ms)."""
    return (
        arrived
        + maximum_ms / 1000
        + random.uniform(0, min(maximum_ms / 1000 * JITTER, JITTER_MAX_S))
    )


def _pause_collection() -> None:
    """The garbage collector off until the event loop has run what is queued now."""
    if _pauses[0] == 0 and not gc.isenabled():
        return  # turned off by someone else: theirs to turn on
    _pauses[0] += 1
    gc.disable()
    asyncio.get_running_loop().call_soon(_resume_collection)


def _resume_collection() -> None:
    _pauses[0] -= 1
    if _pauses[0] == 0:
        gc.enable()


class Watches:
    """All held watches of one HTTP process."""

    def __init__(self, store: JobStore, notifier: Notifier) -> None:
        self.store = store
        self.closed = False
        self._jobs: dict[str, JobWatch] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: collections.deque[str] = collections.deque()
        self._scheduled = False
        self._lock = threading.Lock()
        self._held: dict[str, list[int]] = {}  # user → [calls, ids] of their watches held
        notifier.listen(self._changed, self.close)

    # ------------------------------------------------------------------ per user

    def held(
        self, user: str, ids: int, limits: tuple[int, int]
    ) -> contextlib.AbstractContextManager[None]:
        """One watch call of ``user`` over ``ids`` jobs, counted while it is held;
        QuotaExceededFault at once when it would pass ``limits`` ((calls, ids); 0: no
        limit) in this HTTP process (on the event loop: no lock).  Not counted when
        nothing bounds it."""
        if not any(limits):
            return _UNCOUNTED
        return self._counted(user, ids, limits)

    @contextlib.contextmanager
    def _counted(self, user: str, ids: int, limits: tuple[int, int]) -> Iterator[None]:
        max_calls, max_ids = limits
        counts = self._held.get(user) or [0, 0]
        calls, watched = counts
        if max_calls and calls + 1 > max_calls:
            raise QuotaExceededFault(
                f"you hold {calls} watches in this process of the server already, your "
                f"limit (max_held_watches = {max_calls}); this one was refused",
                hint="Wait until one of your watches answers, or watch many jobs in one "
                "watchJobs call.",
            )
        if max_ids and watched + ids > max_ids:
            raise QuotaExceededFault(
                f"your held watches watch {watched} jobs in this process of the server "
                f"already; {ids} more would pass your limit (max_held_watched_ids = "
                f"{max_ids}); this watch was refused",
                hint="Watch fewer jobs at once, or wait until one of your watches answers.",
            )
        counts = self._held.setdefault(user, [0, 0])
        counts[0] += 1
        counts[1] += ids
        try:
            yield
        finally:
            counts[0] -= 1
            counts[1] -= ids
            if counts[0] <= 0 and self._held.get(user) is counts:
                del self._held[user]

    def held_by(self, user: str) -> tuple[int, int]:
        """(calls, ids) of ``user``'s watches held and counted now (for tests)."""
        calls, ids = self._held.get(user) or (0, 0)
        return calls, ids

    # ------------------------------------------------------------------ waiting

    async def watch(
        self,
        job_id: str,
        update_ms: int,
        maximum_ms: int,
        sees: Callable[[str], bool] | None = None,
    ) -> tuple[Snapshot, bool]:
        """Wait by the rules of docs/protocol.md §4 (periods already clamped): at once on a
        terminal or unknown job (a job whose owner ``sees(owner)`` denies is unknown); else
        at the first change once ``update_ms`` has passed (a change seen earlier is
        answered the moment the period is over), at the latest after ``maximum_ms``.
        Answers ``(snapshot, woken)``: ``woken`` when a change (or the job's end) is what
        is answered, so that every watcher woken by it can share one answer."""
        with metrics.held_watches:  # (in this coroutine: no other one per watch)
            loop = self._enter()
            arrived = loop.time()
            earliest, latest = arrived + update_ms / 1000, _latest(arrived, maximum_ms)
            job = self._join(job_id)
            try:
                snap = await job.current(STALE_AFTER)
                if snap.rec is not None and sees is not None and not sees(snap.rec.owner):
                    return UNSEEN, True
                if snap.final:
                    return snap, True
                seen = _state(snap)  # (status, progress): not final, so the job exists
                changed = False
                while not self.closed:
                    now = loop.time()
                    if (changed and now >= earliest) or now >= latest:
                        break
                    if not changed and now < earliest:  # only the end answers now
                        end = await job.quiet(snap, earliest, latest)
                        if end is not None:
                            return end, True
                        if job.snapshot is not None and job.snapshot.changes != snap.changes:
                            snap, changed = job.snapshot, True
                        continue
                    newer = await job.next(snap, (earliest if changed else latest) - now)
                    if newer is not None:
                        snap = newer
                        if snap.final:
                            return snap, True
                        changed = changed or _state(snap) != seen
                if not changed:
                    snap = await job.current(STALE_AFTER)  # the last status
                return snap, changed
            finally:
                self._leave(job)

    async def watch_many(
        self,
        job_ids: Sequence[str],
        update_ms: int,
        maximum_ms: int,
        sees: Callable[[str], bool] | None = None,
    ) -> tuple[list[tuple[str, Snapshot]], bool]:
        """watchJobs (docs/protocol.md §14): ``watch``'s rules over distinct ``job_ids``,
        held as one coroutine and one member of each job's JobWatch.  Answers at once
        the jobs that are terminal, unknown or not seen (``UNSEEN``); else the jobs that
        changed, at the first change once ``update_ms`` has passed (changes seen earlier
        the moment it is over, a job's end at once); else, after ``maximum_ms`` or when
        closing, every job as it stands.  Answers ``([(id, snapshot)], woken)`` as
        ``watch`` answers ``(snapshot, woken)``, in the order of ``job_ids``.  The jobs
        without a fresh snapshot are read in one statement (``_read_many``), not one
        ``peek`` each."""
        with metrics.held_watches:  # once for the call, however many jobs it watches
            loop = self._enter()
            arrived = loop.time()
            earliest, latest = arrived + update_ms / 1000, _latest(arrived, maximum_ms)
            jobs = [self._join(job_id) for job_id in job_ids]
            group: _Group | None = None
            try:
                await self._current(jobs, STALE_AFTER)

                def seen(job: JobWatch) -> tuple[str, Snapshot]:
                    snap = job.snapshot
                    assert snap is not None  # _current read it
                    if snap.rec is not None and sees is not None and not sees(snap.rec.owner):
                        return job.job_id, UNSEEN
                    return job.job_id, snap

                ended = [found for found in map(seen, jobs) if found[1].final]
                if ended:
                    return ended, True
                if self.closed:
                    return [seen(job) for job in jobs], False
                group = _Group(earliest, latest)  # (no await since the read: no change missed)
                for job in jobs:
                    job._groups.add(group)
                woken = await group.future  # a change's snapshot; None: its time is up
                if woken is not None and group.changed_jobs:
                    return [seen(job) for job in group.changed_jobs], True
                await self._current(jobs, STALE_AFTER)  # every job as it stands
                return [seen(job) for job in jobs], False
            finally:
                if group is not None:
                    group.timer.cancel()
                    for job in jobs:
                        job._groups.discard(group)
                for job in jobs:
                    self._leave(job)

    async def until_final(self, job_id: str) -> Snapshot:
        """Wait until the job is finished, deleted or gone (the synchronous form)."""
        self._enter()
        job = self._join(job_id)
        try:
            snap = await job.current(0)
            while not snap.final and not self.closed:
                snap = await job.next(snap, RUN_RECHECK) or await job.current(RUN_RECHECK)
            return snap
        finally:
            self._leave(job)

    async def _current(self, jobs: list[JobWatch], max_age: float) -> None:
        """Each of ``jobs`` with a snapshot at most ``max_age`` s old: those without one
        and no read under way are read in one statement; the others' reads awaited."""
        stale = [job for job in jobs if job.stale(max_age)]
        if not stale:
            return
        under_way = [job.next_read() for job in stale if job._reading]
        idle = [job for job in stale if not job._reading]
        if idle:
            await self._read_many(idle)
        if under_way:
            await asyncio.gather(*under_way)

    async def _read_many(self, jobs: list[JobWatch]) -> None:
        """Read ``jobs`` (none with a read under way) in one statement and publish each
        snapshot; a change told meanwhile is read again, as ``JobWatch.changed`` does."""
        for job in jobs:
            job._reading, job._again = True, False
        try:
            found = await blocking(self.store.peek_many, [job.job_id for job in jobs])
        except Exception as exc:
            for job in jobs:
                job._reading = False
                job.failed(exc)
            raise
        for job in jobs:
            job._reading = False
            job._publish(Snapshot(found.get(job.job_id)))
            if job._again:
                job.changed()

    def waiting(self) -> int:
        """How many watches of a job are held (for tests): a watchJobs holds one per job."""
        return sum(job.members for job in list(self._jobs.values()))

    # ------------------------------------------------------------------ changes

    def _changed(self, job_id: str) -> None:
        """From any thread: the job changed (``MISSED``: any may have).  One hop to the
        loop per burst."""
        if job_id == MISSED:  # the feed was cut off: every watched job is read again
            ids = list(self._jobs)
        elif job_id in self._jobs:
            ids = [job_id]
        else:
            return  # nobody waits here; a watch that starts later reads it anyway
        if self._loop is None or not ids:
            return
        with self._lock:
            self._pending.extend(ids)
            if self._scheduled:
                return
            self._scheduled = True
        if _running_loop() is self._loop:  # the feed receives on the loop: no wake-up
            self._loop.call_soon(self._deliver)
        else:
            self._loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._lock:
            ids = set(self._pending)
            self._pending.clear()
            self._scheduled = False
        for job_id in ids:
            job = self._jobs.get(job_id)
            if job is not None:
                job.changed()

    def close(self) -> None:
        """From any thread: the process is shutting down; every watch answers now."""
        self.closed = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        for job in list(self._jobs.values()):
            job.wake(None)  # (readers get the read they wait for)

    # ------------------------------------------------------------------ membership

    def _enter(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        self._loop = loop
        return loop

    def _join(self, job_id: str) -> JobWatch:
        job = self._jobs.get(job_id)
        if job is None:
            job = self._jobs[job_id] = JobWatch(self, job_id)
        job.members += 1
        return job

    def _leave(self, job: JobWatch) -> None:
        job.members -= 1
        if job.members == 0 and self._jobs.get(job.job_id) is job:
            del self._jobs[job.job_id]


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
