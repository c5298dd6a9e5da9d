"""The job store on SQLAlchemy Core, for SQLite (embedded default) and PostgreSQL.

This is the only module that speaks SQL.  Every change is one short transaction with a
guard on the job's current state (``UPDATE … WHERE id = :id AND status IN (…)``), so
of two actors racing on a job exactly one wins.  SQLite runs in WAL mode; its writers
are serialised by a lock in each process and by SQLite's own lock between processes;
PostgreSQL's are kept apart by row locks and ``FOR UPDATE SKIP LOCKED`` claims.  Several processes of a
node write to SQLite: a write transaction takes the database's write lock when it
begins (``BEGIN IMMEDIATE``), so a read-then-write (the ``max_queued`` check) is
atomic across processes too.
"""
import json
import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager, nullcontext
from typing import Iterable, Optional

from sqlalchemy import (LargeBinary, bindparam, case, create_engine, delete, event, func, insert,
                        literal, literal_column, select, text, true, update)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from .base import FinishedChild, JobRecord, QueueFull, QueueLimit, Recovered, Run, StoreUnavailable
from .migrate import upgrade
from .postgresql import POOL_TIMEOUT_S, postgresql_connect_args
from .clock import DatabaseClock, stop_using as stop_using_clock, use as use_clock
from .payload import pack, unpack
from .schema import feed_metadata, job_events, jobs, lane_of, metadata

ACTIVE_RUNNING = ("RUNNING", "STOPPING")
#: States in which a job holds a worker (a deleted one until its worker lets go).
HOLDING_WORKER = ACTIVE_RUNNING + ("DELETED",)
BUSY_TIMEOUT_S = 10.0             # how long an SQLite write waits for another process's
SCHEMA_LOCK_KEY = 0x78727430      # advisory lock serialising the schema's creation
SCHEMA_WAIT_S = 30.0              # how long opening an SQLite store waits for the write lock
QUEUE_LOCK_KEY = 0x78727431        # advisory lock serialising max_queued checks on PostgreSQL


_PAYLOADS = ("request", "result", "fault", "progress")
#: Columns the store keeps for itself: never part of a JobRecord.
_INTERNAL = ("seq", "lane", "event_note", "stored_bytes")
#: The lane of a parent waiting for its children: none, so that max_running, which
#: counts the jobs of a lane that hold a worker, does not count it (it holds none).
WAITING_LANE = ""
#: States in which a child still has to finish (a deleted one until its worker lets go).
UNFINISHED = ("QUEUING",) + HOLDING_WORKER
_LIGHT = [c for c in jobs.c if c.name not in _INTERNAL + ("request", "result", "fault")]

# The hot path: SQLAlchemy Core statements compiled once for the dialect and run on a
# pooled DBAPI connection.  SQLAlchemy's per-execution work costs ten times what
# SQLite needs to run these statements, and every job cycle runs a dozen of them.

def _states(states, table=jobs):
    """A fixed state list, rendered into the SQL (our own constants, never input)."""
    return table.c.status.in_([literal_column(repr(str(s))) for s in states])


_ID = bindparam("job_id")
_ALL = [c.name for c in jobs.c if c.name not in _INTERNAL]
_LIGHT_NAMES = [c.name for c in _LIGHT]


class Prepared:
    """A statement compiled once; ``args(params)`` in the driver's parameter style."""

    def __init__(self, statement, dialect, columns=None, column_keys=None):
        compiled = statement.compile(dialect=dialect, column_keys=column_keys)
        self.sql = compiled.string
        self.names = list(compiled.positiontup) if dialect.positional else None
        self.defaults = {k: (v if isinstance(v, (int, str)) else None)
                         for k, v in compiled.params.items()}
        self.columns = columns

    def args(self, params):
        values = dict(self.defaults, **params)
        return [values[n] for n in self.names] if self.names is not None else values


def _statements():
    """key → (statement builder, result columns, insert column keys)."""
    return {
        "get": (lambda: select(*[jobs.c[n] for n in _ALL]).where(jobs.c.id == _ID), _ALL, None),
        "get_owned": (lambda: select(*[jobs.c[n] for n in _ALL])
                      .where(jobs.c.id == _ID, jobs.c.owner == bindparam("owner")), _ALL, None),
        "peek": (lambda: select(*_LIGHT).where(jobs.c.id == _ID), _LIGHT_NAMES, None),
        "count_queued": (lambda: select(func.count()).select_from(jobs)
                         .where(jobs.c.status == "QUEUING"), None, None),
        "count_queued_of": (lambda: select(func.count()).select_from(jobs)
                            .where(jobs.c.status == "QUEUING", jobs.c.service == bindparam("service")),
                            None, None),
        "count_queued_in_lane": (lambda: select(func.count()).select_from(jobs)
                                 .where(jobs.c.status == "QUEUING", jobs.c.lane == bindparam("lane")),
                                 ["n"], None),
        "insert": (lambda: insert(jobs), None, _INSERT_KEYS),
        "stored_bytes": (lambda: select(func.coalesce(func.sum(jobs.c.stored_bytes), 0))
                         .where(jobs.c.owner == bindparam("owner")), ["n"], None),
        "mark_fetched": (lambda: update(jobs).where(jobs.c.id == _ID, jobs.c.first_fetched_at.is_(None))
                         .values(first_fetched_at=bindparam("now")), None, None),
    }


#: How many jobs are queued; narrowed to a service or a lane by the max_queued checks.
_QUEUED = select(func.count()).select_from(jobs).where(jobs.c.status == "QUEUING")


def _insert_below(limited: bool, scoped: bool, lane_limited: bool):
    """Insert a job only while fewer than ``max_queued`` jobs (``limited``; of
    ``service`` when ``scoped``) and fewer than ``owner_max_queued`` of its lane
    (``lane_limited``) are queued: the checks and the insert in one statement (SQLite)."""
    queued = _QUEUED
    below = []
    if limited:
        of = queued.where(jobs.c.service == bindparam("service")) if scoped else queued
        below.append(of.scalar_subquery() < bindparam("max_queued"))
    if lane_limited:
        below.append(queued.where(jobs.c.lane == bindparam("lane")).scalar_subquery()
                     < bindparam("owner_max_queued"))
    row = select(*[bindparam(k, type_=jobs.c[k].type) for k in _INSERT_KEYS]).where(*below)
    return insert(jobs).from_select(_INSERT_KEYS, row)


def _over_a_limit(conn, children, owner, limits):
    """The first of ``limits`` that ``children`` (of ``owner``) would exceed, as a
    QueueFull, or None."""
    queued = _QUEUED
    for limit in limits:
        adding = sum(1 for child in children if child.service == limit.service)
        if not adding:
            continue
        if limit.max_queued:
            of = queued.where(jobs.c.service == limit.scope) if limit.scope is not None else queued
            if conn.execute(of).scalar() + adding > limit.max_queued:
                return QueueFull(limit.service, limit.max_queued, own=False)
        if limit.owner_max_queued:
            of_lane = queued.where(jobs.c.lane == lane_of(limit.service, owner))
            if conn.execute(of_lane).scalar() + adding > limit.owner_max_queued:
                return QueueFull(limit.service, limit.owner_max_queued, own=True)
    return None


def _guarded_statements(states, fenced=False):
    """Statements guarded on the job being in one of ``states`` (and, ``fenced``, still
    the run ``run_node``/``run_attempt``'s: see ``Run``)."""
    guard = (jobs.c.id == _ID, _states(states)) + (_RUN_FENCE if fenced else ())
    return {
        "set_progress": update(jobs).where(*guard).values(progress=bindparam("progress_blob")),
        "set_status": update(jobs).where(*guard).values(status=bindparam("new_status"),
                                                        event_note=bindparam("note")),
        "finish": update(jobs).where(*guard).values(
            status=bindparam("new_status"), finished_at=bindparam("now"), event_note=bindparam("note"),
            result=bindparam("result_blob"), fault=bindparam("fault_blob"),
            progress=func.coalesce(bindparam("progress_blob", type_=LargeBinary), jobs.c.progress),
            lease_until=None),
        "erase": delete(jobs).where(*guard),
    }


#: The job is still the run's (``Run``): its node, and the attempt that took it.
_RUN_FENCE = (jobs.c.node == bindparam("run_node"), jobs.c.attempts == bindparam("run_attempt"))

_INSERT_KEYS = ["id", "service", "operation", "fetch_type", "status", "queued_at", "attempts",
                "queueing_timeout", "computation_timeout", "request", "owner", "lane"]


def _claim_statement(dialect, services=None, running_limits=()):
    """Move the next job to RUNNING: the oldest queued one (of ``services``), or with
    ``running_limits`` the oldest whose lane is under its owner's max_running."""
    if running_limits:
        oldest = _fair_oldest(dialect, services, running_limits)
    else:
        oldest = select(jobs.c.seq).where(jobs.c.status == "QUEUING", _due(jobs))
        if services is not None:
            oldest = oldest.where(jobs.c.service.in_([literal(name) for name in services]))
        oldest = oldest.order_by(jobs.c.seq).limit(1)
        if dialect == "postgresql":
            oldest = oldest.with_for_update(skip_locked=True, of=jobs)
    return (update(jobs)
            .where(jobs.c.seq == oldest.scalar_subquery(), jobs.c.status == "QUEUING")
            .values(status="RUNNING", node=bindparam("node"), started_at=bindparam("now_ms"),
                    event_note=bindparam("note"),
                    attempts=jobs.c.attempts + 1, lease_until=bindparam("lease_until"))
            .returning(*jobs.c))


def _resume_statement(dialect, services=None):
    """Take the oldest parent whose children are all finished (docs/protocol.md §13): it runs
    again on this node, where it left off (its status, attempts and start unchanged)."""
    parent, child = jobs.alias("parent"), jobs.alias("child")
    unfinished = select(child.c.seq).where(child.c.parent_id == parent.c.id,
                                           _states(UNFINISHED, child)).exists()
    ready = select(parent.c.seq).where(parent.c.waiting_for.is_not(None), parent.c.node.is_(None),
                                       _states(ACTIVE_RUNNING, parent), ~unfinished)
    if services is not None:
        ready = ready.where(parent.c.service.in_([literal(name) for name in services]))
    ready = ready.order_by(parent.c.seq).limit(1)
    if dialect == "postgresql":
        ready = ready.with_for_update(skip_locked=True, of=parent)
    return (update(jobs)
            .where(jobs.c.seq == ready.scalar_subquery(), jobs.c.waiting_for.is_not(None),
                   jobs.c.node.is_(None))
            .values(node=bindparam("node"), lease_until=bindparam("lease_until"), waiting_for=None,
                    lane=jobs.c.service + "/" + jobs.c.owner, event_note=bindparam("note"))
            .returning(*jobs.c))


def _due(table):
    """Not waiting for a retry (or its time has come)."""
    return table.c.not_before.is_(None) | (table.c.not_before <= bindparam("now_ms"))


def _fair_oldest(dialect, services, running_limits):
    """The oldest queued job whose lane runs fewer jobs than its owner's max_running
    (docs/protocol.md §10); a parent waiting for its children holds no worker and is not
    counted (it leaves its lane meanwhile, see ``suspend``).  Only the first job of each lane is a candidate, and the lanes are
    found by a walk over the (status, lane, seq) index, one step a lane: the cost
    grows with the number of lanes, not of the jobs queued in them (100 000 jobs of
    one user over quota do not slow anyone's claim).  On PostgreSQL, as the first job
    of a lane is the only candidate, two nodes never take two jobs of a lane at once:
    the one that finds it locked skips the lane until its next claim.

    The statement's shape keeps the planners on that path whatever their statistics
    say (benchmarks/fairness.py found each way off it: PostgreSQL, before it had
    analysed a flood of one lane, read every queued job, and after, read the lane's
    jobs in ``seq`` order to find its first; SQLite, once analysed, built a Bloom
    filter over the whole table for the join to the candidates).  On PostgreSQL a
    lane's first job is read from the index alone (``_first_due_pg``), and each head
    is checked and locked in a LATERAL subquery of its own, the heads sorted by
    ``seq`` beforehand, so the checks run on the heads alone (on the head's own lane)
    and only the job taken is locked.  SQLite, which needs no lock, joins nothing: a
    lane names its service and owner ("service/owner", neither holding a "/"), so the
    checks are on the lane."""
    step = jobs.alias("step")
    lanes = select(func.min(jobs.c.lane).label("lane")).where(jobs.c.status == "QUEUING") \
        .cte("lanes", recursive=True)
    following = select(func.min(step.c.lane)).where(step.c.status == "QUEUING",
                                                     step.c.lane > lanes.c.lane).scalar_subquery()
    lanes = lanes.union_all(select(following).where(lanes.c.lane.is_not(None)))
    held = jobs.alias("held")
    if dialect != "postgresql":
        head = jobs.alias("head")
        first = select(head.c.seq).where(head.c.status == "QUEUING", head.c.lane == lanes.c.lane,
                                         _due(head)).order_by(head.c.seq).limit(1).scalar_subquery()
        heads = select(lanes.c.lane, first.label("seq")).where(lanes.c.lane.is_not(None)).subquery("heads")
        lane = heads.c.lane
        limit = case(*[(lane == literal(lane_of(service, owner)) if service is not None
                        else func.substr(lane, -len(owner) - 1) == literal("/" + owner), literal(most))
                       for owner, service, most in running_limits], else_=literal(0))
        running = select(func.count()).select_from(held) \
            .where(_states(HOLDING_WORKER, held), held.c.lane == lane).scalar_subquery()
        oldest = select(heads.c.seq).where(heads.c.seq.is_not(None), (limit == 0) | (running < limit))
        if services is not None:
            oldest = oldest.where(func.substr(lane, 1, func.instr(lane, "/") - 1)
                                  .in_([literal(name) for name in services]))
        return oldest.order_by(heads.c.seq).limit(1)
    heads = select(_first_due_pg(lanes.c.lane).label("seq")).where(lanes.c.lane.is_not(None)) \
        .order_by(literal_column("seq")).subquery("heads")     # the LATERAL below runs in this order
    job = jobs.alias("candidate")
    limit = case(*[((job.c.owner == literal(owner)) & (job.c.service == literal(service))
                    if service is not None else job.c.owner == literal(owner), literal(most))
                   for owner, service, most in running_limits], else_=literal(0))
    running = select(func.count()).select_from(held) \
        .where(_states(HOLDING_WORKER, held), held.c.lane == job.c.lane).scalar_subquery()
    taken = select(job.c.seq).where(job.c.seq == heads.c.seq, job.c.status == "QUEUING",
                                    (limit == 0) | (running < limit))
    if services is not None:
        taken = taken.where(job.c.service.in_([literal(name) for name in services]))
    taken = taken.with_for_update(skip_locked=True).lateral("taken")
    return select(taken.c.seq).select_from(heads).join(taken, true()) \
        .order_by(heads.c.seq).limit(1)


def _first_due_pg(lane):
    """The first due job of ``lane`` on PostgreSQL, found the same way whatever the
    planner's statistics: the lane's first entry in the (status, lane, seq) index (the
    first at or after the lane in (lane, seq) order, which no other index gives, read
    from the index alone), taken if it is due.  Only when it waits for a retry are
    the lane's jobs read in turn for the first due one: the first due entry at or
    after the lane, this lane's or, if none of its jobs is due, the next lane's, which
    the check on each candidate's own lane then treats as that lane's."""
    entry, checked, later = jobs.alias("entry"), jobs.alias("checked"), jobs.alias("later")
    first_entry = select(entry.c.seq).where(entry.c.status == "QUEUING", entry.c.lane >= lane) \
        .order_by(entry.c.lane, entry.c.seq).limit(1).correlate_except(entry).scalar_subquery()
    if_due = select(checked.c.seq).where(checked.c.seq == first_entry, _due(checked)).scalar_subquery()
    first_due = select(later.c.seq).where(later.c.status == "QUEUING", later.c.lane >= lane, _due(later)) \
        .order_by(later.c.lane, later.c.seq).limit(1).scalar_subquery()
    return func.coalesce(if_due, first_due)


def _record(data: Optional[dict], max_result_bytes: Optional[int] = None) -> Optional[JobRecord]:
    if data is None:
        return None
    for name in _INTERNAL:
        data.pop(name, None)
    for name in _PAYLOADS:
        if name in data:
            data[name] = unpack(data[name], max_result_bytes if name == "result" else None)
    return JobRecord(**data)


def _private_database_file(path: str) -> None:
    """The SQLite file readable by the server's user alone (0600; SQLite gives its
    journal and WAL files the database's mode), in a folder of its own (0700) when the
    server creates it: it holds every user's requests and results."""
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        os.makedirs(folder, mode=0o700, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    if os.stat(path).st_mode & 0o077:
        try:
            os.chmod(path, 0o600)
        except OSError as exc:             # not the owner: say so, and serve
            logging.getLogger("xruntime.store").warning(
                "the database %s is readable by other users and cannot be made private: %s", path, exc)


class SqlJobStore:
    """JobStore on a SQLAlchemy URL (``sqlite:///path`` or ``postgresql+psycopg://…``)."""

    def __init__(self, url: str):
        self.url = url
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        if self.dialect == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                _private_database_file(os.path.abspath(parsed.database))
            self.engine = create_engine(url, pool_size=20, max_overflow=200, pool_reset_on_return=None,
                                        connect_args={"check_same_thread": False})
            event.listen(self.engine, "connect", _sqlite_pragmas)
            self._write_lock = threading.Lock()
        else:
            self.engine = create_engine(url, pool_size=20, max_overflow=100, pool_pre_ping=True,
                                        pool_timeout=POOL_TIMEOUT_S,
                                        connect_args=postgresql_connect_args(parsed.query))
            self._write_lock = None        # row locks keep PostgreSQL's writers apart
        self._make_schema()
        self.clock = None
        if self.dialect == "postgresql":   # several hosts: the database's clock decides
            self.clock = DatabaseClock(self._database_ms)
            use_clock(self.clock)
        dialect = self.engine.dialect
        self._prepared = {key: Prepared(build(), dialect, columns, keys)
                          for key, (build, columns, keys) in _statements().items()}
        self._claims = {}                 # (services, running limits) → Prepared claim
        self._inserts = {}                # (limited, scoped, lane limited) → Prepared insert
        self._guarded_cache = {}

    def _make_schema(self):
        """Create the tables (or bring an older database up to date) in one transaction:
        on PostgreSQL under an advisory lock, so that nodes starting together do it
        once; on SQLite with the write lock, waited for (up to SCHEMA_WAIT_S) while the
        node's other processes or a cleanup are writing."""
        deadline = time.monotonic() + SCHEMA_WAIT_S

        def attempt():
            with self.engine.begin() as conn:
                if self.dialect == "postgresql":   # an upgrade may rewrite a large table
                    conn.execute(text("SET LOCAL statement_timeout = 0"))
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
                else:
                    begin_immediate(conn.exec_driver_sql, deadline)
                metadata.create_all(conn)
                upgrade(conn)
                if self.dialect == "sqlite":
                    feed_metadata.create_all(conn)

        retry_while_busy(attempt, deadline)

    # ----------------------------------------------------------------- helpers

    @contextmanager
    def _writing(self, deadline: float):
        """This process's turn to write to SQLite, waited for until ``deadline``: a
        write waits BUSY_TIMEOUT_S in all for both locks (this process's and the
        database's), so that requests queued behind a locked database each fail
        after that time, not one after the other."""
        if self._write_lock is None:
            yield
            return
        if not self._write_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise StoreUnavailable(f"the database stayed locked for {BUSY_TIMEOUT_S:g} s")
        try:
            yield
        finally:
            self._write_lock.release()

    @contextmanager
    def _write(self):
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        with unavailable_as_store_error(), self._writing(deadline), self.engine.begin() as conn:
            if self.dialect == "sqlite":     # other processes write too: take the lock first
                begin_immediate(conn.exec_driver_sql, deadline)
            yield conn

    @contextmanager
    def _cursor(self, write: bool):
        """A DBAPI cursor on a pooled connection, committed at the end.  On SQLite the
        connection commits each statement itself (every hot-path write is a single
        statement), so the database's write lock is held only while SQLite runs it,
        never while Python waits for its GIL."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        with unavailable_as_store_error(), (self._writing(deadline) if write else nullcontext()):
            conn = self.engine.raw_connection()
            try:
                cur = PatientCursor(conn.cursor(), deadline)
                yield cur
                conn.commit()
            except BaseException:
                try:
                    conn.rollback()
                except Exception:      # the connection is lost (a cut, a restart): the pool
                    conn.invalidate()  # drops it, rather than fail its reset with a traceback
                raise
            finally:
                conn.close()

    def _run(self, key, write: bool, **params):
        """Run a prepared statement (its key, or a Prepared); answers (rowcount, first
        row as a dict or None)."""
        p = key if isinstance(key, Prepared) else self._prepared[key]
        with self._cursor(write) as cur:
            cur.execute(p.sql, p.args(params))
            rows = cur.fetchall() if p.columns else ()    # to its end: the statement is done
            row = rows[0] if rows else None
            return cur.rowcount, (dict(zip(p.columns, row)) if row is not None else None)

    def _guarded(self, key, job_id, states, run: Optional[Run] = None, **values) -> bool:
        """Run a guarded statement; True if the job was in one of ``states`` (and
        still ``run``'s, when given)."""
        states = tuple(states)
        cached = (key, states, run is not None)
        p = self._guarded_cache.get(cached)
        if p is None:
            p = Prepared(_guarded_statements(states, run is not None)[key], self.engine.dialect)
            self._guarded_cache[cached] = p
        if run is not None:
            values.update(run_node=run.node, run_attempt=run.attempt)
        with self._cursor(True) as cur:
            cur.execute(p.sql, p.args(dict(values, job_id=job_id)))
            return cur.rowcount == 1

    # ----------------------------------------------------------------- the interface

    def create(self, job: JobRecord, max_queued: int, scope: Optional[str] = None,
               owner_max_queued: int = 0) -> bool:
        """Insert a QUEUING job; False when ``max_queued`` jobs are queued already (jobs
        of service ``scope`` only, when given), or ``owner_max_queued`` jobs of its
        owner and service (0: no such limit)."""
        values = {k: getattr(job, k) for k in _INSERT_KEYS if k != "lane"}
        values["request"] = pack(job.request)
        values["lane"] = lane_of(job.service, job.owner)
        if self.dialect == "sqlite":             # one statement: count and insert at once
            if not max_queued and not owner_max_queued:
                return self._run("insert", True, **values)[0] == 1
            key = (bool(max_queued), scope is not None, bool(owner_max_queued))
            p = self._inserts.get(key)
            if p is None:
                p = self._inserts[key] = Prepared(_insert_below(*key), self.engine.dialect)
            # the insert's own ``service`` is the job's, which is the scope's
            return self._run(p, True, max_queued=max_queued, owner_max_queued=owner_max_queued,
                             **values)[0] == 1
        count, of_lane = (self._prepared["count_queued" if scope is None else "count_queued_of"],
                          self._prepared["count_queued_in_lane"])
        insert_ = self._prepared["insert"]
        with self._cursor(True) as cur:
            if max_queued or owner_max_queued:     # count-then-insert must not interleave
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
        return self._run("count_queued_in_lane", False, lane=lane_of(service, owner))[1]["n"]

    def stored_bytes(self, owner: str) -> int:
        """The bytes the payloads of ``owner``'s jobs take as stored, all services and
        states together (the jobs not yet erased), summed over the (owner,
        stored_bytes) index: a few ms per 100 000 of the owner's jobs."""
        return int(self._run("stored_bytes", False, owner=owner)[1]["n"])

    def get(self, job_id: str, owner: Optional[str] = None,
            max_result_bytes: Optional[int] = None) -> Optional[JobRecord]:
        """The whole job; with ``owner``, only if it is theirs (another's job is not
        even read, so answering "no such job" takes the time it takes for an unknown id).
        With ``max_result_bytes``, ``payload.TooLarge`` for a longer result."""
        if owner is None:
            return _record(self._run("get", False, job_id=job_id)[1], max_result_bytes)
        return _record(self._run("get_owned", False, job_id=job_id, owner=owner)[1], max_result_bytes)

    def peek(self, job_id: str) -> Optional[JobRecord]:
        """The job without its request, result and fault: what watch, stop and delete
        need, without reading a large result."""
        return _record(self._run("peek", False, job_id=job_id)[1])

    def claim(self, node: str, now: int, lease_ms: int, services: Optional[Iterable[str]] = None,
              running_limits: tuple = (), note: str = "running") -> Optional[JobRecord]:
        """Move the next queued job (of ``services``) to RUNNING on ``node``: the oldest,
        or with ``running_limits`` ((owner, service or None, max_running), ...: a user's
        per-service limit before their own) the oldest whose owner runs fewer of that
        service's jobs than allowed.  A job waiting for its retry is not taken before
        its time.  None when no job may start; ``note`` is the event's message."""
        key = (None if services is None else tuple(services), tuple(running_limits))
        p = self._claims.get(key)
        if p is None:
            if len(self._claims) > 32:        # limits changed many times: start afresh
                self._claims.clear()
            p = self._claims[key] = Prepared(_claim_statement(self.dialect, *key), self.engine.dialect,
                                             [c.name for c in jobs.c])
        params = {"node": node, "now_ms": now, "lease_until": now + lease_ms, "note": note_of(note)}
        return _record(self._run(p, True, **params)[1])

    def next_due(self, now: int) -> Optional[int]:
        """When the first job waiting for its retry may run (ms), or None."""
        with unavailable_as_store_error(), self.engine.connect() as conn:
            return conn.execute(select(func.min(jobs.c.not_before)).where(
                jobs.c.not_before.is_not(None), jobs.c.not_before > now,
                jobs.c.status == "QUEUING")).scalar()

    def retry(self, job_id: str, not_before: int, note: str, run: Optional[Run] = None) -> bool:
        """A running job back to QUEUING until ``not_before`` (ms), its retry counted."""
        with self._write() as conn:
            return conn.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.status == "RUNNING",
                                                   *_fence(run)).values(
                status="QUEUING", node=None, started_at=None, progress=None, lease_until=None,
                not_before=not_before, retries=jobs.c.retries + 1,
                event_note=note_of(note))).rowcount == 1

    # ----------------------------------------------------------------- child jobs

    def suspend(self, parent_id: str, node: str, stage: int, fail_fast: bool, children: list,
                progress: str, note: str, limits: Iterable[QueueLimit] = (), run: Optional[Run] = None):
        """The running parent waits for ``children`` (JobRecords, stored QUEUING as its
        own, in its owner's lane): in one transaction they are inserted and the parent
        lets go of its node and its lane, holding no worker until ``resume`` takes it.  Answers the
        parent's status (RUNNING or STOPPING), False when it no longer runs on ``node``
        (deleted meanwhile), or a QueueFull when the children would take the queue past
        one of ``limits``, as a start would (docs/protocol.md §15): in both, nothing is stored."""
        with self._write() as conn:
            if self.dialect == "postgresql" and limits:      # as create's count-then-insert
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": QUEUE_LOCK_KEY})
            query = select(jobs.c.status, jobs.c.owner).where(
                jobs.c.id == parent_id, jobs.c.node == node, jobs.c.status.in_(ACTIVE_RUNNING), *_fence(run))
            if self.dialect == "postgresql":
                query = query.with_for_update()
            row = conn.execute(query).first()
            if row is None:
                return False
            status, owner = row
            full = _over_a_limit(conn, children, owner, limits)
            if full is not None:
                return full
            rows = []
            for index, child in enumerate(children):
                values = {k: getattr(child, k) for k in _INSERT_KEYS if k not in ("lane", "owner")}
                values.update(request=pack(child.request), owner=owner, lane=lane_of(child.service, owner),
                              parent_id=parent_id, child_stage=stage, child_index=index,
                              event_note=note_of(f"queued: child {index + 1} of {len(children)} "
                                                 f"of job {parent_id}"))
                rows.append(values)
            if rows:
                conn.execute(insert(jobs), rows)
            conn.execute(update(jobs).where(jobs.c.id == parent_id).values(
                node=None, lease_until=None, waiting_for=stage, fail_fast=int(bool(fail_fast)), lane=WAITING_LANE,
                progress=pack(progress), event_note=note_of(note)))
            return status

    def resume(self, node: str, now: int, lease_ms: int, services: Optional[Iterable[str]] = None,
               note: str = "resumed: its child jobs are done") -> Optional[JobRecord]:
        """Take the oldest waiting parent (of ``services``) whose children have all
        finished: it runs again on ``node``; None when there is none."""
        key = ("resume", None if services is None else tuple(services))
        p = self._claims.get(key)
        if p is None:
            p = self._claims[key] = Prepared(_resume_statement(self.dialect, key[1]), self.engine.dialect,
                                             [c.name for c in jobs.c])
        return _record(self._run(p, True, node=node, lease_until=now + lease_ms, note=note_of(note))[1])

    def children_of(self, parent_id: str) -> list:
        """Every finished child of the parent, as ChildOutcomes in the order its function
        asked for them (stage, then place)."""
        query = select(jobs.c.id, jobs.c.child_stage, jobs.c.child_index, jobs.c.service, jobs.c.operation,
                       jobs.c.status, jobs.c.result, jobs.c.fault, jobs.c.finished_at) \
            .where(jobs.c.parent_id == parent_id, jobs.c.status.in_(("SUCCEEDED", "FAILED"))) \
            .order_by(jobs.c.child_stage, jobs.c.child_index)
        with unavailable_as_store_error(), self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [FinishedChild(id=r[0], stage=r[1], index=r[2], service=r[3], operation=r[4], status=r[5],
                              result=None if r[6] is None else bytes(r[6]), fault=unpack(r[7]),
                              finished_at=r[8]) for r in rows]

    def refresh_waiting_progress(self, parent_id: str, make_progress) -> Optional[bool]:
        """Set a waiting parent's progress to ``make_progress(successful, failed,
        remaining)`` (JSON text) over the children it waits for, counted and written in
        one transaction (two children finishing at once cannot write their counts in
        the wrong order).  Answers None when the parent does not wait, else whether it
        waits with ``fail_fast`` and a child failed (its siblings should be stopped)."""
        with self._write() as conn:
            query = select(jobs.c.waiting_for, jobs.c.fail_fast).where(
                jobs.c.id == parent_id, jobs.c.waiting_for.is_not(None))
            if self.dialect == "postgresql":
                query = query.with_for_update()
            row = conn.execute(query).first()
            if row is None:
                return None
            stage, fail_fast = row
            counts = dict(conn.execute(
                select(jobs.c.status, func.count()).where(jobs.c.parent_id == parent_id,
                                                          jobs.c.child_stage == stage)
                .group_by(jobs.c.status)).all())
            successful, failed = counts.pop("SUCCEEDED", 0), counts.pop("FAILED", 0)
            conn.execute(update(jobs).where(jobs.c.id == parent_id).values(
                progress=pack(make_progress(successful, failed, sum(counts.values())))))
            return bool(fail_fast) and failed > 0

    def stop_children(self, parent_id: str, now: int, fault: str) -> list:
        """Stop the parent's tree (docs/protocol.md §13): its running children (and theirs)
        move to STOPPING and wind down; those that have not started fail with
        ``fault`` (they have nothing to hand back).  Answers the ids changed."""
        changed = []
        with self._write() as conn:
            pending = [parent_id]
            while pending:
                parent = pending.pop()
                query = select(jobs.c.id, jobs.c.status, jobs.c.waiting_for).where(
                    jobs.c.parent_id == parent, jobs.c.status.in_(("QUEUING", "RUNNING")))
                if self.dialect == "postgresql":
                    query = query.with_for_update()
                for child_id, status, waiting_for in conn.execute(query).all():
                    if status == "QUEUING":
                        conn.execute(update(jobs).where(jobs.c.id == child_id, jobs.c.status == "QUEUING")
                                     .values(status="FAILED", finished_at=now, fault=pack(fault),
                                             event_note=note_of(f"failed: {fault_type(fault)} (its parent "
                                                                "was stopped before it started)")))
                    else:
                        conn.execute(update(jobs).where(jobs.c.id == child_id, jobs.c.status == "RUNNING")
                                     .values(status="STOPPING",
                                             event_note="stop asked: its parent was stopped"))
                        if waiting_for is not None:
                            pending.append(child_id)
                    changed.append(child_id)
        return changed

    def delete_children(self, parent_id: str) -> list:
        """Before a parent is erased (its children go with it, ``ON DELETE
        CASCADE``): mark its descendants that hold a worker DELETED, so that their
        workers let go at once.  Answers their ids, to be told of the change."""
        with unavailable_as_store_error(), self.engine.connect() as conn:
            if conn.execute(select(jobs.c.seq).where(jobs.c.parent_id == parent_id).limit(1)).first() is None:
                return []                           # not a parent: no write transaction
        running = []
        with self._write() as conn:
            pending = [parent_id]
            while pending:
                parent = pending.pop()
                query = select(jobs.c.id, jobs.c.node).where(jobs.c.parent_id == parent,
                                                             jobs.c.status.in_(ACTIVE_RUNNING))
                for child_id, node in conn.execute(query).all():
                    if node is None:                # a parent waiting for children of its own
                        pending.append(child_id)
                        continue
                    conn.execute(update(jobs).where(jobs.c.id == child_id, jobs.c.status.in_(ACTIVE_RUNNING))
                                 .values(status="DELETED", event_note="deleted: its parent was deleted"))
                    running.append(child_id)
        return running

    def set_progress(self, job_id: str, progress: str, run: Optional[Run] = None) -> bool:
        return self._guarded("set_progress", job_id, ACTIVE_RUNNING, run, progress_blob=pack(progress))

    def request_stop(self, job_id: str, note: str = "stop asked") -> bool:
        return self._guarded("set_status", job_id, ("RUNNING",), new_status="STOPPING", note=note_of(note))

    def finish(self, job_id: str, status: str, now: int, *, result: Optional[str] = None,
               fault: Optional[str] = None, progress: Optional[str] = None,
               from_states=ACTIVE_RUNNING, note: Optional[str] = None, run: Optional[Run] = None) -> bool:
        """An active job → SUCCEEDED (with result: JSON text, or bytes already in the
        stored form) or FAILED (with fault); the event says "succeeded", or "failed:
        <fault type>" and ``note``."""
        message = "succeeded" if status == "SUCCEEDED" else f"failed: {fault_type(fault)}"
        return self._guarded("finish", job_id, from_states, run, new_status=status, now=now,
                             result_blob=result if isinstance(result, bytes) else pack(result),
                             fault_blob=pack(fault),
                             progress_blob=pack(progress),
                             note=note_of(f"{message} ({note})" if note else message))

    def mark_deleted(self, job_id: str) -> bool:
        return self._guarded("set_status", job_id, ACTIVE_RUNNING, new_status="DELETED", note="deleted")

    def erase(self, job_id: str, statuses: Iterable[str]) -> bool:
        return self._guarded("erase", job_id, statuses)

    def mark_fetched(self, job_id: str, now: int) -> None:
        self._run("mark_fetched", True, job_id=job_id, now=now)

    def hand_back(self, job_id: str, node: str, run: Optional[Run] = None) -> bool:
        with self._write() as conn:
            res = conn.execute(
                update(jobs).where(jobs.c.id == job_id, jobs.c.node == node,
                                   jobs.c.status.in_(ACTIVE_RUNNING), *_fence(run))
                .values(status="QUEUING", node=None, started_at=None, progress=None,
                        lease_until=None, attempts=jobs.c.attempts - 1,
                        event_note="handed back: its node shut down"))
            if res.rowcount == 0:
                conn.execute(delete(jobs).where(jobs.c.id == job_id, jobs.c.node == node,
                                                jobs.c.status == "DELETED"))
            return res.rowcount == 1

    def renew_leases(self, node: str, until: int, job_ids: Iterable[str]) -> list:
        job_ids = list(job_ids)
        if not job_ids:
            return []
        held = (jobs.c.node == node) & jobs.c.id.in_(job_ids) \
            & jobs.c.status.in_(ACTIVE_RUNNING + ("DELETED",))
        with self._write() as conn:
            conn.execute(update(jobs).where(held).values(lease_until=until))
            rows = conn.execute(select(jobs.c.id, jobs.c.status).where(held)).all()
        return [tuple(r) for r in rows]

    def recover(self, node: Optional[str], now: int, max_attempts: int, fault_for) -> list:
        """Runs lost with their node count against ``max_attempts``: a job's runs
        (``attempts``) less those that ended in a retry (``retries``)."""
        held = jobs.c.status.in_(ACTIVE_RUNNING + ("DELETED",))
        lost = (jobs.c.node == node) if node is not None else (jobs.c.lease_until < now)
        found = []
        with self._write() as conn:
            query = select(jobs.c.id, jobs.c.status, jobs.c.attempts, jobs.c.retries, jobs.c.node) \
                .where(held, lost)
            if self.dialect == "postgresql":
                query = query.with_for_update(skip_locked=True)
            for job_id, status, attempts, retries, on in conn.execute(query).all():
                lost_runs = attempts - retries
                if status == "DELETED":
                    conn.execute(delete(jobs).where(jobs.c.id == job_id))
                elif lost_runs >= max_attempts:
                    fault = fault_for(lost_runs)
                    conn.execute(update(jobs).where(jobs.c.id == job_id).values(
                        status="FAILED", finished_at=now, lease_until=None, fault=pack(fault),
                        event_note=note_of(f"failed: {fault_type(fault)} (its node {on} died; "
                                           f"{lost_runs} runs lost)")))
                    found.append(Recovered(job_id, False, lost_runs))
                else:
                    conn.execute(update(jobs).where(jobs.c.id == job_id).values(
                        status="QUEUING", node=None, started_at=None, progress=None,
                        lease_until=None, event_note=note_of(f"queued again: its node {on} died")))
                    found.append(Recovered(job_id, True, lost_runs))
        return found

    def fail_timed_out_queued(self, now: int, default_timeout_ms: int, fault: str,
                              services: Optional[Iterable[str]] = None,
                              exclude: Optional[Iterable[str]] = None) -> list:
        """Fail QUEUING jobs waiting longer than their queueing timeout: the configured
        ``default_timeout_ms`` (0: none), shortened by the request's own when it asked
        for less; a request never lengthens it.  A job waiting for a retry counts from
        when its retry was due."""
        timeout = _timeout(jobs.c.queueing_timeout, default_timeout_ms)
        since = func.coalesce(jobs.c.not_before, jobs.c.queued_at)
        cond = (jobs.c.status == "QUEUING") & (timeout > 0) & (since + timeout <= now)
        query = select(jobs.c.id).where(cond)
        if services is not None:
            query = query.where(jobs.c.service.in_(list(services)))
        if exclude:
            query = query.where(jobs.c.service.not_in(list(exclude)))
        with self._write() as conn:
            ids = [r[0] for r in conn.execute(query.limit(1000)).all()]
            if ids:
                conn.execute(update(jobs).where(jobs.c.id.in_(ids), jobs.c.status == "QUEUING")
                             .values(status="FAILED", finished_at=now, fault=pack(fault),
                                     event_note=f"failed: {fault_type(fault)} (queueing timeout)"))
        return ids

    def waiting_timed_out(self, now: int, default_timeout_ms: int,
                          services: Optional[Iterable[str]] = None,
                          exclude: Optional[Iterable[str]] = None) -> list:
        """Parents waiting for their children past their computation timeout (counted
        from their first start, shortened by the request's own as for any job): the
        ids, to be stopped (no worker holds them to notice)."""
        timeout = _timeout(jobs.c.computation_timeout, default_timeout_ms)
        query = select(jobs.c.id).where(jobs.c.waiting_for.is_not(None), jobs.c.status == "RUNNING",
                                        timeout > 0, jobs.c.started_at + timeout <= now)
        if services is not None:
            query = query.where(jobs.c.service.in_(list(services)))
        if exclude:
            query = query.where(jobs.c.service.not_in(list(exclude)))
        with unavailable_as_store_error(), self.engine.connect() as conn:
            return [row[0] for row in conn.execute(query.limit(1000))]

    def events(self, job_id: str, owner: Optional[str] = None) -> Optional[tuple]:
        """The job's parent id (None for a job started by a client) and its history,
        oldest first, as dicts (time, status, attempt, node, message); None when there
        is no such job (of ``owner``, when given)."""
        job = select(jobs.c.seq, jobs.c.parent_id).where(jobs.c.id == job_id)
        if owner is not None:
            job = job.where(jobs.c.owner == owner)
        query = select(job_events.c.time, job_events.c.status, job_events.c.attempt, job_events.c.node,
                       job_events.c.message) \
            .where(job_events.c.job_seq == bindparam("seq")).order_by(job_events.c.seq)
        with unavailable_as_store_error(), self.engine.connect() as conn:
            found = conn.execute(job).first()
            if found is None:
                return None
            return found[1], [dict(row._mapping) for row in conn.execute(query, {"seq": found[0]})]

    def list_jobs(self, statuses=None, service: Optional[str] = None, owner: Optional[str] = None,
                  limit: int = 100, before: Optional[int] = None, parent: Optional[str] = None):
        """A page of jobs, newest first: ([(seq, JobRecord without request, result and
        fault)], whether more follow).  ``before``: only jobs older than that seq (the
        keyset of the page before), so pages neither miss nor repeat a job however many
        are added meanwhile.  ``parent``: only the children of that job."""
        query = select(jobs.c.seq, *_LIGHT).order_by(jobs.c.seq.desc()).limit(limit + 1)
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
        with unavailable_as_store_error(), self.engine.connect() as conn:
            rows = conn.execute(query).all()
        page = [(row[0], _record(dict(zip(_LIGHT_NAMES, row[1:])))) for row in rows[:limit]]
        return page, len(rows) > limit

    def counts_by_status(self, owner: Optional[str] = None) -> dict:
        """Stored jobs by status: every job's, or only ``owner``'s."""
        query = select(jobs.c.status, func.count()).group_by(jobs.c.status)
        if owner is not None:
            query = query.where(jobs.c.owner == owner)
        with unavailable_as_store_error(), self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return {status: count for status, count in rows}

    def counts_by_service(self) -> dict:
        """Stored jobs by (service, status), for the operator's view (metrics, status page)."""
        query = select(jobs.c.service, jobs.c.status, func.count()).group_by(jobs.c.service, jobs.c.status)
        with unavailable_as_store_error(), self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return {(service, status): count for service, status, count in rows}

    def busy_workers(self, node: str) -> int:
        """How many of ``node``'s worker slots hold a job now: a job it runs or winds
        down, or a deleted one its worker has not let go of yet (a parent waiting for
        its children holds none)."""
        query = select(func.count()).select_from(jobs).where(
            jobs.c.node == node, jobs.c.status.in_(HOLDING_WORKER), jobs.c.waiting_for.is_(None))
        with unavailable_as_store_error(), self.engine.connect() as conn:
            return conn.execute(query).scalar_one()

    def erase_expired(self, now: int, unfetched_ms: int, fetched_ms: int, limit: int,
                      services: Optional[Iterable[str]] = None,
                      exclude: Optional[Iterable[str]] = None) -> int:
        """Erase up to ``limit`` finished jobs past their retention (0 ms: kept for ever).
        They are looked for before the write transaction, which then erases those still
        expired: when few have expired the search reads every finished job (no index
        answers "fetched long enough ago"; 0.5 s for a million on SQLite), and on SQLite
        a write transaction would hold every writer of every process meanwhile."""
        conds = []
        if unfetched_ms:
            conds.append(jobs.c.first_fetched_at.is_(None) & (jobs.c.finished_at <= now - unfetched_ms))
        if fetched_ms:
            conds.append(jobs.c.first_fetched_at.is_not(None)
                         & (jobs.c.first_fetched_at <= now - fetched_ms))
        if not conds:
            return 0
        expired = conds[0] if len(conds) == 1 else (conds[0] | conds[1])
        # a child goes with its parent, however long it has been finished
        expired = jobs.c.status.in_(("SUCCEEDED", "FAILED")) & jobs.c.parent_id.is_(None) & expired
        query = select(jobs.c.seq).where(expired)
        if services is not None:
            query = query.where(jobs.c.service.in_(list(services)))
        if exclude:
            query = query.where(jobs.c.service.not_in(list(exclude)))
        with unavailable_as_store_error(), self.engine.connect() as conn:
            found = [row[0] for row in conn.execute(query.limit(limit))]
        if not found:
            return 0
        with self._write() as conn:       # checked again: a job fetched meanwhile stays
            return conn.execute(delete(jobs).where(jobs.c.seq.in_(found), expired)).rowcount

    def _database_ms(self) -> int:
        with unavailable_as_store_error(), self.engine.connect() as conn:
            return int(conn.execute(text(
                "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)")).scalar())

    def close(self) -> None:
        if self.clock is not None:
            self.clock.close()
            stop_using_clock(self.clock)
        self.engine.dispose()


def _fence(run: Optional[Run]) -> tuple:
    """The conditions that the job is still ``run``'s (none without a run)."""
    return () if run is None else (jobs.c.node == run.node, jobs.c.attempts == run.attempt)


def _timeout(own, default_timeout_ms: int):
    """A job's timeout in SQL: the configured ``default_timeout_ms`` (0: none),
    shortened by the request's own (the column ``own``) when it asked for less."""
    asked = (own.is_not(None)) & (own > 0)
    if default_timeout_ms:
        return case((asked & (own < default_timeout_ms), own), else_=default_timeout_ms)
    return case((asked, own), else_=0)


def note_of(text_: str) -> str:
    """An event's message as stored (at most 500 characters)."""
    return text_ if len(text_) <= 500 else text_[:497] + "..."


def fault_type(fault_json: Optional[str]) -> str:
    """The type name of a stored fault (the codec's JSON)."""
    try:
        return json.loads(fault_json)["faultInfo"]["$type"]
    except (TypeError, ValueError, KeyError):
        return "a fault"


#: SQLite's answers when the database, not the statement, is the trouble.
_SQLITE_UNAVAILABLE = ("locked", "busy", "readonly", "read-only", "disk", "full",
                       "unable to open", "i/o error")


def is_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the database cannot be reached or written for now, as
    opposed to a bug in a statement (which stays an internal error)."""
    if isinstance(error, sa_exc.TimeoutError):           # the pool stayed exhausted
        return True
    if isinstance(error, sa_exc.DBAPIError):
        if error.connection_invalidated:
            return True
        error = error.orig
    if isinstance(error, sqlite3.OperationalError):
        return any(word in str(error).lower() for word in _SQLITE_UNAVAILABLE)
    try:
        import psycopg
    except ImportError:                                  # pragma: no cover
        return False
    # connection lost or refused, server shutting down or starting (57P01, 57P03),
    # disk full (53100); a standby after a failover refuses writes (25006)
    return isinstance(error, (psycopg.OperationalError, psycopg.InterfaceError,
                              psycopg.errors.ReadOnlySqlTransaction))


@contextmanager
def unavailable_as_store_error():
    """Raise what ``is_unavailable`` recognises as StoreUnavailable, anything else as is."""
    try:
        yield
    except StoreUnavailable:
        raise
    except Exception as error:
        if is_unavailable(error):
            raise StoreUnavailable(f"the job store cannot be reached: {error}".strip()) from error
        raise


class PatientCursor:
    """A DBAPI cursor whose ``execute`` waits out SQLite's lock until ``deadline``."""
    __slots__ = ("cursor", "deadline")

    def __init__(self, cursor, deadline: float):
        self.cursor, self.deadline = cursor, deadline

    def execute(self, sql, args=()):
        return retry_while_busy(lambda: self.cursor.execute(sql, args), self.deadline)

    def __getattr__(self, name):             # fetchall, fetchone, rowcount…
        return getattr(self.cursor, name)


def begin_immediate(execute, deadline=None) -> None:
    """Begin an SQLite transaction of several statements, with the write lock."""
    retry_while_busy(lambda: execute("BEGIN IMMEDIATE"), deadline)


def retry_while_busy(action, deadline=None):
    """``action()``, tried again while SQLite answers "database is locked" (another
    process holds the write lock).  SQLite's own busy handler would sleep 1, 2, 5,
    10… ms between tries, longer than the writes of the node's processes take; here
    the tries come after 50 µs, doubling up to 2 ms, until ``deadline`` (time.monotonic),
    by default BUSY_TIMEOUT_S after the first refusal.  ``action`` may run on the DBAPI
    connection or through SQLAlchemy, which wraps the driver's error in its own."""
    delay = 0.00005
    while True:
        try:
            return action()
        except (sqlite3.OperationalError, sa_exc.OperationalError) as error:
            if not _busy(getattr(error, "orig", error)):
                raise
            now = time.monotonic()
            deadline = deadline or now + BUSY_TIMEOUT_S
            if now > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.002)


def _busy(error) -> bool:
    return isinstance(error, sqlite3.OperationalError) and ("locked" in str(error) or "busy" in str(error))


def _sqlite_pragmas(dbapi_connection, _record):
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=0")        # retry_while_busy waits instead
    cur.execute("PRAGMA foreign_keys=ON")       # a job's events go with it
    cur.close()
    # each statement commits itself; several statements that belong together are
    # wrapped in BEGIN IMMEDIATE … COMMIT (SqlJobStore._write)
    dbapi_connection.isolation_level = None
