"""The job store: the only place that speaks SQL."""
from .base import (FinishedChild, JobRecord, JobStore, QueueFull, QueueLimit, Recovered, Run, StoreUnavailable,
                   now_ms)
from .sql import SqlJobStore


def open_store(url: str) -> SqlJobStore:
    """The store for a database URL (SQLite or PostgreSQL)."""
    return SqlJobStore(url)


__all__ = ["FinishedChild", "JobRecord", "JobStore", "QueueFull", "QueueLimit", "Recovered", "Run", "StoreUnavailable", "now_ms", "SqlJobStore", "open_store"]
