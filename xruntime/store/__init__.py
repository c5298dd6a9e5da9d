"""The job store: the only package that speaks SQL.

The rest of xruntime uses what is exported here: ``open_store`` for a database URL,
the ``JobStore`` it answers (``sql.JobStore``, the one class, the type every caller
names), the records it takes and gives, ``now_ms`` (the clock that decides between
nodes) and ``StoreUnavailable``.

``JobStore`` (and SQLAlchemy with it) is imported when first asked for, not with the
package: a worker process takes only the records from here, and SQLAlchemy is
~20 MB of every process that imports it (benchmarks/longpoll.py measures the node's
memory).  The stored form of a payload, which the store keeps as bytes, is
``xruntime.payload``.
"""

from typing import TYPE_CHECKING

from .clock import now_ms
from .records import (
    CallbackAttempt,
    CallbackEvent,
    FinishedChild,
    JobRecord,
    QueueFull,
    QueueLimit,
    Recovered,
    Room,
    Run,
)
from .unavailable import StoreFull, StoreUnavailable, WouldWait

if TYPE_CHECKING:
    from .sql import JobStore


def open_store(url: str, background_checkpoints: bool = False) -> "JobStore":
    """The store for a database URL (SQLite or PostgreSQL); ``background_checkpoints``:
    see ``Database``."""
    from .sql import JobStore

    return JobStore(url, background_checkpoints)


def __getattr__(name: str) -> type:
    if name == "JobStore":
        from .sql import JobStore

        return JobStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CallbackAttempt",
    "CallbackEvent",
    "FinishedChild",
    "JobRecord",
    "JobStore",
    "QueueFull",
    "QueueLimit",
    "Recovered",
    "Room",
    "Run",
    "StoreFull",
    "StoreUnavailable",
    "WouldWait",
    "now_ms",
    "open_store",
]
