"""What SQLite needs that PostgreSQL does not: one file shared by a node's processes.

A node serves HTTP in several processes and runs its jobs from one more, all writing
to one SQLite file.  SQLite lets one writer in at a time, across processes, and
answers "database is locked" to the others.  Its own busy handler sleeps 1, 2, 5,
10… ms between tries, longer than the writes of the node's processes take, so the
store waits here instead (``retry_while_busy``, with ``PRAGMA busy_timeout=0``): a
write waits ``BUSY_TIMEOUT_S`` in all, for this process's turn (``WriterTurns``)
and for the database's lock, then raises ``StoreUnavailable``.  The connections run
in WAL mode, so that readers never wait for the writer, and the file is readable by
the server's user alone: it holds every user's requests and results.
"""

import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

from sqlalchemy import exc as sa_exc

from .unavailable import StoreUnavailable, WouldWait

log = logging.getLogger(__name__)

#: How long an SQLite write waits in all for this process's turn and the database's lock (s).
BUSY_TIMEOUT_S = 10.0
#: How often a node's WalCheckpointer copies the WAL into the database (s).
CHECKPOINT_PERIOD_S = 0.25
#: WAL frames (pages written) past which a checkpoint also starts the WAL over
#: (``WalCheckpointer``): 16 MB of 4 kB pages.
RESTART_ABOVE_FRAMES = 4096
#: How long such a checkpoint waits for the writer and for the readers of the WAL (ms):
#: writers wait for it meanwhile, and it is tried again at the next period if they are
#: not done by then.
RESTART_WAIT_MS = 20
#: The size a WAL file is cut back to when it is started over (bytes; SQLite's
#: ``journal_size_limit``): after a burst, its disk space is given back.
WAL_SIZE_LIMIT = 64 * 1024 * 1024
#: How long opening an SQLite store waits for the write lock, to make the schema (s).
SCHEMA_WAIT_S = 30.0

T = TypeVar("T")


def write_deadline() -> float:
    """When a write starting now gives up waiting (``time.monotonic``)."""
    return time.monotonic() + BUSY_TIMEOUT_S


_this_thread = threading.local()  # .at_once: None, QUICK or WROTE (``at_once``)
QUICK, WROTE = "quick", "wrote"


class _AtOnce:
    """``with at_once():`` (a class, not a generator: the event loop enters one for each
    call's store work)."""

    __slots__ = ()

    def __enter__(self) -> None:
        _this_thread.at_once = QUICK

    def __exit__(self, *exc: object) -> None:
        _this_thread.at_once = None


_AT_ONCE = _AtOnce()


def at_once() -> AbstractContextManager[None]:
    """The store work of this thread within, with no wait for a lock until it has
    written: where it would wait for this process's turn to write or for the database's
    lock first, it raises WouldWait instead, and nothing of it was written.  An HTTP
    process's event loop runs a call's small store work so (``operations.soon``), and
    hands the work to its pool when it would wait.  Once a statement has written, the
    work waits as anywhere else: what is written must not be written twice."""
    return _AT_ONCE


def _instead_of_waiting() -> None:
    """Raise WouldWait where ``at_once`` forbids waiting now."""
    if getattr(_this_thread, "at_once", None) == QUICK:
        raise WouldWait


def written() -> None:
    """This thread's work wrote: under ``at_once``, from now on it waits as usual."""
    if getattr(_this_thread, "at_once", None) == QUICK:
        _this_thread.at_once = WROTE


def retry_while_busy(
    action: Callable[[], T], deadline: float | None = None, refused: BaseException | None = None
) -> T:
    """``action()``, tried again while SQLite answers "database is locked" (another
    process holds the write lock).  The tries come after 50 µs, doubling up to 2 ms,
    until ``deadline`` (time.monotonic), by default BUSY_TIMEOUT_S after the first
    refusal; ``at_once``, WouldWait instead of the first wait.  ``action`` may run on
    the DBAPI connection or through SQLAlchemy, which wraps the driver's error in its own.
    ``refused``: the "locked" error of a try the caller made itself (the next try waits)."""
    delay = 0.00005
    error = refused
    while True:
        if error is None:
            try:
                return action()
            except (sqlite3.OperationalError, sa_exc.OperationalError) as failed:
                if not _busy(getattr(failed, "orig", failed)):
                    raise
                error = failed
        _instead_of_waiting()
        now = time.monotonic()
        deadline = deadline or now + BUSY_TIMEOUT_S
        if now > deadline:
            raise error
        time.sleep(delay)
        delay = min(delay * 2, 0.002)
        error = None


def _busy(error: BaseException) -> bool:
    return isinstance(error, sqlite3.OperationalError) and (
        "locked" in str(error) or "busy" in str(error)
    )


def begin_immediate(execute: Callable[[str], Any], deadline: float | None = None) -> None:
    """Begin an SQLite transaction of several statements, with the write lock taken at
    once: a read-then-write in it (the ``max_queued`` check) is atomic across processes."""
    retry_while_busy(lambda: execute("BEGIN IMMEDIATE"), deadline)


class PatientCursor:
    """A DBAPI cursor whose ``execute`` waits out SQLite's lock until ``deadline``.
    (Its first try is the cursor's own call, not a closure through ``retry_while_busy``:
    every statement of the store runs here.)"""

    __slots__ = ("cursor", "deadline")

    def __init__(self, cursor: Any, deadline: float):
        self.cursor, self.deadline = cursor, deadline

    def execute(self, sql: str, args: Any = ()) -> Any:
        cursor = self.cursor
        try:
            return cursor.execute(sql, args)
        except sqlite3.OperationalError as error:
            if not _busy(error):
                raise
            refused = error
        return retry_while_busy(lambda: cursor.execute(sql, args), self.deadline, refused)

    def __getattr__(self, name: str) -> Any:  # fetchall, fetchone, rowcount…
        return getattr(self.cursor, name)


class WriterTurns:
    """This process's writers, one at a time: SQLite would refuse all but one of them
    anyway, and each refused one would retry on its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.give = self._lock.release  # (``take``'s end)

    def take(self, deadline: float) -> None:
        """Wait for this process's turn to write until ``deadline``: requests queued
        behind a locked database each fail at their own deadline, not one after the
        other.  ``give()`` ends it."""
        if not self._lock.acquire(blocking=False):
            _instead_of_waiting()
            if not self._lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise StoreUnavailable(f"the database stayed locked for {BUSY_TIMEOUT_S:g} s")

    @contextmanager
    def turn(self, deadline: float) -> Iterator[None]:
        """``with``: this process's turn to write (``take``), given back at the end."""
        self.take(deadline)
        try:
            yield
        finally:
            self.give()


class _Own:
    """One thread's connection (``ThreadConnections``), closed with its holder:
    ``connection`` as SQLAlchemy made it, ``driver`` the sqlite3 connection within, which
    the statements use (each of the wrapper's methods is a Python call more)."""

    __slots__ = ("connection", "driver", "__weakref__")

    def __init__(self, connection: Any) -> None:
        self.connection: Any = connection
        self.driver: Any = getattr(connection, "dbapi_connection", None) or connection

    def close(self) -> None:
        self.driver = None
        connection, self.connection = self.connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception:  # (closing a broken connection: nothing to keep)
                pass

    def __del__(self) -> None:  # its thread ended
        self.close()


class ThreadConnections:
    """Each thread's own connection to the SQLite file, kept from one statement to the
    next (``Database._cursor``): taking a connection from SQLAlchemy's pool and giving
    it back cost about as much as the hot path's statements themselves.  A thread's
    connection is closed when the thread ends, or by ``close``; ``connect`` makes one
    (set up as the pool's are, but no longer the pool's)."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._mine = threading.local()
        self._all: weakref.WeakSet[_Own] = weakref.WeakSet()
        self._lock = threading.Lock()

    def get(self) -> Any:
        """This thread's connection (the driver's), made at its first statement."""
        own = getattr(self._mine, "own", None)
        if own is None or own.connection is None:
            own = self._mine.own = _Own(self._connect())
            with self._lock:
                self._all.add(own)
        return own.driver

    def drop(self) -> None:
        """Close this thread's connection (it may be broken); the next is new."""
        own = getattr(self._mine, "own", None)
        if own is not None:
            own.close()
            self._mine.own = None

    def close(self) -> None:
        """Close every thread's connection (the store closes)."""
        with self._lock:
            owns = list(self._all)
        for own in owns:
            own.close()


def set_up_connection(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
    """Each new connection (SQLAlchemy's ``connect`` event): WAL, no busy handler of
    SQLite's own, foreign keys on, and no implicit transactions."""
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=0")  # retry_while_busy waits instead
    cur.execute("PRAGMA foreign_keys=ON")  # a job's events go with it
    cur.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")  # (WalCheckpointer)
    cur.close()
    # each statement commits itself; several statements that belong together are
    # wrapped in BEGIN IMMEDIATE … COMMIT (Database._write)
    dbapi_connection.isolation_level = None


def no_checkpoint_at_commit(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
    """A connection of a node's process (SQLAlchemy's ``connect`` event): its commits
    leave the WAL to the node's ``WalCheckpointer``."""
    dbapi_connection.execute("PRAGMA wal_autocheckpoint=0")


class WalCheckpointer(threading.Thread):
    """Copies the WAL into the database file every CHECKPOINT_PERIOD_S, in a thread of
    the node's main process, so that no commit waits for it.

    By default SQLite checkpoints at the commit that takes the WAL past 1 000 pages:
    that commit waits while the WAL is copied and the file synced: after a large
    result, most of a second of the job before it is seen SUCCEEDED, and any small
    commit could be the one that pays for the writes before it.
    Here the checkpoints are PASSIVE: they never wait for, nor hold up, a reader or a
    writer.  The WAL is started over by the first write after a checkpoint that copied
    all of it; under steady writes (a few hundred commits a second) some commit always
    came while the checkpoint ran, so the WAL was never started over: it grew by every
    commit's pages, about 150 kB a job (2 GB after 15 000 jobs, in minutes), and the
    node's every statement grew slower with it (a job cycle's CPU 1.6× in 20 s at 8
    clients).  So once the WAL holds more than ``restart_above`` frames, a RESTART
    checkpoint follows the PASSIVE one: it copies what is left (little, just after it)
    and waits up to RESTART_WAIT_MS for the readers of the WAL, writers waiting for it
    meanwhile, so that the next write starts the WAL over (and cuts its file back to
    WAL_SIZE_LIMIT)."""

    def __init__(
        self, path: str, period: float | None = None, restart_above: int = RESTART_ABOVE_FRAMES
    ) -> None:
        super().__init__(name="wal-checkpointer", daemon=True)
        self.path = path
        self.period = CHECKPOINT_PERIOD_S if period is None else period
        self.restart_above = restart_above
        self.stopped = threading.Event()
        self.checkpoints = 0  # the ones that copied pages (for the tests)
        self.restarts = 0  # the RESTART ones that were done in time (for the tests)

    def run(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        failing = False
        try:
            conn.execute("PRAGMA wal_autocheckpoint=0")
            conn.execute(f"PRAGMA busy_timeout={RESTART_WAIT_MS}")  # (PASSIVE never waits)
            while not self.stopped.wait(self.period):
                try:
                    _busy, pages, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if pages > self.restart_above:
                        busy, pages, copied = conn.execute(
                            "PRAGMA wal_checkpoint(RESTART)"
                        ).fetchone()
                        self.restarts += not busy
                except sqlite3.Error as exc:
                    if not failing:  # once per outage, not every period
                        log.warning("the WAL checkpoint of %s failed: %s", self.path, exc)
                    failing = True
                    continue
                failing = False
                if copied > 0 and pages == copied:
                    self.checkpoints += 1
        finally:
            conn.close()

    def stop(self) -> None:
        self.stopped.set()
        self.join(CHECKPOINT_PERIOD_S + 30)


def make_private_file(path: str) -> None:
    """The SQLite file readable by the server's user alone (0600; SQLite gives its
    journal and WAL files the database's mode), in a folder of its own (0700) when the
    server creates it: it holds every user's requests and results."""
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        os.makedirs(folder, mode=0o700, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    if os.stat(path).st_mode & 0o077:
        try:
            os.chmod(path, 0o600)
        except OSError as exc:  # not the owner: say so, and serve
            log.warning(
                "the database %s is readable by other users and cannot be made private: %s",
                path,
                exc,
            )
