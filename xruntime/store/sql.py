"""The job store on SQLAlchemy Core, for SQLite (the embedded default) and PostgreSQL.

``JobStore`` is what the rest of xruntime asks of the store: a job's life in SQL, from
its creation to its erasure.  Every method that changes a job is one short transaction
guarded on the job's current state, and answers whether it won, so that of two actors
racing on a job exactly one wins; callers never read-modify-write a job themselves.  A
write of a run names its ``Run`` and changes nothing once the job is no longer that
run's.  Every method raises ``StoreUnavailable`` when the database cannot be reached
for now.  Time stamps are milliseconds on the database's clock (``clock.now_ms``).

Its parts live beside it: the way to the database (``database``), the statements
(``statements``, ``claims``), the operations on child jobs (``children``) and on the
callbacks' outbox (``outbox``), SQLite's lock (``sqlite``) and what "unavailable" means
(``unavailable``).
"""

import os
from collections.abc import Callable, Iterable

from sqlalchemy import (
    BigInteger,
    Connection,
    LargeBinary,
    bindparam,
    delete,
    false,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.sql import ColumnElement

from ..payload.form import pack
from ..protocol.states import FINISHED, Status
from . import owner_bytes, result_files
from .children import ChildJobs
from .claims import claim_statement
from .clock import now_ms
from .database import QUEUE_LOCK_KEY, guard_values
from .events import NOW_MS, fault_type, note_of
from .outbox import CallbackOutbox
from .records import JobRecord, Recovered, Room, Run
from .result_files import ComposedFile, ResultFile, Span
from .result_reader import ResultReader
from .schema import RESULT_ROW_ABOVE, job_events, job_results, jobs, lane_of
from .statements import (
    ACTIVE_RUNNING,
    HOLDING_WORKER,
    INSERT_KEYS,
    LIGHT_COLUMNS,
    LIGHT_NAMES,
    REQUEUED,
    failed_by_store,
    fence,
    guarded_statements,
    insert_below,
    of_services,
    record_of,
    timeout_of,
)

#: ``[jobs] max_stored_bytes`` as a condition of the write that stores: a start's insert
#: (its own owner and result bound) and a result's finish (the result's stored size less
#: the job's bound, which it replaces).
_START_WITHIN = owner_bytes.within(bindparam("owner"), bindparam("result_bound"))
_RESULT_WITHIN = owner_bytes.within(bindparam("room_owner"), bindparam("adding"))


class JobStore(ChildJobs, CallbackOutbox):
    """The job store on a SQLAlchemy URL (``sqlite:///path`` or ``postgresql+psycopg://…``)."""

    # ----------------------------------------------------------------- a job's start

    def create(
        self,
        job: JobRecord,
        max_queued: int,
        scope: str | None = None,
        owner_max_queued: int = 0,
        max_stored: int = 0,
    ) -> bool:
        """Insert a QUEUING job; False when ``max_queued`` jobs are queued already (jobs
        of service ``scope`` only, when given), or ``owner_max_queued`` jobs of its
        owner and service, or when what its owner stores and may store
        (``stored_bytes``) and the job's ``result_bound`` pass ``max_stored`` (0: no
        such limit).  On SQLite the checks are conditions of the insert itself; the
        caller reads which one refused it."""
        values = {k: getattr(job, k) for k in INSERT_KEYS if k != "lane"}
        values["request"] = pack(job.request)
        values["lane"] = lane_of(job.service, job.owner)
        if self.dialect == "sqlite":  # one statement: count and insert at once
            if not max_queued and not owner_max_queued and not max_stored:
                return self._run("insert", True, **values)[0] == 1
            key = (bool(max_queued), scope is not None, bool(owner_max_queued), bool(max_stored))
            p = self._compiled(
                ("insert",) + key,
                lambda: insert_below(
                    *key[:3],
                    also=(_START_WITHIN,) if max_stored else (),
                ),
            )
            # the insert's own ``service`` is the job's, which is the scope's; its own
            # ``owner`` and ``result_bound`` are the job's
            limits = dict(
                max_queued=max_queued, owner_max_queued=owner_max_queued, max_stored=max_stored
            )
            return self._run(p, True, **limits, **values)[0] == 1
        if max_stored and self.stored_bytes(job.owner) + job.result_bound > max_stored:
            return False  # (a sum over the owner's rows: read outside the queue's lock)
        count, of_lane = (
            self._prepared["count_queued" if scope is None else "count_queued_of"],
            self._prepared["count_queued_in_lane"],
        )
        insert_ = self._prepared["insert"]
        with self._cursor(True) as cur:
            if max_queued or owner_max_queued:  # count-then-insert must not interleave
                cur.execute("SELECT pg_advisory_xact_lock(%(key)s)", {"key": QUEUE_LOCK_KEY})
            if max_queued:
                cur.execute(count.sql, count.args({} if scope is None else {"service": scope}))
                if cur.fetchone()[0] >= max_queued:
                    return False
            if owner_max_queued:
                cur.execute(of_lane.sql, of_lane.args({"lane": values["lane"]}))
                if cur.fetchone()[0] >= owner_max_queued:
                    return False
            cur.execute(insert_.sql, insert_.args(values))
        return True

    def count_queued(self, service: str, owner: str) -> int:
        """How many jobs of ``owner`` and ``service`` are queued."""
        return self._count("count_queued_in_lane", lane=lane_of(service, owner))

    def stored_bytes(self, owner: str) -> int:
        """The bytes the payloads of ``owner``'s jobs take as stored, all services and
        states together (the jobs not yet erased), and what their unfinished jobs may
        still store (``result_bound``), summed over the indexes on (owner, stored_bytes)
        and (owner, status, result_bound) on PostgreSQL (a few ms per 100 000 of the
        owner's jobs), read from the running total SQLite keeps on SQLite (``owner_bytes``)."""
        if self.dialect == "sqlite":
            kept = self._compiled(("stored_bytes_kept",), owner_bytes.kept_statement, ["n"])
            _, row = self._run(kept, False, owner=owner)
            assert row is not None  # a select of one value answers a row
            return int(row["n"])
        return self._count("stored_bytes", owner=owner)

    # ----------------------------------------------------------------- reading a job

    def get(
        self,
        job_id: str,
        owner: str | None = None,
        max_result_bytes: int | None = None,
        stored_result: bool = False,
    ) -> JobRecord | None:
        """The whole job; with ``owner``, only if it is theirs (another's job is not
        even read, so answering "no such job" takes the time it takes for an unknown id).
        With ``max_result_bytes``, ``payload.form.TooLarge`` for a longer result; with
        ``stored_result``, not its result but a ``ResultReader`` of it (to be written as
        it is read, never whole)."""
        key = ("get" if owner is None else "get_owned") + ("_sized" if stored_result else "")
        params = {"job_id": job_id} if owner is None else {"job_id": job_id, "owner": owner}
        row = self._run(key, False, **params)[1]
        if row is None or not stored_result:
            if row is not None and row["result"] is not None:
                row["result"] = self._as_stored(row["result"])
            return record_of(row, max_result_bytes)
        length, in_row = row.pop("result_length"), row.pop("result")
        rec = record_of(row)
        if length is not None:
            held = None if in_row is None else bytes(in_row)
            rec.stored_result = ResultReader(self, job_id, int(length), held)
        return rec

    def peek(self, job_id: str) -> JobRecord | None:
        """The job without its request, result and fault: what watch, stop and delete
        need, without reading a large result."""
        return record_of(self._run("peek", False, job_id=job_id)[1])

    def peek_many(self, job_ids: Iterable[str]) -> dict[str, JobRecord]:
        """``peek`` of every id in one statement: id → record, for the jobs that exist.
        (watchJobs reads up to 10 000 jobs so: one ``peek`` each took 1 000 round trips.
        SQLite takes up to 32 766 parameters, PostgreSQL 65 535.)"""
        job_ids = list(job_ids)
        if not job_ids:
            return {}
        query = select(*LIGHT_COLUMNS).where(jobs.c.id.in_(job_ids))
        with self._read() as conn:
            rows = conn.execute(query).all()
        return {
            rec.id: rec
            for rec in (record_of(dict(zip(LIGHT_NAMES, row, strict=True))) for row in rows)
        }

    def mark_fetched(self, job_id: str, now: int) -> None:
        """Stamp the job's first fetch (later fetches keep the first stamp)."""
        self._run("mark_fetched", True, job_id=job_id, now=now)

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
        """Move the next queued job (of ``services``) to RUNNING on ``node``: the oldest,
        or with ``running_limits`` ((owner, service or None, max_running), ...: a user's
        per-service limit before their own) the oldest whose owner runs fewer of that
        service's jobs than allowed; ``between_owners`` (accounts on), of those, the
        first of the lane (a user's jobs of a service) that runs fewest jobs now.  A
        job waiting for its retry is not taken before its time.  None when no job may
        start; ``note`` is the event's message."""
        services = None if services is None else tuple(services)
        running_limits = tuple(running_limits)
        p = self._compiled(
            ("claim", services, running_limits, between_owners),
            lambda: claim_statement(self.dialect, services, running_limits, between_owners),
            [c.name for c in jobs.c],
        )
        params = {"node": node, "now_ms": now, "lease_until": now + lease_ms, "note": note_of(note)}
        return record_of(self._run(p, True, **params)[1])

    def work_waiting(self) -> tuple[int, bool]:
        """(how many jobs are queued: 0, 1, or 2 for two or more; whether a parent
        waits for its children), read without a write: a slot tries the claim and the
        resume, each a write transaction, only where it may find something, and wakes
        another idle slot only where more than it takes waits (``engine.work_bell``)."""
        _, row = self._run("work_waiting", False)
        assert row is not None  # (a count and an EXISTS: always one row)
        return int(row["queued"]), bool(row["waiting"])

    def next_due(self, now: int) -> int | None:
        """When the first job waiting for its retry may run (ms), or None."""
        _, row = self._run("next_due", False, now=now)
        assert row is not None  # an aggregate answers a row
        return row["n"]

    def set_progress(self, job_id: str, progress: str, run: Run | None = None) -> bool:
        """Store a running job's progress (JSON text); False when it no longer runs (as ``run``)."""
        return self._guarded(
            "set_progress", job_id, ACTIVE_RUNNING, run, progress_blob=pack(progress)
        )

    def request_stop(self, job_id: str, note: str = "stop asked") -> bool:
        """RUNNING → STOPPING; False when the job was not RUNNING."""
        return self._guarded(
            "set_status", job_id, (Status.RUNNING,), new_status=Status.STOPPING, note=note_of(note)
        )

    def finish(
        self,
        job_id: str,
        status: str,
        now: int,
        *,
        result: str | bytes | bytearray | memoryview | ResultFile | ComposedFile | None = None,
        fault: str | None = None,
        progress: str | None = None,
        from_states: Iterable[str] = ACTIVE_RUNNING,
        note: str | None = None,
        run: Run | None = None,
        room: Room | None = None,
    ) -> bool:
        """An active job → SUCCEEDED (with result: JSON text, or bytes already in the
        stored form) or FAILED (with fault); the event says "succeeded", or "failed:
        <fault type>" and ``note``.  A large result goes into a row of its own
        (``schema.job_results``), in the same transaction; a ``ResultFile`` (SQLite, a
        file in ``result_folder``) is renamed into ``result_folder`` and that row refers
        to it (``result_files``); a ``ComposedFile`` too, the row then referring to its
        spans (its own file's and the result files' it names).  With ``room``, the
        result is stored only within it (else False, as for a job that is no longer
        this run's: the caller reads which): on SQLite a condition of the write."""
        message = "succeeded" if status == Status.SUCCEEDED else f"failed: {fault_type(fault)}"
        blob = pack(result) if result is None or isinstance(result, str) else result
        values = dict(
            new_status=status,
            now=now,
            result_blob=None if isinstance(blob, (ResultFile, ComposedFile)) else blob,
            fault_blob=pack(fault),
            progress_blob=pack(progress),
            note=note_of(f"{message} ({note})" if note else message),
        )
        also: tuple[ColumnElement, ...] = ()
        if room is not None:
            size = 0 if blob is None else result_files.stored_length(blob)
            if self.dialect != "sqlite":  # (a sum over the owner's rows: read first)
                if self.stored_bytes(room.owner) - room.bound + size > room.limit:
                    return False
            else:
                values.update(
                    room_owner=room.owner, max_stored=room.limit, adding=size - room.bound
                )
                also = (_RESULT_WITHIN,)
        if isinstance(blob, (ResultFile, ComposedFile)):
            return self._finish_with_file(job_id, blob, values, from_states, run, also)
        if blob is None or len(blob) <= RESULT_ROW_ABOVE:
            return self._guarded("finish", job_id, from_states, run, also, **values)
        with self._write() as conn:
            values["result_blob"] = None  # (in its own row)
            return self._finish_with_row(
                conn, job_id, values, from_states, run, blob, len(blob), also
            )

    def _finish_with_row(
        self,
        conn: Connection,
        job_id: str,
        values: dict,
        from_states: Iterable[str],
        run: Run | None,
        stored: bytes | bytearray | memoryview,
        length: int,
        also: tuple[ColumnElement, ...] = (),
    ) -> bool:
        """The job's end and its result's row (the result, or a reference to its file);
        ``also``: the finish's further conditions (``guarded_statements``)."""
        statement = guarded_statements(tuple(from_states), run is not None, also)["finish"]
        if conn.execute(statement, guard_values(job_id, run, values)).rowcount != 1:
            return False  # (not this run's any more, or no longer active)
        conn.execute(
            insert(job_results).from_select(
                ["job_seq", "owner", "bytes", "result"],
                select(
                    jobs.c.seq,
                    jobs.c.owner,
                    literal(length, BigInteger),
                    literal(stored, LargeBinary),
                ).where(jobs.c.id == job_id),
            )
        )
        return True

    def _finish_with_file(
        self,
        job_id: str,
        file: ResultFile | ComposedFile,
        values: dict,
        from_states: Iterable[str],
        run: Run | None,
        also: tuple[ColumnElement, ...] = (),
    ) -> bool:
        """The job's end with a result file taken in: renamed under the write lock, and
        back when the transaction fails (so that the write can be tried again).  The
        files a ``ComposedFile`` names are there then, or LookupError (their jobs were
        erased, and swept, meanwhile): under the lock no sweep can remove them before
        the row that refers to them commits."""
        if self.result_folder is None:
            raise ValueError("this store keeps no result files")
        folder = result_files.make_private_folder(self.result_folder)
        name = result_files.name_for(job_id, run.attempt if run is not None else 0, file.path)
        target: str | None = None  # (the file's path once taken in)
        try:
            with self._write() as conn:
                if isinstance(file, ComposedFile):
                    result_files.check_named(folder, file.spans)
                target = result_files.take_in(file.path, folder, name)
                reference = (
                    result_files.reference(name)
                    if isinstance(file, ResultFile)
                    else result_files.spans_reference(
                        Span(name if s.name is None else s.name, s.offset, s.length)
                        for s in file.spans
                    )
                )
                if not self._finish_with_row(
                    conn, job_id, values, from_states, run, reference, file.length, also
                ):
                    os.rename(target, file.path)  # (not this run's any more)
                    target = None
                    return False
            return True
        except BaseException:
            if target is not None:
                os.rename(target, file.path)
            raise

    def sweep_result_files(self) -> int:
        """Remove the result files whose jobs were erased: set aside under the write
        lock (``result_files.sweep``), removed after it (``remove_swept``); how many."""
        if self.result_folder is None:
            return 0
        with self._write() as conn:
            rows = conn.execute(
                select(job_results.c.result).where(
                    func.length(job_results.c.result) <= result_files.LONGEST_REFERENCE
                )
            ).all()
            referenced = {name for (blob,) in rows for name in result_files.names_in(blob)}
            swept, set_aside = result_files.sweep(self.result_folder, referenced)
        result_files.remove_swept(set_aside)
        return swept

    def retry(self, job_id: str, delay_ms: int, note: str, run: Run | None = None) -> bool:
        """A running job back to QUEUING for ``delay_ms`` from this write, its retry
        counted.  Its due time (``not_before``) is taken from the database's clock in the
        statement that writes the retry's event, so that the wait its history shows is
        never shorter than the delay, however long the write waited for its lock."""
        with self._write() as conn:
            return (
                conn.execute(
                    update(jobs)
                    .where(jobs.c.id == job_id, jobs.c.status == Status.RUNNING, *fence(run))
                    .values(
                        **REQUEUED,
                        not_before=literal_column(NOW_MS[self.dialect], BigInteger) + delay_ms,
                        retries=jobs.c.retries + 1,
                        event_note=note_of(note),
                    )
                ).rowcount
                == 1
            )

    def hand_back(self, job_id: str, node: str, run: Run | None = None) -> bool:
        """A job running on ``node`` back to QUEUING, untouched, its attempt not counted
        (its node shuts down); a deleted one is erased instead."""
        with self._write() as conn:
            res = conn.execute(
                update(jobs)
                .where(
                    jobs.c.id == job_id,
                    jobs.c.node == node,
                    jobs.c.status.in_(ACTIVE_RUNNING),
                    *fence(run),
                )
                .values(
                    **REQUEUED,
                    attempts=jobs.c.attempts - 1,
                    event_note="handed back: its node shut down",
                )
            )
            if res.rowcount == 0:
                conn.execute(
                    delete(jobs).where(
                        jobs.c.id == job_id, jobs.c.node == node, jobs.c.status == Status.DELETED
                    )
                )
            return res.rowcount == 1

    def renew_leases(self, node: str, until: int, job_ids: Iterable[str]) -> list[tuple[str, str]]:
        """Extend the leases of the jobs ``job_ids`` that run on ``node`` (those its
        worker slots hold: a job no slot holds must let its lease run out, so that it
        is recovered); answers [(id, status)] of them."""
        job_ids = list(job_ids)
        if not job_ids:
            return []
        held = (jobs.c.node == node) & jobs.c.id.in_(job_ids) & jobs.c.status.in_(HOLDING_WORKER)
        with self._write() as conn:
            conn.execute(update(jobs).where(held).values(lease_until=until))
            rows = conn.execute(select(jobs.c.id, jobs.c.status).where(held)).all()
        return [tuple(r) for r in rows]

    # ----------------------------------------------------------------- a job's end

    def mark_deleted(self, job_id: str) -> bool:
        """RUNNING/STOPPING → DELETED (the worker still has to let go)."""
        return self._guarded(
            "set_status", job_id, ACTIVE_RUNNING, new_status=Status.DELETED, note="deleted"
        )

    def erase(self, job_id: str, statuses: Iterable[str]) -> bool:
        """Remove the job's record if it is in one of ``statuses``."""
        return self._guarded("erase", job_id, statuses)

    # ----------------------------------------------------------------- housekeeping

    def recover(
        self, node: str | None, now: int, max_attempts: int, fault_for: Callable[[int], str]
    ) -> list[Recovered]:
        """Re-queue the jobs left running by a dead node (those of ``node``, or with
        ``node=None`` those whose lease ran out), or fail them with ``fault_for(runs
        lost)`` past ``max_attempts``.  Runs lost with their node count against
        ``max_attempts``: a job's runs (``attempts``) less those that ended in a retry
        (``retries``)."""
        held = jobs.c.status.in_(HOLDING_WORKER)
        lost = (jobs.c.node == node) if node is not None else (jobs.c.lease_until < now)
        found = []
        with self._write() as conn:
            query = select(
                jobs.c.id, jobs.c.status, jobs.c.attempts, jobs.c.retries, jobs.c.node
            ).where(held, lost)
            rows = conn.execute(self._locking(query, skip_locked=True)).all()
            for job_id, status, attempts, retries, on in rows:
                lost_runs = attempts - retries
                if status == Status.DELETED:
                    conn.execute(delete(jobs).where(jobs.c.id == job_id))
                elif lost_runs >= max_attempts:
                    fault = fault_for(lost_runs)
                    conn.execute(
                        update(jobs)
                        .where(jobs.c.id == job_id)
                        .values(
                            **failed_by_store(
                                now, fault, f"its node {on} died; {lost_runs} runs lost"
                            ),
                            lease_until=None,
                        )
                    )
                    found.append(Recovered(job_id, False, lost_runs))
                else:
                    conn.execute(
                        update(jobs)
                        .where(jobs.c.id == job_id)
                        .values(
                            **REQUEUED,
                            event_note=note_of(f"queued again: its node {on} died"),
                        )
                    )
                    found.append(Recovered(job_id, True, lost_runs))
        return found

    def fail_timed_out_queued(
        self,
        now: int,
        default_timeout_ms: int,
        fault: str,
        services: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
    ) -> list[str]:
        """Fail QUEUING jobs waiting longer than their queueing timeout: the configured
        ``default_timeout_ms`` (0: none), shortened by the request's own when it asked
        for less; a request never lengthens it.  A job waiting for a retry counts from
        when its retry was due.  Answers the ids failed."""
        timeout = timeout_of(jobs.c.queueing_timeout, default_timeout_ms)
        since = func.coalesce(jobs.c.not_before, jobs.c.queued_at)
        cond = (jobs.c.status == Status.QUEUING) & (timeout > 0) & (since + timeout <= now)
        query = of_services(select(jobs.c.id).where(cond), services, exclude)
        with self._write() as conn:
            ids = [r[0] for r in conn.execute(query.limit(1000)).all()]
            if ids:
                conn.execute(
                    update(jobs)
                    .where(jobs.c.id.in_(ids), jobs.c.status == Status.QUEUING)
                    .values(**failed_by_store(now, fault, "queueing timeout"))
                )
        return ids

    def erase_expired(
        self,
        now: int,
        unfetched_ms: int,
        fetched_ms: int,
        limit: int,
        services: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
    ) -> int:
        """Erase up to ``limit`` finished jobs past their retention (0 ms: kept for ever).
        They are looked for before the write transaction, which then erases those still
        expired: when few have expired the search reads every finished job (no index
        answers "fetched long enough ago"; 0.5 s for a million on SQLite), and on SQLite
        a write transaction would hold every writer of every process meanwhile."""
        conds = []
        if unfetched_ms:
            conds.append(
                jobs.c.first_fetched_at.is_(None) & (jobs.c.finished_at <= now - unfetched_ms)
            )
        if fetched_ms:
            conds.append(
                jobs.c.first_fetched_at.is_not(None) & (jobs.c.first_fetched_at <= now - fetched_ms)
            )
        if not conds:
            return 0
        expired = conds[0] if len(conds) == 1 else (conds[0] | conds[1])
        # a child goes with its parent, however long it has been finished
        expired = jobs.c.status.in_(sorted(FINISHED)) & jobs.c.parent_id.is_(None) & expired
        query = of_services(select(jobs.c.seq).where(expired), services, exclude)
        with self._read() as conn:
            found = [row[0] for row in conn.execute(query.limit(limit))]
        if not found:
            return 0
        with self._write() as conn:  # checked again: a job fetched meanwhile stays
            return conn.execute(delete(jobs).where(jobs.c.seq.in_(found), expired)).rowcount

    # ----------------------------------------------------------------- views

    def events(self, job_id: str, owner: str | None = None) -> tuple[str | None, list[dict]] | None:
        """The job's parent id (None for a job started by a client) and its history,
        oldest first, as dicts (time, status, attempt, node, message); None when there
        is no such job (of ``owner``, when given)."""
        job = select(jobs.c.seq, jobs.c.parent_id).where(jobs.c.id == job_id)
        if owner is not None:
            job = job.where(jobs.c.owner == owner)
        query = (
            select(
                job_events.c.time,
                job_events.c.status,
                job_events.c.attempt,
                job_events.c.node,
                job_events.c.message,
            )
            .where(job_events.c.job_seq == bindparam("seq"))
            .order_by(job_events.c.seq)
        )
        with self._read() as conn:
            found = conn.execute(job).first()
            if found is None:
                return None
            return found[1], [dict(row._mapping) for row in conn.execute(query, {"seq": found[0]})]

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
        """A page of jobs, newest first: ([(seq, JobRecord without request, result and
        fault)], whether more follow).  ``before``: only jobs older than that seq (the
        keyset of the page before), so pages neither miss nor repeat a job however many
        are added meanwhile.  ``parent``: only the children of that job.
        ``operations``: only jobs of these (service, operation) pairs.
        ``queued_between``: only jobs first queued between these times (ms, both
        included; None: open).  ``duration_between``: only jobs that have started and
        whose duration, from their start to their end (to ``now`` while unfinished),
        is between these bounds (ms, both included; None: open)."""
        query = select(jobs.c.seq, *LIGHT_COLUMNS).order_by(jobs.c.seq.desc()).limit(limit + 1)
        if statuses is not None:
            query = query.where(jobs.c.status.in_(list(statuses)))
        if service is not None:
            query = query.where(jobs.c.service == service)
        if owner is not None:
            query = query.where(jobs.c.owner == owner)
        if before is not None:
            query = query.where(jobs.c.seq < before)
        if parent is not None:
            query = query.where(jobs.c.parent_id == parent)
        if operations is not None:
            pairs = [(jobs.c.service == s) & (jobs.c.operation == o) for s, o in operations]
            query = query.where(or_(*pairs) if pairs else false())
        earliest, latest = queued_between
        if earliest is not None:
            query = query.where(jobs.c.queued_at >= earliest)
        if latest is not None:
            query = query.where(jobs.c.queued_at <= latest)
        shortest, longest = duration_between
        if shortest is not None or longest is not None:
            end = func.coalesce(jobs.c.finished_at, now if now is not None else now_ms())
            duration = end - jobs.c.started_at
            query = query.where(jobs.c.started_at.is_not(None))
            if shortest is not None:
                query = query.where(duration >= shortest)
            if longest is not None:
                query = query.where(duration <= longest)
        with self._read() as conn:
            rows = conn.execute(query).all()
        page = [
            (row[0], record_of(dict(zip(LIGHT_NAMES, row[1:], strict=True))))
            for row in rows[:limit]
        ]
        return page, len(rows) > limit

    def counts_by_status(self, owner: str | None = None) -> dict[str, int]:
        """Stored jobs by status: every job's, or only ``owner``'s."""
        query = select(jobs.c.status, func.count()).group_by(jobs.c.status)
        if owner is not None:
            query = query.where(jobs.c.owner == owner)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return {status: count for status, count in rows}

    def counts_by_service(self) -> dict[tuple[str, str], int]:
        """Stored jobs by (service, status), for the operator's view (metrics, status page)."""
        query = select(jobs.c.service, jobs.c.status, func.count()).group_by(
            jobs.c.service, jobs.c.status
        )
        with self._read() as conn:
            rows = conn.execute(query).all()
        return {(service, status): count for service, status, count in rows}

    def busy_workers(self, node: str) -> int:
        """How many of ``node``'s worker slots hold a job now: a job it runs or winds
        down, or a deleted one its worker has not let go of yet (a parent waiting for
        its children holds none)."""
        query = (
            select(func.count())
            .select_from(jobs)
            .where(
                jobs.c.node == node, jobs.c.status.in_(HOLDING_WORKER), jobs.c.waiting_for.is_(None)
            )
        )
        with self._read() as conn:
            return conn.execute(query).scalar_one()
