"""The job store: the only package that speaks SQL.

The rest of xruntime uses what is exported here: ``open_store`` for a database URL,
the ``JobStore`` interface it answers, the records it takes and gives, ``now_ms`` (the
clock that decides between nodes) and ``StoreUnavailable``.
"""

from .clock import now_ms
from .interface import JobStore
from .records import FinishedChild, JobRecord, QueueFull, QueueLimit, Recovered, Run
from .sql import SqlJobStore
from .unavailable import StoreUnavailable


def open_store(url: str) -> SqlJobStore:
    """The store for a database URL (SQLite or PostgreSQL)."""
    return SqlJobStore(url)


__all__ = [
    "FinishedChild",
    "JobRecord",
    "JobStore",
    "QueueFull",
    "QueueLimit",
    "Recovered",
    "Run",
    "StoreUnavailable",
    "now_ms",
    "SqlJobStore",
    "open_store",
]
