"""What the rest of xruntime may ask of the job store: the ``JobStore`` interface.

The operation layer (``jobs``), the engine (supervisor, cleaner) and the operator's
views take a ``JobStore``, never the class behind it (``sql.SqlJobStore``, the one
implementation), so what they rely on is written here, once.  Every method that
changes a job is one short transaction guarded on the job's current state, and
answers whether it won; callers never read-modify-write a job themselves.  A write
of a run names its ``Run`` and changes nothing once the job is no longer that run's.
Every method raises ``StoreUnavailable`` when the database cannot be reached for now.
Time stamps are milliseconds on the database's clock (``clock.now_ms``).
``tests/unit/test_store_interface.py`` checks that ``SqlJobStore`` has every method
with these parameters.
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from .records import (
    ACTIVE_RUNNING,
    CallbackAttempt,
    CallbackEvent,
    FinishedChild,
    JobRecord,
    QueueFull,
    QueueLimit,
    Recovered,
    Run,
)
from .result_files import ResultFile


class JobStore(Protocol):
    """The job store, as the rest of xruntime uses it."""

    # ----------------------------------------------------------------- a job's start

    def create(
        self,
        job: JobRecord,
        max_queued: int,
        scope: str | None = None,
        owner_max_queued: int = 0,
    ) -> bool:
        """Insert a QUEUING job; False when ``max_queued`` jobs are queued already (of
        service ``scope`` only, when given), or ``owner_max_queued`` of the job's owner
        and service (0: no such limit)."""

    def count_queued(self, service: str, owner: str) -> int:
        """How many jobs of ``owner`` and ``service`` are queued."""

    def stored_bytes(self, owner: str) -> int:
        """The bytes the payloads of ``owner``'s stored jobs take, and what their
        unfinished jobs may still store."""

    # ----------------------------------------------------------------- reading a job

    def get(
        self,
        job_id: str,
        owner: str | None = None,
        max_result_bytes: int | None = None,
        stored_result: bool = False,
    ) -> JobRecord | None:
        """The whole job (only if it belongs to ``owner``, when given); with
        ``max_result_bytes``, ``payload.form.TooLarge`` when its result's text is longer;
        with ``stored_result``, its result in the store's form (``stored_result``)."""

    def peek(self, job_id: str) -> JobRecord | None:
        """Like ``get``, without request, result and fault."""

    def peek_many(self, job_ids: Iterable[str]) -> dict[str, JobRecord]:
        """``peek`` of every id in one statement (watchJobs' first read of up to
        ``[server] max_watched_ids`` jobs): id → record, for the jobs that exist."""

    def mark_fetched(self, job_id: str, now: int) -> None:
        """Stamp the first fetch (later fetches keep the first stamp)."""

    # ----------------------------------------------------------------- a run

    def claim(
        self,
        node: str,
        now: int,
        lease_ms: int,
        services: Iterable[str] | None = None,
        running_limits: tuple = (),
        note: str = "running",
        between_owners: bool = False,
    ) -> JobRecord | None:
        """Move the oldest QUEUING job (of ``services``) to RUNNING on ``node``, the oldest
        whose owner is under ``running_limits`` for its service (``between_owners``: of
        the lane, a user's jobs of a service, running fewest); None when none may start."""

    def next_due(self, now: int) -> int | None:
        """When the first job waiting for its retry may run (ms), or None."""

    def set_progress(self, job_id: str, progress: str, run: Run | None = None) -> bool:
        """Store a running job's progress (JSON text)."""

    def request_stop(self, job_id: str, note: str = "stop asked") -> bool:
        """RUNNING → STOPPING."""

    def finish(
        self,
        job_id: str,
        status: str,
        now: int,
        *,
        result: str | bytes | bytearray | memoryview | ResultFile | None = None,
        fault: str | None = None,
        progress: str | None = None,
        from_states: Iterable[str] = ACTIVE_RUNNING,
        note: str | None = None,
        run: Run | None = None,
    ) -> bool:
        """An active job → SUCCEEDED (with result; a ``ResultFile`` only where
        ``result_folder`` is set: taken in by a rename) or FAILED (with fault)."""

    def retry(self, job_id: str, not_before: int, note: str, run: Run | None = None) -> bool:
        """A running job back to QUEUING until ``not_before`` (ms), its retry counted."""

    def hand_back(self, job_id: str, node: str, run: Run | None = None) -> bool:
        """A running job back to QUEUING, untouched, its attempt not counted."""

    def renew_leases(self, node: str, until: int, job_ids: Iterable[str]) -> list[tuple[str, str]]:
        """Extend the leases of the jobs ``job_ids`` that run on ``node``; [(id, status)]
        of them."""

    # ----------------------------------------------------------------- child jobs

    def suspend(
        self,
        parent_id: str,
        node: str,
        stage: int,
        fail_fast: bool,
        children: list[JobRecord],
        progress: str,
        note: str,
        limits: Iterable[QueueLimit] = (),
        run: Run | None = None,
    ) -> str | bool | QueueFull:
        """Store ``children`` and let the parent wait for them, holding no worker: its
        status, False when it no longer runs on ``node``, or the QueueFull of a limit."""

    def resume(
        self,
        node: str,
        now: int,
        lease_ms: int,
        services: Iterable[str] | None = None,
        note: str = "resumed: its child jobs are done",
    ) -> JobRecord | None:
        """Take the oldest waiting parent whose children have all finished, to run on ``node``."""

    def children_of(self, parent_id: str) -> list[FinishedChild]:
        """Every finished child of the parent, in the order it asked for them."""

    def refresh_waiting_progress(
        self, parent_id: str, make_progress: Callable[[int, int, int], str]
    ) -> bool | None:
        """Count a waiting parent's children into its progress; None when it does not wait,
        else whether a child failed while it waits with ``fail_fast``."""

    def stop_children(self, parent_id: str, now: int, fault: str) -> list[str]:
        """Stop the parent's tree: running children to STOPPING, queued ones FAILED; the ids."""

    def delete_children(self, parent_id: str) -> list[str]:
        """Mark the parent's descendants that hold a worker DELETED; their ids."""

    def waiting_timed_out(
        self,
        now: int,
        default_timeout_ms: int,
        services: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
    ) -> list[str]:
        """The ids of parents waiting for their children past their computation timeout."""

    # ----------------------------------------------------------------- a job's end

    def mark_deleted(self, job_id: str) -> bool:
        """RUNNING/STOPPING → DELETED (the worker still has to let go)."""

    def erase(self, job_id: str, statuses: Iterable[str]) -> bool:
        """Remove the record if it is in one of ``statuses``."""

    # ----------------------------------------------------------------- housekeeping

    def recover(
        self, node: str | None, now: int, max_attempts: int, fault_for: Callable[[int], str]
    ) -> list[Recovered]:
        """Re-queue (or fail past ``max_attempts``) jobs left running by a dead node:
        those of ``node``, or with ``node=None`` those whose lease ran out."""

    def fail_timed_out_queued(
        self,
        now: int,
        default_timeout_ms: int,
        fault: str,
        services: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
    ) -> list[str]:
        """Fail the QUEUING jobs past their queueing timeout; their ids."""

    def erase_expired(
        self,
        now: int,
        unfetched_ms: int,
        fetched_ms: int,
        limit: int,
        services: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
    ) -> int:
        """Erase up to ``limit`` finished jobs past their retention; how many."""

    # ----------------------------------------------------------------- callbacks

    def next_callback_due(self) -> int | None:
        """When the next callback may be attempted (ms; a leased one when its lease
        ends), or None when there is none."""

    def claim_callbacks(
        self,
        node: str,
        now: int,
        lease_ms: int,
        limit: int,
        admit: Callable[[CallbackEvent], bool] | None = None,
        per_owner: int | None = None,
    ) -> list[tuple[CallbackEvent, int]]:
        """Take up to ``limit`` due callbacks to deliver from ``node`` until ``now +
        lease_ms``, round robin between owners (each one's oldest due first, at most
        ``per_owner`` of each considered), never one of a job whose other event is
        being delivered, only those ``admit`` lets through: [(the event, the lease,
        which fences its outcome)]."""

    def callbacks_attempted(self, node: str, attempts: Sequence[CallbackAttempt]) -> list[bool]:
        """End ``node``'s ``attempts``, in one transaction: delete each event (``due_at``
        None) or make it due again, and add its message to its job's history; for each,
        False when it was no longer this attempt's."""

    def release_callbacks(self, node: str, now: int) -> int:
        """Make the callbacks ``node`` had taken due now; how many."""

    def pending_callbacks(self, job_id: str | None = None) -> int:
        """How many callbacks wait to be delivered (of ``job_id``, when given)."""

    # ----------------------------------------------------------------- views

    def events(self, job_id: str, owner: str | None = None) -> tuple[str | None, list[dict]] | None:
        """The job's parent id and its history, oldest first; None when there is no such job."""

    def list_jobs(
        self,
        statuses: Iterable[str] | None = None,
        service: str | None = None,
        owner: str | None = None,
        limit: int = 100,
        before: int | None = None,
        parent: str | None = None,
        operations: Iterable[tuple[str, str]] | None = None,
        queued_between: tuple[int | None, int | None] = (None, None),
        duration_between: tuple[int | None, int | None] = (None, None),
        now: int | None = None,
    ) -> tuple[list[tuple[int, JobRecord]], bool]:
        """A page of jobs, newest first, without payloads: ([(seq, record)], whether more
        follow); older than ``before`` (a seq), of ``operations`` ((service, operation)
        pairs), first queued within ``queued_between`` (ms, both ends included, None
        open), started and lasting (to their end, or to ``now`` while unfinished) within
        ``duration_between`` (ms, likewise)."""

    def counts_by_status(self, owner: str | None = None) -> dict[str, int]:
        """Stored jobs by status: every job's, or only ``owner``'s."""

    def counts_by_service(self) -> dict[tuple[str, str], int]:
        """{(service, status): count} of every stored job."""

    def busy_workers(self, node: str) -> int:
        """Worker slots of ``node`` that hold a job now."""

    #: where large results are kept as files (``result_files``: SQLite), or None
    result_folder: str | None

    def sweep_result_files(self) -> int:
        """Remove the result files of erased jobs; how many (0 without result files)."""
        ...

    def ping(self) -> None:
        """Ask the database one trivial question (``SELECT 1``): returns when it answers,
        ``StoreUnavailable`` when it cannot (``/readyz``)."""

    def checkpoint_in_background(self) -> None:
        """(A node's main process.) On SQLite, copy the WAL into the database in a thread
        of this process, as the node's other stores, opened with
        ``background_checkpoints``, leave it to (``sqlite.WalCheckpointer``)."""

    def close(self) -> None:
        """Let go of the database."""
