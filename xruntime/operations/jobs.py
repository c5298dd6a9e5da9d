"""The operation layer: where the job protocol lives (docs/protocol.md §3–5).

Plain Python, no HTTP: start, fetch, run, watch, stop, delete and the runtime
information, following the state table in ``protocol.states``.  Every change goes
through one guarded store call; when a guard loses a race (the job moved on
meanwhile), the decision is taken again on the job's new state.
"""

import base64
import binascii
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from .. import __version__
from ..callbacks.targets import check_callback
from ..engine.child_jobs import stop_children
from ..payload.form import TooLarge
from ..payload.stream import Source
from ..protocol import codec, states
from ..protocol.faults import (
    AccessDeniedFault,
    InternalErrorFault,
    InvalidFetchTypeFault,
    InvalidValueFault,
    JobStateFault,
    QueueOverflowFault,
    QuotaExceededFault,
    RejectedRequestFault,
    TemporarilyUnavailableFault,
    UnknownJobFault,
)
from ..protocol.states import Status
from ..protocol.types import (
    Job,
    JobCount,
    JobEvent,
    JobEvents,
    JobList,
    JobProgress,
    JobSummary,
    ListJobsRequest,
    RuntimeInformation,
    ServiceInformation,
    WatchedJobs,
    XModel,
)
from ..protocol.watch import watch_periods
from ..store import JobRecord, disk_room, now_ms
from ..support.blocking import INLINE_BYTES, blocking
from .accounts import ANONYMOUS, Caller
from .soon import soon
from .storage_quota import StoredBytesQuota

if TYPE_CHECKING:
    from ..author.service import LongOperation, Service
    from ..engine.notifier import Notifier
    from ..settings.model import Settings
    from ..store import JobStore
    from .watching import Snapshot, Watches

log = logging.getLogger(__name__)

RACE_RETRIES = 10
LIST_LIMIT, LIST_LIMIT_MAX = 100, 1000  # listJobs' page size: by default, at most
VIEWS_INLINE = 64  # a watchJobs answer of more jobs is built in the pool for blocking work


#: What spyne's ``Job()`` holds: every member, None.
_BLANK_JOB = Job().__dict__.copy()


def new_job(job_id: str, status: str, elapsed_ms: int) -> Job:
    """``Job(id=job_id, status=status, elapsedTime=elapsed_ms)``, the same object made
    without spyne's ``__init__``, which looks up every member's declaration on each call
    (every start and every watch answers a Job)."""
    job: Job = Job.__new__(Job)
    members = job.__dict__
    members.update(_BLANK_JOB)
    members["id"], members["status"], members["elapsedTime"] = job_id, status, elapsed_ms
    return job


def asked_timeouts(request: XModel, limit_ms: int) -> tuple[int | None, ...]:
    """The (queueing, computation) timeouts in ms a start request asks for (None: not
    asked), each refused with InvalidValueFault below 0 or past ``limit_ms``, the
    ``[jobs] max_request_timeout`` (docs/protocol.md §15): an unbounded one overflowed the
    store's integers and froze housekeeping."""
    timeouts = getattr(request, "timeouts", None)
    asked: list[int | None] = []
    for name in ("queueingTimeout", "computationTimeout"):
        value = getattr(timeouts, name, None) if timeouts is not None else None
        if value is not None and not 0 <= value <= limit_ms:
            raise InvalidValueFault(
                f"invalid value for timeouts.{name}: it must be between 0 and {limit_ms} ms "
                "(the server's max_request_timeout)",
                parameter=f"timeouts.{name}",
                value=str(value),
            )
        asked.append(value)
    return tuple(asked)


class JobManager:
    def __init__(
        self,
        store: "JobStore",
        notifier: "Notifier",
        settings: "Callable[[], Settings]",
        node: str = "",
        watches: "Watches | None" = None,
        services: "dict[str, Service] | None" = None,
    ) -> None:
        self.store = store
        self.services = services or {}  # the registry's services by name, for runtime information
        self.notifier = notifier  # its feed tells the supervisor of new, stopped and deleted jobs
        self.watches = watches  # the held watches of an HTTP process (xruntime.operations.watching)
        self.settings = settings  # a callable answering the settings in force
        self.node = node
        self.started_at = time.time()
        self.stored_quota = StoredBytesQuota(store)
        self.disk_room = disk_room.of_store(store.result_folder)

    # ------------------------------------------------------------------ views

    def job_view(self, rec: JobRecord | None, now: int | None = None) -> Job:
        """The ``Job`` answer for a stored record (or UNKNOWN for None)."""
        if rec is None:
            raise AssertionError("use unknown_job()")
        now = now_ms() if now is None else now
        job = new_job(rec.id, rec.status, rec.elapsed_ms(now))
        if rec.progress and states.SHOWS_PROGRESS[Status(rec.status)]:
            job.progress = codec.decode(json.loads(rec.progress), JobProgress)
        return job

    @staticmethod
    def unknown_job(job_id: str) -> Job:
        return new_job(job_id, states.UNKNOWN, 0)

    def _deleted_view(self, rec: JobRecord) -> Job:
        return new_job(rec.id, states.DELETED, rec.elapsed_ms(now_ms()))

    @staticmethod
    def _seen(rec: JobRecord | None, caller: Caller) -> JobRecord | None:
        """The record as ``caller`` may know it: another user's job is None, exactly
        as an id that was never used (docs/protocol.md §10)."""
        return rec if rec is not None and caller.sees(rec.owner) else None

    def peek(self, job_id: str, caller: Caller = ANONYMOUS) -> JobRecord | None:
        """The job's record, without its payloads, as ``caller`` may know it: None for
        an id the store does not hold and for another user's job alike."""
        return self._seen(self.store.peek(job_id), caller)

    # ------------------------------------------------------------------ the event loop's calls

    async def start_soon(
        self, op: "LongOperation", request: XModel, caller: Caller, size: int | None
    ) -> Job:
        """``start``, on the event loop when it may be (``soon.soon``): a request of ``size``
        bytes (known and small: it is encoded and stored here) without a callback (whose
        check resolves the target's host name, which may wait); else in the pool."""
        if size is None or size > INLINE_BYTES or getattr(request, "callback", None) is not None:
            return await blocking(self.start, op, request, caller)
        return await soon(self.store, self.start, op, request, caller)

    # ------------------------------------------------------------------ long operations

    def start(self, op: "LongOperation", request: XModel, caller: Caller = ANONYMOUS) -> Job:
        """Queue a job of ``caller`` for ``op`` (a LongOperation) and answer QUEUING at
        once; refused past the queue's limit, the caller's own (docs/protocol.md §10), or
        what the caller may keep stored (§15)."""
        settings = self.settings()
        op.check(request, settings)
        shortfall = self.disk_room.shortfall(settings.min_free_bytes)
        if shortfall is not None:  # the room left goes to the jobs accepted already
            raise TemporarilyUnavailableFault(
                f"{shortfall}: no job is started until room is freed",
                hint="Try again later; the administrator frees room on the node's disk "
                "(docs/operations.md, 'A full disk'), or deleteJob frees what your jobs keep.",
            )
        bound = op.result_bound(request)
        stored_limit = settings.stored_bytes_limit(caller.name)  # (checked by the insert)
        queueing, computation = asked_timeouts(
            request, settings.jobs_for(op.service).max_request_timeout_ms
        )
        callback = getattr(request, "callback", None)
        if callback is not None:  # refused before anything is stored (docs/protocol.md §14)
            check_callback(callback.url, callback.progressPeriod, settings, caller.name)
        rec = JobRecord(
            id=str(uuid.uuid4()),
            service=op.service,
            operation=op.name,
            owner=caller.name,
            fetch_type=op.fetch_type,
            status=states.QUEUING,
            request=codec.dumps(codec.encode(request, op.request)),
            queued_at=now_ms(),
            queueing_timeout=queueing,
            computation_timeout=computation,
            callback_url=callback.url if callback is not None else None,
            callback_period=callback.progressPeriod if callback is not None else None,
            result_bound=bound,
        )
        max_queued, scope = settings.queue_limit(op.service)
        own_max = settings.quota_of(caller.name, op.service).max_queued
        for attempt in range(2):  # refused: read which limit refused it
            if self.store.create(rec, max_queued, scope, own_max, stored_limit):
                break
            self.stored_quota.check(caller.name, stored_limit, bound)
            if own_max and self.store.count_queued(op.service, caller.name) >= own_max:
                raise QuotaExceededFault(
                    f"you have {own_max} {op.service} jobs queued already, your limit; this one "
                    "was refused"
                )
            if attempt or not stored_limit:  # (else the stored bytes may have fallen since)
                raise QueueOverflowFault(
                    f"{max_queued} jobs are queued already; this one was refused",
                    hint="Try again later, when fewer jobs are waiting.",
                )
        log.debug(  # every job's: at DEBUG, not paid for on every start (its history keeps it)
            "job %s %s.%s QUEUING%s",
            rec.id,
            op.service,
            op.name,
            f" (user {caller.name})" if caller.name else "",
        )
        self.notifier.notify_queued()
        return new_job(rec.id, states.QUEUING, 0)

    def fetch(self, op: "LongOperation", job_id: str, caller: Caller = ANONYMOUS) -> XModel:
        """The response of a finished job (or its own fault), by the fetch rules."""
        return codec.decode(json.loads(self.fetch_json(op, job_id, caller)), op.response)

    def fetch_json(
        self,
        op: "LongOperation",
        job_id: str,
        caller: Caller = ANONYMOUS,
        max_bytes: int | None = None,
        mark: bool = True,
    ) -> str:
        """Like ``fetch``, but the response as the JSON text the worker stored: the
        codec's form of ``op.response``, exactly what ``codec.encode`` of the fetched
        response would give (the worker encoded it with the same declared type).  The
        JSON bindings write it as it is, so a large result is never built as spyne
        objects nor parsed and encoded again on the server's threads.  A result longer
        than ``max_bytes`` is RejectedRequestFault, and the job is not marked fetched;
        nor is it with ``mark`` False (the synchronous form, which erases it next)."""
        result = self._fetched(op, job_id, caller, max_bytes, stored=False, mark=mark).result
        assert result is not None  # a SUCCEEDED job is stored with its result
        return result

    def fetch_stored(self, op: "LongOperation", job_id: str, caller: Caller = ANONYMOUS) -> Source:
        """Like ``fetch_json``, but the result in the store's form, read by ranges, for
        an answer written as it is read (``payload.stream``): never whole."""
        stored = self._fetched(op, job_id, caller, None, stored=True).stored_result
        assert stored is not None  # a SUCCEEDED job is stored with its result
        try:  # its first bytes now: one that cannot be read is a fault, not a cut answer
            stored.read(0, 1)
        except LookupError as exc:  # erased meanwhile, or its file is gone
            log.error("job %s: its result cannot be read: %s", job_id, exc)
            raise InternalErrorFault(
                f"the result of job {job_id} cannot be read; see the server log"
            ) from exc
        return stored

    def _fetched(
        self,
        op: "LongOperation",
        job_id: str,
        caller: Caller,
        max_bytes: int | None,
        stored: bool,
        mark: bool = True,
    ) -> JobRecord:
        """The fetch rules: the record of a SUCCEEDED job, marked fetched (unless
        ``mark`` is False); the fault of a FAILED one raised; every other case its fault."""
        try:
            rec = self.store.get(
                job_id,
                None if caller.admin else caller.name,
                max_result_bytes=max_bytes,
                stored_result=stored,
            )
        except TooLarge as exc:
            raise RejectedRequestFault(
                f"the result of job {job_id} is larger than the {max_bytes} bytes this answer may "
                "still hold; it was left out",
                hint="Fetch it on its own.",
            ) from exc
        if rec is None:
            raise UnknownJobFault(f"there is no job with id {job_id}", jobId=job_id)
        if rec.fetch_type != op.fetch_type or rec.service != op.service:
            raise InvalidFetchTypeFault(
                f"job {job_id} is a {rec.service}.{rec.operation} job; fetch it with "
                f"fetch{rec.fetch_type} of {rec.service}",
                jobId=job_id,
            )
        decision = states.FETCH[Status(rec.status)]
        if decision == states.REFUSE:
            raise JobStateFault(
                f"job {job_id} is {rec.status}; only a SUCCEEDED or FAILED job can be fetched",
                jobId=job_id,
                status=rec.status,
            )
        if mark and rec.first_fetched_at is None:  # the fetched retention counts from here
            self.store.mark_fetched(job_id, now_ms())
        if decision == states.RAISE_STORED_FAULT:
            assert rec.fault is not None  # a FAILED job is stored with its fault
            raise codec.decode_fault(json.loads(rec.fault), op.response.get_namespace())
        return rec

    async def run(
        self,
        op: "LongOperation",
        request: XModel,
        caller: Caller = ANONYMOUS,
        size: int | None = None,
    ) -> str:
        """The synchronous form: the same job, waited for (holding no thread), fetched
        and erased; the response as stored JSON text, as ``fetch_json`` answers it
        (``size``: the request's bytes, where known; see ``start_soon``)."""
        assert self.watches is not None  # an HTTP process's manager holds its watches
        job_id = (await self.start_soon(op, request, caller, size)).id
        await self.watches.until_final(job_id)
        try:  # (not marked fetched: it is erased next, and a write would be for nothing)
            try:  # a small result on the event loop; a larger one is read in the pool
                return await soon(
                    self.store, self.fetch_json, op, job_id, max_bytes=INLINE_BYTES, mark=False
                )
            except RejectedRequestFault:  # longer than INLINE_BYTES
                return await blocking(self.fetch_json, op, job_id, mark=False)
        finally:  # fetched or failed, the job is the caller's answer only
            await soon(self.store, self.store.erase, job_id, states.FINISHED)

    # ------------------------------------------------------------------ XRuntime

    async def watch(
        self,
        job_id: str,
        progress_update_period: int | None = None,
        maximum_polling_period: int | None = None,
        caller: Caller = ANONYMOUS,
    ) -> Job:
        """Answer at once on a terminal or unknown job; else at the first change once
        ``progressUpdatePeriod`` has passed (a change seen earlier is answered the
        moment the period is over), at the latest after ``maximumPollingPeriod``
        (``Watches.watch``).  Watchers woken by one change get one shared answer."""
        assert self.watches is not None  # an HTTP process's manager holds its watches
        update_ms, maximum_ms = watch_periods(progress_update_period, maximum_polling_period)
        limits = self.settings().held_watch_limits(caller.name)
        with self.watches.held(caller.name, 1, limits):  # past them QuotaExceededFault
            snap, woken = await self.watches.watch(job_id, update_ms, maximum_ms, caller.sees)
        if snap.rec is None:
            return self.unknown_job(job_id)
        if not woken:
            return self.job_view(snap.rec)
        if snap.view is None:
            snap.view = self.job_view(snap.rec)
        return snap.view

    async def watch_jobs(
        self,
        job_ids: list[str] | None,
        progress_update_period: int | None = None,
        maximum_polling_period: int | None = None,
        caller: Caller = ANONYMOUS,
    ) -> WatchedJobs:
        """watchJobs (docs/protocol.md §14): watchJob's rules over many jobs, answering
        the jobs that changed (``Watches.watch_many``), each as ``watch`` answers it.
        A repeated id is watched and answered once; no ids, or more than ``[server]
        max_watched_ids``, is ``InvalidValueFault { parameter: "ids" }``; past the
        caller's held-watch bounds, ``QuotaExceededFault``."""
        assert self.watches is not None  # an HTTP process's manager holds its watches
        update_ms, maximum_ms = watch_periods(progress_update_period, maximum_polling_period)
        settings = self.settings()
        limit = settings.max_watched_ids
        if not job_ids or len(job_ids) > limit:
            raise InvalidValueFault(
                f"ids must name 1 to {limit} jobs (the server's max_watched_ids); "
                f"{len(job_ids or ())} were given",
                parameter="ids",
                value=str(len(job_ids or ())),
                hint="Watch the jobs in several calls." if job_ids else "Give the ids to watch.",
            )
        distinct = list(dict.fromkeys(job_ids))
        limits = settings.held_watch_limits(caller.name)
        with self.watches.held(caller.name, len(distinct), limits):  # past them QuotaExceededFault
            found, woken = await self.watches.watch_many(
                distinct, update_ms, maximum_ms, caller.sees
            )
        if len(found) > VIEWS_INLINE:  # (1 000 Jobs take ~15 ms: not on the event loop)
            return await blocking(self._watched, found, woken)
        return self._watched(found, woken)

    def _watched(self, found: "list[tuple[str, Snapshot]]", woken: bool) -> WatchedJobs:
        """watchJobs' answer: each job as ``watch`` answers it."""
        now = now_ms()
        answered = []
        for job_id, snap in found:
            if snap.rec is None:
                answered.append(self.unknown_job(job_id))
            elif not woken:
                answered.append(self.job_view(snap.rec, now))
            else:  # one Job per change, shared with every watch it wakes
                if snap.view is None:
                    snap.view = self.job_view(snap.rec, now)
                answered.append(snap.view)
        return WatchedJobs(jobs=answered)

    def stop(self, job_id: str, caller: Caller = ANONYMOUS) -> Job:
        for _ in range(RACE_RETRIES):
            rec, status, decision = self._decided(job_id, caller, states.STOP)
            if decision == states.UNKNOWN_JOB or rec is None:  # (STOP[UNKNOWN] is UNKNOWN_JOB)
                raise UnknownJobFault(f"there is no job with id {job_id}", jobId=job_id)
            self._refuse_child(rec, "stopped")
            if decision == states.REFUSE:
                hint = (
                    "A queued job cannot be stopped; delete it instead."
                    if status == states.QUEUING
                    else None
                )
                raise JobStateFault(
                    f"job {job_id} is {status} and cannot be stopped",
                    jobId=job_id,
                    status=status,
                    **({"hint": hint} if hint else {}),
                )
            if decision == states.UNCHANGED:
                return self.job_view(rec)
            if self.store.request_stop(job_id):
                self.notifier.notify(job_id)
                log.info("job %s STOPPING (stopJob)", job_id)
                self._stop_children(job_id)
                rec.status = states.STOPPING
                return self.job_view(rec)
        raise AssertionError("stopJob lost too many races")

    def delete(self, job_id: str, caller: Caller = ANONYMOUS) -> Job:
        for _ in range(RACE_RETRIES):
            rec, status, decision = self._decided(job_id, caller, states.DELETE)
            if decision == states.UNCHANGED or rec is None:  # (DELETE[UNKNOWN] is UNCHANGED)
                return self.unknown_job(job_id) if rec is None else self._deleted_view(rec)
            self._refuse_child(rec, "deleted")
            # a parent's running descendants let go of their workers; every child is
            # erased with it (docs/protocol.md §13)
            children = self.store.delete_children(job_id)
            if decision == states.ERASE_NOW or rec.node is None:  # no worker holds it
                erased = self.store.erase(job_id, (status,))
                if erased:
                    log.info("job %s DELETED and erased (was %s)", job_id, status)
            else:
                erased = self.store.mark_deleted(job_id)
                if erased:
                    log.info("job %s DELETED (was %s); its computation is aborted", job_id, status)
            for child_id in children:
                self.notifier.notify(child_id)
            if erased:
                self.notifier.notify(job_id)
                if children:
                    log.info("job %s: %d running child jobs aborted with it", job_id, len(children))
                return self._deleted_view(rec)
        raise AssertionError("deleteJob lost too many races")

    def _decided(
        self, job_id: str, caller: Caller, table: Mapping[Status, str]
    ) -> tuple[JobRecord | None, Status, str]:
        """The job as ``caller`` may know it now (None: unknown to them), its status
        (UNKNOWN for None), and what ``table`` (``states.STOP``, ``states.DELETE``)
        decides for that status."""
        rec = self._seen(self.store.peek(job_id), caller)
        status = Status(rec.status) if rec else states.UNKNOWN
        return rec, status, table[status]

    @staticmethod
    def _refuse_child(rec: JobRecord | None, what: str) -> None:
        """A child job is stopped or deleted with its parent, never on its own."""
        if rec is not None and rec.parent_id is not None:
            raise JobStateFault(
                f"job {rec.id} is a child of job {rec.parent_id}; it is {what} with "
                "its parent, not on its own",
                jobId=rec.id,
                status=rec.status,
                hint=f"Stop or delete job {rec.parent_id} instead.",
            )

    def _stop_children(self, job_id: str) -> None:
        stop_children(self.store, self.notifier, job_id, "its parent job was stopped")

    # ------------------------------------------------------------------ history, listing

    def events(self, job_id: str, caller: Caller = ANONYMOUS) -> JobEvents:
        """The job's history, oldest first (docs/protocol.md §11)."""
        found = self.store.events(job_id, None if caller.admin else caller.name)
        if found is None:
            raise UnknownJobFault(f"there is no job with id {job_id}", jobId=job_id)
        parent_id, rows = found
        return JobEvents(
            id=job_id,
            parentId=parent_id,
            events=[
                JobEvent(
                    time=iso_time(r["time"]),
                    status=r["status"],
                    attempt=r["attempt"],
                    node=r["node"],
                    message=r["message"],
                )
                for r in rows
            ],
        )

    def list_jobs(self, request: ListJobsRequest, caller: Caller = ANONYMOUS) -> JobList:
        """A page of the jobs the caller may see, newest first (docs/protocol.md §12)."""
        limit = LIST_LIMIT if request.limit is None else request.limit
        if not 1 <= limit <= LIST_LIMIT_MAX:
            raise InvalidValueFault(
                f"limit must be between 1 and {LIST_LIMIT_MAX}", parameter="limit", value=str(limit)
            )
        owner = request.user
        if not caller.admin:
            if owner is not None and owner != caller.name:
                raise AccessDeniedFault(
                    "only an admin may list another user's jobs",
                    hint="Leave out user, or give your own name.",
                )
            owner = caller.name
        statuses = (
            [s for s in request.status or () if s in states.STORED_STATES]
            if request.status
            else None
        )
        page, more = self.store.list_jobs(
            statuses,
            request.service,
            owner,
            limit,
            _cursor_seq(request.cursor),
            parent=request.parentId,
        )
        return JobList(
            jobs=[self._summary(rec) for _, rec in page],
            nextCursor=_cursor(page[-1][0]) if more and page else None,
        )

    def job_page(
        self,
        caller: Caller,
        limit: int,
        cursor: str | None = None,
        statuses: Iterable[str] | None = None,
        operations: Iterable[tuple[str, str]] | None = None,
        queued_between: tuple[int | None, int | None] = (None, None),
        duration_between: tuple[int | None, int | None] = (None, None),
    ) -> tuple[list[JobRecord], str | None]:
        """A page of the jobs ``caller`` may see (every job for an admin), newest first,
        without payloads, and the cursor of the next page (None on the last): listJobs'
        paging and cursors, filtered as the OGC API's job list asks (``operations``:
        (service, operation) pairs; ``queued_between``: first queued within, ms;
        ``duration_between``: started, and lasting within, ms; see ``store.list_jobs``).
        A cursor this server did not give out is InvalidValueFault."""
        page, more = self.store.list_jobs(
            statuses,
            None,
            None if caller.admin else caller.name,
            limit,
            _cursor_seq(cursor),
            operations=operations,
            queued_between=queued_between,
            duration_between=duration_between,
            now=now_ms(),
        )
        return [rec for _, rec in page], _cursor(page[-1][0]) if more and page else None

    def _summary(self, rec: JobRecord) -> JobSummary:
        progress = None
        if rec.progress and states.SHOWS_PROGRESS[Status(rec.status)]:
            progress = codec.decode(json.loads(rec.progress), JobProgress)
        return JobSummary(
            id=rec.id,
            service=rec.service,
            operation=rec.operation,
            status=rec.status,
            user=rec.owner,
            queuedAt=iso_time(rec.queued_at),
            startedAt=iso_time(rec.started_at),
            finishedAt=iso_time(rec.finished_at),
            fetched=rec.first_fetched_at is not None,
            attempts=rec.attempts,
            progress=progress,
            parentId=rec.parent_id,
        )

    def runtime_information(
        self,
        services: "Iterable[Service]",
        with_job_counts: bool = True,
        caller: Caller = ANONYMOUS,
    ) -> RuntimeInformation:
        """The server's information; the job counts are the caller's own jobs', or
        every job's for an admin."""
        counts = None
        if with_job_counts:
            counts = self.store.counts_by_status(None if caller.admin else caller.name)
        return RuntimeInformation(
            version=__version__,
            uptime=int((time.time() - self.started_at) * 1000),
            node=self.node,
            services=[
                ServiceInformation(name=s.name, operations=sorted(s.operations())) for s in services
            ],
            jobs=None
            if counts is None
            else [JobCount(status=s, count=counts.get(s, 0)) for s in states.STORED_STATES],
        )


def iso_time(ms: int | None) -> str | None:
    """ms since the epoch as ISO 8601 UTC with milliseconds (None stays None)."""
    if ms is None:
        return None
    return (
        datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"
    )


def _cursor(seq: int) -> str:
    """The opaque cursor of the page after the job ``seq``."""
    return base64.urlsafe_b64encode(f"before:{seq}".encode()).decode().rstrip("=")


def _cursor_seq(cursor: str | None) -> int | None:
    if cursor is None or cursor == "":
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, seq = text.partition(":")
        if kind == "before" and seq.isascii() and seq.isdigit() and int(seq) < 2**63:
            return int(seq)  # (a sequence number is a signed 64-bit integer)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise InvalidValueFault(
        "cursor is not a nextCursor this server gave out",
        parameter="cursor",
        value=cursor,
        hint="Send the nextCursor of the previous page as it is, or no cursor for the first page.",
    )
