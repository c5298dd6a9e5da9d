"""What the job store and the rest of xruntime hand each other: plain records.

A job travels as a ``JobRecord``, a copy of its row taken by one read; changing a
job is asking the store (``sql.JobStore``), which guards the change on the
job's current state, never writing a record back.  The other records are the small
arguments and answers of the store's methods.  Time stamps are integer milliseconds
since the epoch, on the database's clock (``clock.now_ms``); statuses are
``protocol.states.Status`` values, as stored.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .result_files import Located

if TYPE_CHECKING:
    from ..payload.stream import Source


@dataclass
class JobRecord:
    """A job as stored (docs/protocol.md §3), its payloads as JSON text."""

    id: str
    service: str
    operation: str
    fetch_type: str
    status: str
    request: str = ""  # JSON text (codec form)
    result: str | None = None  # JSON text of the response
    # the response in the store's form, read by ranges (``store.get(stored_result=True)``:
    # a ``result_reader.ResultReader``)
    stored_result: "Source | None" = None
    fault: str | None = None  # JSON text of the fault
    progress: str | None = None  # JSON text of the JobProgress
    queued_at: int = 0
    started_at: int | None = None
    finished_at: int | None = None
    first_fetched_at: int | None = None
    attempts: int = 0
    node: str | None = None
    lease_until: int | None = None
    queueing_timeout: int | None = None  # ms asked by the request, if any
    computation_timeout: int | None = None  # ms asked by the request, if any
    owner: str = ""  # the user who started it ("": anonymous)
    not_before: int | None = None  # waiting for a retry until then (ms)
    retries: int = 0  # retries planned so far
    parent_id: str | None = None  # a child job's parent (docs/protocol.md §13)
    child_stage: int | None = None  # a child: the parent's run_children it belongs to
    child_index: int | None = None  # a child: its place in that run_children
    waiting_for: int | None = None  # a parent waiting for the children of this stage
    fail_fast: int = 0  # a waiting parent: one child failing ends the wait
    callback_url: str | None = None  # where its events are POSTed (docs/protocol.md §14)
    callback_period: int | None = None  # ms between progress events; None: only the end
    result_bound: int = 0  # bytes its result may take at most (its service's bound)

    def elapsed_ms(self, now: int) -> int:
        """How long the job has existed (until it finished, if it has), in ms."""
        end = self.finished_at if self.finished_at is not None else now
        return max(0, end - self.queued_at)


@dataclass
class FinishedChild:
    """How a child job ended, as its parent is given it: ``result`` in the stored form
    (bytes, ``payload.form``), or where its result files hold it (``Located``: a large
    result of a SQLite store), ``fault`` as JSON text."""

    id: str
    stage: int
    index: int
    service: str
    operation: str
    status: str
    result: bytes | Located | None
    fault: str | None
    finished_at: int | None


@dataclass(frozen=True)
class QueueLimit:
    """A limit the children of one service must fit in (docs/protocol.md §15): at most
    ``max_queued`` jobs queued (of ``scope``'s service, or all when None), and at most
    ``owner_max_queued`` of the owner's in that service (0: no such limit)."""

    service: str
    max_queued: int
    scope: str | None
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


@dataclass(frozen=True)
class Room:
    """``[jobs] max_stored_bytes`` as a job's result is stored under it (docs/protocol.md
    §15): what ``owner`` stores and may store (``JobStore.stored_bytes``), less the job's
    own ``bound`` (which its result replaces), and the result itself stay within
    ``limit``.  The finish that stores the result checks it in the same write."""

    owner: str
    bound: int
    limit: int


@dataclass(frozen=True)
class CallbackEvent:
    """One callback to deliver (docs/protocol.md §14), taken from the outbox by a node
    until ``lease_until``: what the job was when the event was written."""

    seq: int
    job_id: str
    job_seq: int
    owner: str
    url: str
    type: str  # "job.finished" or "job.progress"
    status: str
    elapsed: int  # ms
    progress: str | None  # JSON text of the JobProgress
    created_at: int
    attempts: int  # the attempts made before this one


@dataclass(frozen=True)
class CallbackAttempt:
    """How one attempt of a taken event ended, to be written to the store."""

    event: CallbackEvent
    lease: int  # the lease it was taken with: fences the outcome
    message: str  # for the job's history
    due_at: int | None  # due again then; None: delivered or given up (the row goes)


@dataclass
class Recovered:
    """A job found running on a dead node: re-queued, or failed past max_attempts."""

    id: str
    requeued: bool
    attempts: int
