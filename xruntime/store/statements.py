"""The store's SQL pieces, written once: columns, state guards, and statements compiled once.

Every change is one statement guarded on the job's current state (``UPDATE … WHERE
id = :id AND status IN (…)``), so of two actors racing on a job exactly one wins; a
write of a run is fenced besides on the run being still the job's (``fence``).  The
hot path's statements are compiled once for the dialect (``Prepared``) and run on a
pooled DBAPI connection: SQLAlchemy's per-execution work costs ten times what SQLite
needs to run them, and every job cycle runs a dozen.  Which job runs next is the
subject of ``claims``; the store (``sql``, ``children``) runs what is built here.
"""

from collections.abc import Callable, Iterable
from typing import Any, overload

from sqlalchemy import (
    BindParameter,
    FromClause,
    LargeBinary,
    bindparam,
    case,
    delete,
    exists,
    func,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ColumnElement, Select
from sqlalchemy.sql.dml import UpdateBase

from ..payload.form import pack, unpack
from ..protocol.states import FINISHED, Status
from .events import fault_type, note_of
from .records import JobRecord, Run
from .schema import OUTBOX_BYTES, callback_outbox, job_results, jobs

#: A statement the store compiles once (``Prepared``): a SELECT, or an INSERT, UPDATE
#: or DELETE.
Statement = Select | UpdateBase

#: States in which a job has been taken by a node and not finished.
ACTIVE_RUNNING = (Status.RUNNING, Status.STOPPING)
#: States in which a job holds a worker (a deleted one until its worker lets go).
HOLDING_WORKER = ACTIVE_RUNNING + (Status.DELETED,)
#: States in which a child still has to finish (a deleted one until its worker lets go).
UNFINISHED = (Status.QUEUING,) + HOLDING_WORKER
#: A job's columns as it goes back to the queue: no node, run, progress or lease.
REQUEUED: dict[str, Any] = dict(
    status=Status.QUEUING, node=None, started_at=None, progress=None, lease_until=None
)


def failed_by_store(now: int, fault: str, why: str) -> dict[str, Any]:
    """A job's columns as the store fails it (no worker does): FAILED at ``now`` with
    ``fault`` (the codec's JSON), its event naming the fault's type and ``why``."""
    return dict(
        status=Status.FAILED,
        finished_at=now,
        fault=pack(fault),
        event_note=note_of(f"failed: {fault_type(fault)} ({why})"),
    )


_PAYLOADS = ("request", "result", "fault", "progress")
#: Columns the store keeps for itself: never part of a JobRecord.
_INTERNAL = ("seq", "lane", "event_note", "stored_bytes", "callback_progress_at")
#: Every column of a JobRecord.
ALL_NAMES = [c.name for c in jobs.c if c.name not in _INTERNAL]
#: A JobRecord without its request, result and fault (``peek``, listings).
LIGHT_COLUMNS = [c for c in jobs.c if c.name not in _INTERNAL + ("request", "result", "fault")]
LIGHT_NAMES = [c.name for c in LIGHT_COLUMNS]
#: The columns a new job is inserted with.
INSERT_KEYS = [
    "id",
    "service",
    "operation",
    "fetch_type",
    "status",
    "queued_at",
    "attempts",
    "queueing_timeout",
    "computation_timeout",
    "request",
    "owner",
    "lane",
    "callback_url",
    "callback_period",
    "result_bound",
]

_ID: BindParameter[str] = bindparam("job_id")
#: The jobs with their large results' rows (``job_results``), and a job's result from
#: either place (a small one, or one stored before that table, is in ``jobs.result``).
WITH_RESULTS = jobs.outerjoin(job_results, job_results.c.job_seq == jobs.c.seq)
RESULT = func.coalesce(job_results.c.result, jobs.c.result)
#: Its length and a range of it, each taken on the column itself: a function of
#: ``RESULT`` would read the whole value first (SQLite's ``length`` of a column reads
#: none of it, PostgreSQL's ``substr`` of one only the slices asked for).
RESULT_LENGTH = func.coalesce(job_results.c.bytes, func.length(jobs.c.result))


def result_range(start: BindParameter, size: BindParameter) -> ColumnElement:
    return func.coalesce(
        func.substr(job_results.c.result, start, size), func.substr(jobs.c.result, start, size)
    )


#: The job is still the run's (``Run``): its node, and the attempt that took it.
_RUN_FENCE = (jobs.c.node == bindparam("run_node"), jobs.c.attempts == bindparam("run_attempt"))
#: How many jobs are queued; narrowed to a service or a lane by the max_queued checks.
QUEUED = select(func.count()).select_from(jobs).where(jobs.c.status == Status.QUEUING)


def in_states(states: Iterable[str], table: FromClause = jobs) -> ColumnElement:
    """The job is in one of a fixed list of states, rendered into the SQL (our own
    constants, never input), so that a statement's text names them."""
    return table.c.status.in_([literal_column(repr(str(s))) for s in states])


def fence(run: Run | None) -> tuple:
    """The conditions that the job is still ``run``'s (none without a run)."""
    return () if run is None else (jobs.c.node == run.node, jobs.c.attempts == run.attempt)


class Prepared:
    """A statement compiled once; ``args(params)`` in the driver's parameter style."""

    def __init__(
        self,
        statement: Statement,
        dialect: Dialect,
        columns: list | None = None,
        column_keys: list | None = None,
    ) -> None:
        compiled = statement.compile(dialect=dialect, column_keys=column_keys)
        self.sql = compiled.string
        # the parameters' names in the order a positional dialect (SQLite's) takes them
        self.names = list(compiled.positiontup or ()) if dialect.positional else None
        self.defaults = {
            k: (v if isinstance(v, (int, str)) else None) for k, v in compiled.params.items()
        }
        self.columns = columns

    def args(self, params: dict) -> Any:
        """``params`` (with the statement's own defaults) as the driver takes them."""
        values = dict(self.defaults, **params)
        return [values[n] for n in self.names] if self.names is not None else values


def _outbox_bytes() -> ColumnElement:
    """What an owner's callbacks waiting to be delivered take (``schema.OUTBOX_BYTES``),
    towards their stored bytes (issue 32): the outbox is bounded, but its events'
    bodies are the owner's to pay for."""
    return func.coalesce(
        select(func.sum(literal_column(OUTBOX_BYTES)))
        .select_from(callback_outbox)
        .where(callback_outbox.c.owner == bindparam("owner"))
        .scalar_subquery(),
        0,
    )


def _all_columns() -> list:
    """Every column of a job, its result from either place."""
    return [RESULT.label("result") if n == "result" else jobs.c[n] for n in ALL_NAMES]


def prepared_statements() -> dict[str, tuple[Callable[[], Statement], list | None, list | None]]:
    """The fixed statements of the hot path: key → (statement builder, result columns,
    insert column keys)."""
    return {
        "get": (
            lambda: select(*_all_columns()).select_from(WITH_RESULTS).where(jobs.c.id == _ID),
            ALL_NAMES,
            None,
        ),
        # a fetch's record with its result's length, and its result only when it is in
        # the job's row (small): a large one is read in pieces (store/result_reader.py)
        "get_sized": (
            lambda: (
                select(*[jobs.c[n] for n in ALL_NAMES], RESULT_LENGTH.label("result_length"))
                .select_from(WITH_RESULTS)
                .where(jobs.c.id == _ID)
            ),
            [*ALL_NAMES, "result_length"],
            None,
        ),
        "get_owned_sized": (
            lambda: (
                select(*[jobs.c[n] for n in ALL_NAMES], RESULT_LENGTH.label("result_length"))
                .select_from(WITH_RESULTS)
                .where(jobs.c.id == _ID, jobs.c.owner == bindparam("owner"))
            ),
            [*ALL_NAMES, "result_length"],
            None,
        ),
        "result_piece": (
            lambda: (
                select(result_range(bindparam("start"), bindparam("size")))
                .select_from(WITH_RESULTS)
                .where(jobs.c.id == _ID)
            ),
            ["piece"],
            None,
        ),
        # SQLite: the rowid of the row holding the result (job_results', else jobs')
        "result_rowid": (
            lambda: (
                select(job_results.c.job_seq, jobs.c.seq)
                .select_from(WITH_RESULTS)
                .where(jobs.c.id == _ID)
            ),
            ["result_seq", "job_seq"],
            None,
        ),
        "get_owned": (
            lambda: (
                select(*_all_columns())
                .select_from(WITH_RESULTS)
                .where(jobs.c.id == _ID, jobs.c.owner == bindparam("owner"))
            ),
            ALL_NAMES,
            None,
        ),
        "peek": (lambda: select(*LIGHT_COLUMNS).where(jobs.c.id == _ID), LIGHT_NAMES, None),
        "count_queued": (lambda: QUEUED, None, None),
        "count_queued_of": (
            lambda: QUEUED.where(jobs.c.service == bindparam("service")),
            None,
            None,
        ),
        "count_queued_in_lane": (
            lambda: QUEUED.where(jobs.c.lane == bindparam("lane")),
            ["n"],
            None,
        ),
        "insert": (lambda: insert(jobs), None, INSERT_KEYS),
        # when the first job waiting for its retry may run (an idle slot's wait)
        "next_due": (
            lambda: select(func.min(jobs.c.not_before).label("n")).where(
                jobs.c.not_before.is_not(None),
                jobs.c.not_before > bindparam("now"),
                jobs.c.status == Status.QUEUING,
            ),
            ["n"],
            None,
        ),
        "stored_bytes": (  # (each sum from its index on owner alone)
            lambda: select(
                _outbox_bytes()  # the callbacks waiting to be delivered
                + func.coalesce(
                    select(func.sum(jobs.c.stored_bytes))
                    .where(jobs.c.owner == bindparam("owner"))
                    .scalar_subquery(),
                    0,
                )
                + func.coalesce(
                    select(func.sum(job_results.c.bytes))
                    .where(job_results.c.owner == bindparam("owner"))
                    .scalar_subquery(),
                    0,
                )
                + func.coalesce(  # what the unfinished jobs may still store
                    select(func.sum(jobs.c.result_bound))
                    .where(jobs.c.owner == bindparam("owner"), in_states(UNFINISHED))
                    .scalar_subquery(),
                    0,
                )
            ),
            ["n"],
            None,
        ),
        # a parent's finished children, in the order its function asked for them
        "children_of": (
            lambda: (
                select(
                    jobs.c.id,
                    jobs.c.child_stage,
                    jobs.c.child_index,
                    jobs.c.service,
                    jobs.c.operation,
                    jobs.c.status,
                    RESULT,
                    jobs.c.fault,
                    jobs.c.finished_at,
                )
                .select_from(WITH_RESULTS)
                .where(jobs.c.parent_id == bindparam("parent_id"), in_states(FINISHED))
                .order_by(jobs.c.child_stage, jobs.c.child_index)
            ),
            ["id", "stage", "index", "service", "operation", "status", "result", "fault", "at"],
            None,
        ),
        # whether a slot has anything to try (two index lookups, no write): queued jobs
        # (due or not), counted up to two, a parent waiting for its children (done or not)
        "work_waiting": (
            lambda: select(
                select(func.count())
                .select_from(
                    select(jobs.c.seq).where(jobs.c.status == Status.QUEUING).limit(2).subquery()
                )
                .scalar_subquery()
                .label("queued"),
                exists().where(jobs.c.waiting_for.is_not(None)).label("waiting"),
            ),
            ["queued", "waiting"],
            None,
        ),
        "mark_fetched": (
            lambda: (
                update(jobs)
                .where(jobs.c.id == _ID, jobs.c.first_fetched_at.is_(None))
                .values(first_fetched_at=bindparam("now"))
            ),
            None,
            None,
        ),
    }


def insert_below(
    limited: bool, scoped: bool, lane_limited: bool, also: tuple[ColumnElement, ...] = ()
) -> Statement:
    """Insert a job only while fewer than ``max_queued`` jobs (``limited``; of
    ``service`` when ``scoped``) and fewer than ``owner_max_queued`` of its lane
    (``lane_limited``) are queued, and ``also`` holds: the checks and the insert in one
    statement (SQLite)."""
    below = list(also)
    if limited:
        of = QUEUED.where(jobs.c.service == bindparam("service")) if scoped else QUEUED
        below.append(of.scalar_subquery() < bindparam("max_queued"))
    if lane_limited:
        below.append(
            QUEUED.where(jobs.c.lane == bindparam("lane")).scalar_subquery()
            < bindparam("owner_max_queued")
        )
    row = select(*[bindparam(k, type_=jobs.c[k].type) for k in INSERT_KEYS]).where(*below)
    return insert(jobs).from_select(INSERT_KEYS, row)


def guarded_statements(
    states: Iterable[str], fenced: bool = False, also: tuple[ColumnElement, ...] = ()
) -> dict[str, Statement]:
    """Statements guarded on the job being in one of ``states`` (and, ``fenced``, still
    the run ``run_node``/``run_attempt``'s: see ``Run``), and on ``also``."""
    guard = (jobs.c.id == _ID, in_states(states)) + (_RUN_FENCE if fenced else ()) + also
    return {
        "set_progress": update(jobs).where(*guard).values(progress=bindparam("progress_blob")),
        "set_status": update(jobs)
        .where(*guard)
        .values(status=bindparam("new_status"), event_note=bindparam("note")),
        "finish": update(jobs)
        .where(*guard)
        .values(
            status=bindparam("new_status"),
            finished_at=bindparam("now"),
            event_note=bindparam("note"),
            result=bindparam("result_blob"),
            fault=bindparam("fault_blob"),
            progress=func.coalesce(bindparam("progress_blob", type_=LargeBinary), jobs.c.progress),
            lease_until=None,
        ),
        "erase": delete(jobs).where(*guard),
    }


def of_services(
    query: Select, services: Iterable[str] | None, exclude: Iterable[str] | None
) -> Select:
    """``query`` narrowed to the jobs of ``services`` (all, when None) that are not of
    ``exclude``: the part of housekeeping one node does (``[services]`` settings)."""
    if services is not None:
        query = query.where(jobs.c.service.in_(list(services)))
    if exclude:
        query = query.where(jobs.c.service.not_in(list(exclude)))
    return query


def timeout_of(own: ColumnElement, default_timeout_ms: int) -> ColumnElement:
    """A job's timeout in SQL: the configured ``default_timeout_ms`` (0: none),
    shortened by the request's own (the column ``own``) when it asked for less."""
    asked = (own.is_not(None)) & (own > 0)
    if default_timeout_ms:
        return case((asked & (own < default_timeout_ms), own), else_=default_timeout_ms)
    return case((asked, own), else_=0)


@overload
def record_of(row: dict, max_result_bytes: int | None = None) -> JobRecord: ...
@overload
def record_of(row: dict | None, max_result_bytes: int | None = None) -> JobRecord | None: ...
def record_of(row: dict | None, max_result_bytes: int | None = None) -> JobRecord | None:
    """The JobRecord of a row of ``jobs`` (as a dict), its payloads read back to JSON
    text; with ``max_result_bytes``, ``payload.form.TooLarge`` for a longer result."""
    if row is None:
        return None
    for name in _INTERNAL:
        row.pop(name, None)
    for name in _PAYLOADS:
        if name in row:
            row[name] = unpack(row[name], max_result_bytes if name == "result" else None)
    return JobRecord(**row)
