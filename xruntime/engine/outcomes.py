"""What becomes of a job when its run ends: the outcome rules.

A run ends with the function's outcome (a result, a fault, a transient fault or a
retry asked for, child jobs to wait for), or without one: its worker process died,
or was killed when it did not return within its grace.  Each way has one rule here:
the job SUCCEEDS or FAILS, is queued again for a retry (docs/protocol.md §11), waits
for its children (§13), or, when it was deleted meanwhile or another run took it
over, is let go of.  A finished child also updates its parent.

Every write here must not be lost: it waits for the store (``Supervisor.persist``,
handed in) and is fenced by the run (``Shared.run_of``), so that a run that lost its job
changes nothing.  The slot (``engine.slot``) decides when and how a run ended; these
rules never touch its process.
"""

import json
import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ..protocol.codec import dumps, encode_fault
from ..protocol.faults import (
    InternalErrorFault,
    QuotaExceededFault,
    RequestTimedOutFault,
    TransientFault,
    XServerFault,
)
from ..protocol.states import Status
from ..store import JobRecord, QueueFull, QueueLimit, Room, StoreFull, StoreUnavailable, now_ms
from ..store.result_files import ComposedFile, stored_length
from ..support import metrics
from . import spill
from .child_jobs import bulk_progress, queue_full_fault, stop_children
from .messages import (
    ChildrenAsked,
    ComposedResult,
    Failure,
    Outcome,
    Result,
    RetryAsked,
    SpilledResult,
    Transient,
)
from .shared import Shared
from .supervisor_log import log, outage_log

Answer = TypeVar("Answer")


class Persist(Protocol):
    """``Supervisor.persist``: ``write()``, a store write that must not be lost, tried
    again while the store is unreachable; its answer, or None when the node gave up."""

    def __call__(
        self, write: Callable[[], Answer], what: str, full_is_final: bool = False
    ) -> Answer | None: ...


def fault_json(fault: XServerFault) -> str:
    return dumps(encode_fault(fault))


# ------------------------------------------------------------------ how a run ended


@dataclass(frozen=True)
class Returned:
    """The function returned (or raised), with the progress it sent just before that
    the slot had not written yet (written with the outcome)."""

    outcome: Outcome
    progress: str | None = None


@dataclass(frozen=True)
class Died:
    """The worker process ended without an outcome."""

    exit_code: int | None


@dataclass(frozen=True)
class Killed:
    """The function did not return within ``grace_s`` of its stop: its process was killed."""

    grace_s: float


Ending = Returned | Died | Killed


class Outcomes:
    """The outcome rules of one node (the supervisor's store, notifier and settings)."""

    def __init__(self, shared: Shared, persist: Persist) -> None:
        self.sup = shared
        self.persist = persist

    def conclude(self, job: JobRecord, ending: Ending, deleted: bool) -> None:
        """The run of ``job`` ended: apply the rule of the way it ended.  A job
        ``deleted`` during its run is let go of (and erased), however the run ended."""
        if isinstance(ending, Returned) and isinstance(ending.outcome, SpilledResult):
            # the file as it is, for a store that keeps it (renamed), or mapped; removed
            # whatever happens, unless the store took it
            taken = self.sup.store.result_folder is not None
            with spill.spilled(ending.outcome.path, as_file=taken) as stored:
                self.conclude(job, Returned(Result(stored), ending.progress), deleted)
            return
        if isinstance(ending, Returned) and isinstance(ending.outcome, ComposedResult):
            # (only a store that keeps files refers to its files: its file is taken in)
            composed = ComposedFile(ending.outcome.path, ending.outcome.spans)
            with spill.spilled(composed.path, as_file=True):  # (removed unless taken)
                self.conclude(job, Returned(Result(composed), ending.progress), deleted)
            return
        if deleted:
            self.let_go(job)
        elif isinstance(ending, Returned):
            self._returned(job, ending.outcome, ending.progress)
        elif isinstance(ending, Died):
            fault = InternalErrorFault(
                f"the worker process running this job died (exit code "
                f"{ending.exit_code}); the job is not run again"
            )
            self.fail(job, fault, "worker died")
        else:
            fault = RequestTimedOutFault(
                "the computation timeout stopped the job and it did not "
                f"return within {ending.grace_s:g} s; it was aborted"
            )
            self.fail(job, fault, "aborted after timeout")

    def _returned(self, job: JobRecord, outcome: Outcome, progress: str | None) -> None:
        sup = self.sup
        if isinstance(outcome, ChildrenAsked):
            self._wait_for_children(job, outcome)
            return
        if isinstance(outcome, (Transient, RetryAsked)):
            fault = self._retry(job, outcome)
            if fault is None:
                return
            outcome = Failure(fault)
        assert not isinstance(outcome, (SpilledResult, ComposedResult))  # (see ``conclude``)
        won: bool | None = None
        if isinstance(outcome, Result):
            result, room = outcome, self._room_of(job)
            try:
                won = self._store_result(job, result, progress, room)
                if won is False and room is not None:  # past the limit, or not this run's
                    refused = self._past_stored_limit(job, result)
                    if refused is None:  # no longer this run's, or the figure fell since
                        won = self._store_result(job, result, progress, None)
                    else:
                        log.warning("job %s: %s", job.id, refused.message)
                        outcome = Failure(fault_json(refused))
            except StoreFull as full:  # the room a result needs may never come: it fails
                log.warning(
                    "job %s: no room for its result on the job store's disk: %s", job.id, full
                )
                fault = spill.no_room_fault(stored_length(result.stored), str(full))
                self.fail(job, fault, "no room for its result")
                return
        if isinstance(outcome, Result):
            status = Status.SUCCEEDED
        else:
            status, failure = Status.FAILED, outcome
            won = self.persist(
                lambda: sup.store.finish(
                    job.id,
                    status,
                    now_ms(),
                    fault=failure.fault,
                    progress=progress,
                    run=sup.run_of(job),
                ),
                f"the outcome of job {job.id}",
            )
        if won is None:  # given up at shutdown: recovered later
            return
        if not won:  # deleted while it finished, or no longer this run's
            self.let_go(job)
            return
        self._finished(job, True, status)

    def _store_result(
        self, job: JobRecord, result: Result, progress: str | None, room: Room | None
    ) -> bool | None:
        """The job SUCCEEDED with ``result``, stored within ``room`` (``JobStore.finish``);
        StoreFull when the store's disk has no room for it."""
        sup = self.sup
        return self.persist(
            lambda: sup.store.finish(
                job.id,
                Status.SUCCEEDED,
                now_ms(),
                result=result.stored,
                progress=progress,
                run=sup.run_of(job),
                room=room,
            ),
            f"the outcome of job {job.id}",
            full_is_final=True,
        )

    def _room_of(self, job: JobRecord) -> Room | None:
        """What ``job``'s result must fit in: its user's ``max_stored_bytes``
        (operations/storage_quota.py), checked by the write that stores it; None without
        a limit, and for a child (its parent's bound counted for its result)."""
        limit = self.sup.settings().stored_bytes_limit(job.owner)
        if not limit or job.parent_id is not None:
            return None
        return Room(job.owner, job.result_bound, limit)

    def _past_stored_limit(self, job: JobRecord, result: Result) -> QuotaExceededFault | None:
        """The fault that fails ``job`` instead of storing ``result`` when the result
        would take its user past ``max_stored_bytes`` (operations/storage_quota.py): the
        service's bound was wrong, or the limit was lowered since the start.  Read once
        the write within its room (``_room_of``) was refused, to tell that from a job
        that is no longer this run's.  A result is stored when its user's figure cannot
        be read now (the store is away: the write waits for it anyway)."""
        room = self._room_of(job)
        if room is None:
            return None
        limit, size = room.limit, stored_length(result.stored)
        try:
            others = self.sup.store.stored_bytes(job.owner) - job.result_bound
        except StoreUnavailable:
            return None
        if others + size <= limit:
            return None
        return QuotaExceededFault(
            f"the result takes {size} bytes: with the {others} bytes your other jobs take or "
            f"may take it would pass max_stored_bytes of {limit}; it was not stored",
            hint="Fetch and delete your finished jobs (deleteJob), or ask for a smaller "
            "result; then start again.",
        )

    def _retry(self, job: JobRecord, asked: Transient | RetryAsked) -> str | None:
        """Plan the job's next run (docs/protocol.md §11); answers the fault (JSON) the
        job fails with when it is not retried: past ``max_retries``, or stopped
        meanwhile (a stopped job is not run again).  None when the retry is written
        (or given up at shutdown)."""
        sup = self.sup
        cfg = sup.settings().jobs_for(job.service)
        retry = job.retries + 1
        if isinstance(asked, RetryAsked):
            # as a request's timeouts are (§15): a due time past any the database can hold,
            # or years away, is the longest a request may ask for
            delay_ms = max(0, min(asked.after_ms, cfg.max_request_timeout_ms))
            reason = asked.reason or "the operation asked to run later"
            fault = fault_json(TransientFault(f"the operation asked to run again later: {reason}"))
        else:
            delay_ms = int(cfg.retry_delay_ms(retry) * random.uniform(0.9, 1.1))
            fault = asked.fault
            reason = _fault_summary(fault)
        if retry > cfg.max_retries:
            log.info("job %s: no retry left (max_retries = %d); it fails", job.id, cfg.max_retries)
            return fault
        won = self.persist(
            lambda: sup.store.retry(
                job.id,
                delay_ms,
                f"retry {retry} of {cfg.max_retries} planned in {delay_ms / 1000:.1f} s: {reason}",
                sup.run_of(job),
            ),
            f"the retry of job {job.id}",
        )
        if won is None:  # given up at shutdown: recovered later
            return None
        if not won:  # stopped or deleted meanwhile: the fault stands
            return fault
        log.info(
            "job %s %s: retry %d of %d in %.1f s (%s)",
            job.id,
            Status.QUEUING,
            retry,
            cfg.max_retries,
            delay_ms / 1000,
            reason,
        )
        sup.notifier.notify(job.id)
        sup.work.ring()  # an idle slot learns the new due time from the store
        return None

    def _wait_for_children(self, job: JobRecord, asked: ChildrenAsked) -> None:
        """The function called run_children (docs/protocol.md §13): store the children and let
        the parent wait for them holding no worker; ``resume`` takes it once they are
        done.  A parent stopped meanwhile stops them at once."""
        sup = self.sup
        now = now_ms()
        settings = sup.settings()

        def bounded(
            value: int | None, service: str
        ) -> int | None:  # as a start request's are (§15)
            limit = settings.jobs_for(service).max_request_timeout_ms
            return None if value is None else max(0, min(value, limit))

        children = [
            JobRecord(
                id=str(uuid.uuid4()),
                service=c["service"],
                operation=c["operation"],
                fetch_type=c["fetch_type"],
                status=Status.QUEUING,
                request=c["request"],
                queued_at=now,
                queueing_timeout=bounded(c["queueing_timeout"], c["service"]),
                computation_timeout=bounded(c["computation_timeout"], c["service"]),
            )
            for c in asked.children
        ]
        note = f"waiting for {len(children)} child jobs"
        limits = [
            QueueLimit(
                service,
                *settings.queue_limit(service),
                settings.quota_of(job.owner, service).max_queued,
            )
            for service in sorted({c.service for c in children})
        ]
        status = self.persist(
            lambda: sup.store.suspend(
                job.id,
                sup.node,
                asked.stage,
                asked.fail_fast,
                children,
                bulk_progress(0, 0, len(children)),
                note,
                limits,
                sup.run_of(job),
            ),
            f"the child jobs of job {job.id}",
        )
        if status is None:  # given up at shutdown: the parent is recovered, runs again
            return
        if status is False:  # deleted while it fanned out, or no longer this run's
            self.let_go(job)
            return
        if isinstance(
            status, QueueFull
        ):  # children count against max_queued (docs/protocol.md §15)
            self.fail(
                job,
                queue_full_fault(status, len(children)),
                "its child jobs would overflow the queue",
            )
            return
        log.info(
            "job %s waits for %d child jobs (stage %d), holding no worker",
            job.id,
            len(children),
            asked.stage,
        )
        sup.notifier.notify(job.id)
        sup.notifier.notify_queued()  # idle slots here and on other nodes claim them
        sup.work.ring()
        if status == Status.STOPPING:
            stop_children(sup.store, sup.notifier, job.id, "its parent job was stopped")

    # ---------------------------------------------------------------- finishing

    def fail(self, job: JobRecord, fault: XServerFault, why: str) -> bool | None:
        """Fail the running job with ``fault``, written once the store answers; answers
        whether it was still running (False: deleted meanwhile; None: given up at
        shutdown)."""
        sup = self.sup
        won = self.persist(
            lambda: sup.store.finish(
                job.id,
                Status.FAILED,
                now_ms(),
                fault=fault_json(fault),
                note=why,
                run=sup.run_of(job),
            ),
            f"the outcome of job {job.id}",
        )
        self._finished(job, won, Status.FAILED, why)
        return won

    def _finished(
        self, job: JobRecord, won: bool | None, status: Status, why: str | None = None
    ) -> None:
        sup = self.sup
        if won:
            assert job.started_at is not None  # it was claimed: it started
            # a success is every job's end: at DEBUG, not paid for on every job (its
            # history keeps it); a failure is news to an administrator: at INFO
            log.log(
                logging.DEBUG if status == Status.SUCCEEDED else logging.INFO,
                "job %s %s.%s %s",
                job.id,
                job.service,
                job.operation,
                f"{status} ({why})" if why else status,
            )
            metrics.job_finished(job.service, status, (now_ms() - job.started_at) / 1000)
        sup.notifier.notify(job.id)  # (after the metric: a job seen finished is counted)
        if won and job.parent_id is not None:
            self._child_finished(job, job.parent_id, status)

    def _child_finished(self, job: JobRecord, parent_id: str, status: Status) -> None:
        """A child finished: its parent's BulkProgress counts it; with failures raised,
        a failed child stops its siblings, so that the parent fails soon; the parent
        may now be ready to run again (a slot looks)."""
        sup = self.sup
        try:
            fail_fast = sup.store.refresh_waiting_progress(parent_id, bulk_progress)
            if fail_fast is not None:
                sup.notifier.notify(parent_id)
            if fail_fast and status == Status.FAILED:
                stop_children(sup.store, sup.notifier, parent_id, "a sibling child job failed")
        except StoreUnavailable as exc:  # the count is only progress; the resume needs none
            outage_log.warning("job %s: its parent's progress is not updated: %s", job.id, exc)
        sup.work.ring()

    # ---------------------------------------------------------------- letting go

    def hand_back(self, job: JobRecord, why: str) -> None:
        """Give the job back to the queue untouched (its attempt not counted): the node
        shuts down, or the run could not start."""
        sup = self.sup
        handed = self.persist(
            lambda: sup.store.hand_back(job.id, sup.node, sup.run_of(job)),
            f"the hand-back of job {job.id}",
        )
        if handed is False:  # deleted, or taken over while the store was away
            self.let_go(job)
            return
        sup.notifier.notify(job.id)
        if handed:
            log.info("job %s handed back to the queue (%s)", job.id, why)

    def let_go(self, job: JobRecord) -> None:
        """A run let go of its job, or a write of it was refused: the job was deleted
        (it is erased now), or it is no longer this run's (its lease ran out and another
        run took it over: nothing of this run is kept).  The log says which."""
        sup = self.sup
        try:
            rec = sup.store.peek(job.id)
        except StoreUnavailable:
            log.info(
                "job %s: this run (attempt %d) let go of it; the store cannot say why now",
                job.id,
                job.attempts,
            )
            return
        if rec is None:
            log.info("job %s was erased meanwhile; worker let go", job.id)
        elif rec.status == Status.DELETED and rec.node in (sup.node, None):
            self.erase_deleted(job.id)
        elif rec.node != sup.node or rec.attempts != job.attempts:
            log.warning(
                "job %s lost to another run: this run (attempt %d) no longer holds it, its "
                "lease ran out; it is %s%s (attempt %d); nothing of this run is kept",
                job.id,
                job.attempts,
                rec.status,
                f" on {rec.node}" if rec.node else "",
                rec.attempts,
            )
        else:
            log.info("job %s is %s; this run let go of it", job.id, rec.status)

    def erase_deleted(self, job_id: str) -> None:
        """Erase a DELETED job no run holds any more."""
        sup = self.sup
        self.persist(
            lambda: sup.store.erase(job_id, (Status.DELETED,)), f"the erasure of job {job_id}"
        )
        sup.notifier.notify(job_id)
        log.info("job %s erased (deleted, worker let go)", job_id)


def _fault_summary(fault: str) -> str:
    """A fault (JSON text) in a few words: its type and message."""
    decoded = json.loads(fault)
    return f"{decoded['faultInfo']['$type']}: {decoded['message']}"
