"""When the database, not the request, is the trouble: ``StoreUnavailable``.

A locked, read-only or full SQLite file, or a PostgreSQL server restarting, failing
over or cut off, says nothing about the request: the same call may succeed in a
moment, and the client is told to try again (``TemporarilyUnavailableFault``, 503).
A statement the database refuses (a missing table, a syntax error, a broken
constraint) is a bug and stays an internal error.  This module tells the two apart,
in one place for both dialects, and every store method raises ``StoreUnavailable``,
and only it, for the first kind.

A full disk is one of them, with a difference: it passes for small writes as soon as
anything is freed, but a write that needs more room than there is (a job's result) will
fail again however often it is tried.  ``StoreFull`` says so, so that the engine fails
that job instead of waiting for room that may never come (docs/operations.md, "A full
disk").
"""

import errno
from contextlib import AbstractContextManager
from types import TracebackType


class StoreUnavailable(Exception):
    """The database cannot be reached or written for now (SQLite locked past the busy
    timeout, read-only or full; PostgreSQL restarting, failing over or refusing
    connections).  Nothing is wrong with the request: the same call may succeed in a
    moment.  Every store method raises it, and only it, for such conditions."""


class WouldWait(Exception):
    """Raised in place of a wait, in work run ``at_once`` (``sqlite.at_once``): the
    store would have waited for a lock before it wrote anything.  Nothing is wrong and
    nothing was written: the caller runs the same work again where it may wait."""


class StoreFull(StoreUnavailable):
    """The database's disk (or a PostgreSQL server's) is full: a small write may pass
    once anything is freed; the write that needed the room may never."""


#: errno values of a write refused for lack of room (a full disk, a disk quota)
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def is_full(error: BaseException) -> bool:
    """Whether ``error`` (or the driver's error under it) says the disk is full."""
    import sqlite3

    from sqlalchemy import exc as sa_exc

    cause: BaseException | None = error
    if isinstance(error, sa_exc.DBAPIError):
        cause = error.orig
    if isinstance(cause, OSError) and cause.errno in NO_SPACE:
        return True
    if isinstance(cause, sqlite3.OperationalError):
        return getattr(cause, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or (
            "database or disk is full" in str(cause)
        )
    try:
        import psycopg
    except ImportError:  # pragma: no cover
        return False
    return isinstance(cause, psycopg.errors.DiskFull)  # 53100


#: SQLite's answers when the database, not the statement, is the trouble.
_SQLITE_UNAVAILABLE = (
    "locked",
    "busy",
    "readonly",
    "read-only",
    "disk",
    "full",
    "unable to open",
    "i/o error",
)


def is_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the database cannot be reached or written for now, as
    opposed to a bug in a statement (which stays an internal error)."""
    # imported here: a worker process takes StoreUnavailable from the store package and
    # never loads SQLAlchemy nor sqlite3 (1.1 MB of each worker process, with its
    # library); where a store error arises, both are loaded already
    import sqlite3

    from sqlalchemy import exc as sa_exc

    if isinstance(error, sa_exc.TimeoutError):  # the pool stayed exhausted
        return True
    cause: BaseException | None = error
    if isinstance(error, sa_exc.DBAPIError):
        if error.connection_invalidated:
            return True
        cause = error.orig  # the driver's own error
    if isinstance(cause, sqlite3.OperationalError):
        return any(word in str(cause).lower() for word in _SQLITE_UNAVAILABLE)
    try:
        import psycopg
    except ImportError:  # pragma: no cover
        return False
    # connection lost or refused, server shutting down or starting (57P01, 57P03),
    # disk full (53100); a standby after a failover refuses writes (25006)
    return isinstance(
        cause,
        (psycopg.OperationalError, psycopg.InterfaceError, psycopg.errors.ReadOnlySqlTransaction),
    )


class _AsStoreError:
    """``with unavailable_as_store_error():`` (a class, not a generator: every statement
    of the store enters one, and a generator's context manager costs several times
    more to enter and leave)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:  # (what is not raised in place of ``error`` goes on as it is)
        if not isinstance(error, Exception) or isinstance(error, (StoreUnavailable, WouldWait)):
            return
        if is_full(error):
            raise StoreFull(f"the job store's disk is full: {error}".strip()) from error
        if is_unavailable(error):
            raise StoreUnavailable(f"the job store cannot be reached: {error}".strip()) from error


_AS_STORE_ERROR = _AsStoreError()


def unavailable_as_store_error() -> AbstractContextManager[None]:
    """Raise what ``is_unavailable`` recognises as StoreUnavailable (StoreFull when the
    disk is full), anything else as is (WouldWait too, at once: it is no error of the
    database, and an event loop's store work meets it whenever another writer holds
    the lock)."""
    return _AS_STORE_ERROR
