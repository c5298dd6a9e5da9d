"""Child jobs in the store (docs/protocol.md §13): a parent waits for the jobs it started.

A parent asking for children is suspended: in one transaction its children are
stored, queued as its owner's, and the parent lets go of its node and its lane, so
that it holds no worker while it waits (``suspend``).  As children finish, the
parent's progress counts them (``refresh_waiting_progress``); when all have, a node
resumes the parent where it left off (``resume``) and hands it their outcomes
(``children_of``).  Stopping or deleting a parent reaches its whole tree
(``stop_children``, ``delete_children``).  These are the store's methods about
parents and children, kept apart from those of any job (``sql.JobStore``, which
has them all).
"""

from collections.abc import Callable, Iterable

from sqlalchemy import func, insert, select, text, update
from sqlalchemy.engine import Connection

from ..payload.form import pack, unpack
from ..protocol.states import Status
from .claims import resume_statement
from .database import QUEUE_LOCK_KEY, Database
from .events import note_of
from .records import FinishedChild, JobRecord, QueueFull, QueueLimit, Run
from .result_files import Located
from .schema import WAITING_LANE, jobs, lane_of
from .statements import (
    ACTIVE_RUNNING,
    INSERT_KEYS,
    QUEUED,
    failed_by_store,
    fence,
    of_services,
    record_of,
    timeout_of,
)


class ChildJobs(Database):
    """The store's operations on parents and their child jobs."""

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
        """The running parent waits for ``children`` (JobRecords, stored QUEUING as its
        own, in its owner's lane): in one transaction they are inserted and the parent
        lets go of its node and its lane, holding no worker until ``resume`` takes it.
        Answers the parent's status (RUNNING or STOPPING), False when it no longer runs
        on ``node`` (deleted meanwhile), or a QueueFull when the children would take the
        queue past one of ``limits``, as a start would (docs/protocol.md §15): in both,
        nothing is stored."""
        # packed before the write transaction, not while it holds the store's write lock
        # that every claim waits for; not compressed: a child's request is kept while its
        # parent waits and read once, and compressing one of XDima's (1 500 + 3 000
        # locations, 295 kB) took 2.6 ms, on the way from a parent's fan-out to its
        # children's start
        requests = [pack(child.request, compress=False) for child in children]
        with self._write() as conn:
            if self.dialect == "postgresql" and limits:  # as create's count-then-insert
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": QUEUE_LOCK_KEY})
            query = select(jobs.c.status, jobs.c.owner).where(
                jobs.c.id == parent_id,
                jobs.c.node == node,
                jobs.c.status.in_(ACTIVE_RUNNING),
                *fence(run),
            )
            row = conn.execute(self._locking(query)).first()
            if row is None:
                return False
            status, owner = row
            full = _over_a_limit(conn, children, owner, limits)
            if full is not None:
                return full
            rows = []
            for index, child in enumerate(children):
                values = {k: getattr(child, k) for k in INSERT_KEYS if k not in ("lane", "owner")}
                values.update(
                    request=requests[index],
                    owner=owner,
                    lane=lane_of(child.service, owner),
                    parent_id=parent_id,
                    child_stage=stage,
                    child_index=index,
                    event_note=note_of(
                        f"queued: child {index + 1} of {len(children)} of job {parent_id}"
                    ),
                )
                rows.append(values)
            if rows:
                conn.execute(insert(jobs), rows)
            conn.execute(
                update(jobs)
                .where(jobs.c.id == parent_id)
                .values(
                    node=None,
                    lease_until=None,
                    waiting_for=stage,
                    fail_fast=int(bool(fail_fast)),
                    lane=WAITING_LANE,
                    progress=pack(progress),
                    event_note=note_of(note),
                )
            )
            return status

    def resume(
        self,
        node: str,
        now: int,
        lease_ms: int,
        services: Iterable[str] | None = None,
        note: str = "resumed: its child jobs are done",
    ) -> JobRecord | None:
        """Take the oldest waiting parent (of ``services``) whose children have all
        finished: it runs again on ``node``; None when there is none."""
        services = None if services is None else tuple(services)
        p = self._compiled(
            ("resume", services),
            lambda: resume_statement(self.dialect, services),
            [c.name for c in jobs.c],
        )
        return record_of(
            self._run(p, True, node=node, lease_until=now + lease_ms, note=note_of(note))[1]
        )

    def children_of(self, parent_id: str, located: bool = False) -> list[FinishedChild]:
        """Every finished child of the parent, in the order its function asked for them
        (stage, then place); ``located``: a result kept in result files as where it is
        (``Located``, for the parent's worker), not read."""
        rows = self._rows("children_of", binary=True, parent_id=parent_id)  # (their results)
        return [
            FinishedChild(
                id=r[0],
                stage=r[1],
                index=r[2],
                service=r[3],
                operation=r[4],
                status=r[5],
                result=None if r[6] is None else self._child_result(r[6], located),
                fault=unpack(r[7]),
                finished_at=r[8],
            )
            for r in rows
        ]

    def _child_result(self, blob: bytes | memoryview, located: bool) -> bytes | Located:
        """A child's result as stored; ``located``: where its files are, when it is kept
        in result files (the parent's worker maps them: a large result is not read here,
        sent through the pipe and joined by copying)."""
        where = self._located(blob)
        if where is None:
            return bytes(blob)
        return where if located else where.read()

    def refresh_waiting_progress(
        self, parent_id: str, make_progress: Callable[[int, int, int], str]
    ) -> bool | None:
        """Set a waiting parent's progress to ``make_progress(successful, failed,
        remaining)`` (JSON text) over the children it waits for, counted and written in
        one transaction (two children finishing at once cannot write their counts in
        the wrong order).  Answers None when the parent does not wait, else whether it
        waits with ``fail_fast`` and a child failed (its siblings should be stopped)."""
        with self._write() as conn:
            query = select(jobs.c.waiting_for, jobs.c.fail_fast).where(
                jobs.c.id == parent_id, jobs.c.waiting_for.is_not(None)
            )
            row = conn.execute(self._locking(query)).first()
            if row is None:
                return None
            stage, fail_fast = row
            counts: dict[str, int] = dict(
                conn.execute(
                    select(jobs.c.status, func.count())
                    .where(jobs.c.parent_id == parent_id, jobs.c.child_stage == stage)
                    .group_by(jobs.c.status)
                ).all()
            )
            successful, failed = counts.pop(Status.SUCCEEDED, 0), counts.pop(Status.FAILED, 0)
            conn.execute(
                update(jobs)
                .where(jobs.c.id == parent_id)
                .values(progress=pack(make_progress(successful, failed, sum(counts.values()))))
            )
            return bool(fail_fast) and failed > 0

    def stop_children(self, parent_id: str, now: int, fault: str) -> list[str]:
        """Stop the parent's tree (docs/protocol.md §13): its running children (and theirs)
        move to STOPPING and wind down; those that have not started fail with
        ``fault`` (they have nothing to hand back).  Answers the ids changed."""
        changed = []
        with self._write() as conn:
            pending = [parent_id]
            while pending:
                parent = pending.pop()
                query = select(jobs.c.id, jobs.c.status, jobs.c.waiting_for).where(
                    jobs.c.parent_id == parent, jobs.c.status.in_((Status.QUEUING, Status.RUNNING))
                )
                for child_id, status, waiting_for in conn.execute(self._locking(query)).all():
                    child = jobs.c.id == child_id
                    if status == Status.QUEUING:
                        conn.execute(
                            update(jobs)
                            .where(child, jobs.c.status == Status.QUEUING)
                            .values(
                                **failed_by_store(
                                    now, fault, "its parent was stopped before it started"
                                )
                            )
                        )
                    else:
                        conn.execute(
                            update(jobs)
                            .where(child, jobs.c.status == Status.RUNNING)
                            .values(
                                status=Status.STOPPING,
                                event_note="stop asked: its parent was stopped",
                            )
                        )
                        if waiting_for is not None:
                            pending.append(child_id)
                    changed.append(child_id)
        return changed

    def delete_children(self, parent_id: str) -> list[str]:
        """Before a parent is erased (its children go with it, ``ON DELETE
        CASCADE``): mark its descendants that hold a worker DELETED, so that their
        workers let go at once.  Answers their ids, to be told of the change."""
        with self._read() as conn:
            if (
                conn.execute(
                    select(jobs.c.seq).where(jobs.c.parent_id == parent_id).limit(1)
                ).first()
                is None
            ):
                return []  # not a parent: no write transaction
        running = []
        with self._write() as conn:
            pending = [parent_id]
            while pending:
                parent = pending.pop()
                query = select(jobs.c.id, jobs.c.node).where(
                    jobs.c.parent_id == parent, jobs.c.status.in_(ACTIVE_RUNNING)
                )
                for child_id, node in conn.execute(query).all():
                    if node is None:  # a parent waiting for children of its own
                        pending.append(child_id)
                        continue
                    conn.execute(
                        update(jobs)
                        .where(jobs.c.id == child_id, jobs.c.status.in_(ACTIVE_RUNNING))
                        .values(status=Status.DELETED, event_note="deleted: its parent was deleted")
                    )
                    running.append(child_id)
        return running

    def waiting_timed_out(
        self,
        now: int,
        default_timeout_ms: int,
        services: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
    ) -> list[str]:
        """Parents waiting for their children past their computation timeout (counted
        from their first start, shortened by the request's own as for any job): the
        ids, to be stopped (no worker holds them to notice)."""
        timeout = timeout_of(jobs.c.computation_timeout, default_timeout_ms)
        query = select(jobs.c.id).where(
            jobs.c.waiting_for.is_not(None),
            jobs.c.status == Status.RUNNING,
            timeout > 0,
            jobs.c.started_at + timeout <= now,
        )
        with self._read() as conn:
            return [
                row[0] for row in conn.execute(of_services(query, services, exclude).limit(1000))
            ]


def _over_a_limit(
    conn: Connection, children: list[JobRecord], owner: str, limits: Iterable[QueueLimit]
) -> QueueFull | None:
    """The first of ``limits`` that ``children`` (of ``owner``) would exceed, as a
    QueueFull, or None."""
    for limit in limits:
        adding = sum(1 for child in children if child.service == limit.service)
        if not adding:
            continue
        if limit.max_queued:
            of = QUEUED.where(jobs.c.service == limit.scope) if limit.scope is not None else QUEUED
            if conn.execute(of).scalar_one() + adding > limit.max_queued:
                return QueueFull(limit.service, limit.max_queued, own=False)
        if limit.owner_max_queued:
            of_lane = QUEUED.where(jobs.c.lane == lane_of(limit.service, owner))
            if conn.execute(of_lane).scalar_one() + adding > limit.owner_max_queued:
                return QueueFull(limit.service, limit.owner_max_queued, own=True)
    return None
