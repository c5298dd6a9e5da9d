"""The service author's API: a ``Service`` with long operations, child jobs, retries;
and the registry that finds every service.  A service module needs only this package,
``xruntime.protocol`` (types, faults) and ``xruntime.support``."""

from .service import Child, ChildOutcome, JobContext, LongOperation, Operation, RetryLater, Service

__all__ = [
    "Service",
    "JobContext",
    "RetryLater",
    "Child",
    "ChildOutcome",
    "LongOperation",
    "Operation",
]
