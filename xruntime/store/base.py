"""What the rest of xruntime knows of the job store: a record and an interface.

Every method that changes a job is one short transaction guarded on the job's current
state, and answers whether it won; callers never read-modify-write a job themselves.
Time stamps are integer milliseconds since the epoch, on the database's clock
(``clock.now_ms``).
"""
from dataclasses import dataclass
from typing import Iterable, Optional, Protocol


class StoreUnavailable(Exception):
    """The database cannot be reached or written for now (SQLite locked past the busy
    timeout, read-only or full; PostgreSQL restarting, failing over or refusing
    connections).  Nothing is wrong with the request: the same call may succeed in a
    moment.  Every store method raises it, and only it, for such conditions."""


from .clock import now_ms  # noqa: E402,F401  (the store's clock, for the rest of xruntime)


@dataclass
class JobRecord:
    id: str
    service: str
    operation: str
    fetch_type: str
    status: str
    request: str = ""                    # JSON text (codec form)
    result: Optional[str] = None         # JSON text of the response
    fault: Optional[str] = None          # JSON text of the fault
    progress: Optional[str] = None       # JSON text of the JobProgress
    queued_at: int = 0
    started_at: Optional[int] = None
    finished_at: Optional[int] = None
    first_fetched_at: Optional[int] = None
    attempts: int = 0
    node: Optional[str] = None
    lease_until: Optional[int] = None
    queueing_timeout: Optional[int] = None      # ms asked by the request, if any
    computation_timeout: Optional[int] = None   # ms asked by the request, if any
    owner: str = ""                      # the user who started it ("": anonymous)
    not_before: Optional[int] = None     # waiting for a retry until then (ms)
    retries: int = 0                     # retries planned so far
    parent_id: Optional[str] = None      # a child job's parent (docs/protocol.md §13)
    child_stage: Optional[int] = None    # a child: the parent's run_children it belongs to
    child_index: Optional[int] = None    # a child: its place in that run_children
    waiting_for: Optional[int] = None    # a parent waiting for the children of this stage
    fail_fast: int = 0                   # a waiting parent: one child failing ends the wait

    def elapsed_ms(self, now: int) -> int:
        end = self.finished_at if self.finished_at is not None else now
        return max(0, end - self.queued_at)


@dataclass
class FinishedChild:
    """How a child job ended, as its parent is given it: ``result`` in the stored form
    (bytes, ``store.payload``), ``fault`` as JSON text."""
    id: str
    stage: int
    index: int
    service: str
    operation: str
    status: str
    result: Optional[bytes]
    fault: Optional[str]
    finished_at: Optional[int]


@dataclass(frozen=True)
class QueueLimit:
    """A limit the children of one service must fit in (docs/protocol.md §15): at most
    ``max_queued`` jobs queued (of ``scope``'s service, or all when None), and at most
    ``owner_max_queued`` of the owner's in that service (0: no such limit)."""
    service: str
    max_queued: int
    scope: Optional[str]
    owner_max_queued: int


@dataclass(frozen=True)
class QueueFull:
    """``suspend``'s answer when the children would take the queue past a limit:
    the owner's own (``own``) or the queue's, ``limit`` jobs of ``service``."""
    service: str
    limit: int
    own: bool


@dataclass(frozen=True)
class Run:
    """One run of a job: the node that took it and the attempt it counted.  Every
    write of the run (progress, outcome, retry, hand-back, children) names it and is
    refused once the job is no longer that run's: a node whose lease ran out while its
    write was on the way changes nothing of the run another node took over."""
    node: str
    attempt: int


@dataclass
class Recovered:
    """A job found running on a dead node: re-queued, or failed past max_attempts."""
    id: str
    requeued: bool
    attempts: int


class JobStore(Protocol):
    def create(self, job: JobRecord, max_queued: int, scope: Optional[str] = None,
               owner_max_queued: int = 0) -> bool:
        """Insert a QUEUING job; False when ``max_queued`` jobs are queued already
        (of service ``scope`` only, when given), or ``owner_max_queued`` of the job's
        owner and service."""

    def count_queued(self, service: str, owner: str) -> int:
        """How many jobs of ``owner`` and ``service`` are queued."""

    def stored_bytes(self, owner: str) -> int:
        """The bytes the payloads of ``owner``'s stored jobs take."""

    def get(self, job_id: str, owner: Optional[str] = None,
            max_result_bytes: Optional[int] = None) -> Optional[JobRecord]:
        """The whole job (only if it belongs to ``owner``, when given); with
        ``max_result_bytes``, ``payload.TooLarge`` when its result's text is longer."""

    def peek(self, job_id: str) -> Optional[JobRecord]:
        """Like get, without request, result and fault."""

    def claim(self, node: str, now: int, lease_ms: int, services: Optional[Iterable[str]] = None,
              running_limits: tuple = ()) -> Optional[JobRecord]:
        """Move the oldest QUEUING job to RUNNING on ``node`` (the oldest whose owner is
        under ``running_limits`` for its service); None when none may start."""

    def set_progress(self, job_id: str, progress: str) -> bool: ...

    def request_stop(self, job_id: str) -> bool:
        """RUNNING → STOPPING."""

    def finish(self, job_id: str, status: str, now: int, *, result: Optional[str] = None,
               fault: Optional[str] = None, from_states=("RUNNING", "STOPPING")) -> bool:
        """An active job → SUCCEEDED (with result) or FAILED (with fault)."""

    def mark_deleted(self, job_id: str) -> bool:
        """RUNNING/STOPPING → DELETED (the worker still has to let go)."""

    def erase(self, job_id: str, statuses: Iterable[str]) -> bool:
        """Remove the record if it is in one of ``statuses``."""

    def mark_fetched(self, job_id: str, now: int) -> None:
        """Stamp the first fetch (later fetches keep the first stamp)."""

    def hand_back(self, job_id: str, node: str) -> bool:
        """A running job back to QUEUING, untouched, its attempt not counted."""

    def renew_leases(self, node: str, until: int, job_ids: Iterable[str]) -> list:
        """Extend the leases of the jobs ``job_ids`` that run on ``node`` (those its
        worker slots hold: a job no slot holds must let its lease run out, so that it
        is recovered); answers [(id, status)] of them."""

    def recover(self, node: Optional[str], now: int, max_attempts: int,
                fault_for) -> list:
        """Re-queue (or fail past ``max_attempts``) jobs left running by a dead node:
        those of ``node``, or with ``node=None`` those whose lease ran out."""

    def fail_timed_out_queued(self, now: int, default_timeout_ms: int, fault: str) -> list: ...

    def counts_by_status(self, owner: Optional[str] = None) -> dict: ...

    def counts_by_service(self) -> dict:
        """{(service, status): count} of every stored job."""

    def busy_workers(self, node: str) -> int:
        """Worker slots of ``node`` that hold a job now."""

    def erase_expired(self, now: int, unfetched_ms: int, fetched_ms: int, limit: int,
                      services: Optional[Iterable[str]] = None,
                      exclude: Optional[Iterable[str]] = None) -> int: ...

    def close(self) -> None: ...
