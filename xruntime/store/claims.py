"""Which job runs next: the statements that pick it, in one ``UPDATE … RETURNING``.

A claim moves the oldest queued job to RUNNING on the claiming node; with ``max_running``
limits the oldest whose owner runs fewer of its service's jobs than allowed, fair between
owners (docs/protocol.md §10) whatever the number of jobs queued.  A resume takes a
parent whose children have all finished (docs/protocol.md §13).  Both are the hot
path's and its heaviest statements; their shapes were chosen by measurement
(``benchmarks/fairness.py``), and are explained where they are built.  On PostgreSQL
two nodes claiming at once skip each other's rows (``FOR UPDATE SKIP LOCKED``).
"""

from collections.abc import Callable, Iterable

from sqlalchemy import (
    FromClause,
    bindparam,
    case,
    func,
    literal,
    literal_column,
    select,
    true,
    update,
)
from sqlalchemy.sql import ColumnElement, Select

from ..protocol.states import Status
from .schema import jobs, lane_of
from .statements import ACTIVE_RUNNING, HOLDING_WORKER, UNFINISHED, Statement, in_states


def claim_statement(
    dialect: str,
    services: Iterable[str] | None = None,
    running_limits: tuple = (),
    between_owners: bool = False,
) -> Statement:
    """Move the next job to RUNNING: the oldest queued one (of ``services``); with
    ``running_limits`` the oldest whose lane is under its owner's max_running; and
    ``between_owners`` (accounts on), among those, the first of the lane (a user's
    jobs of a service) that runs fewest jobs now (docs/protocol.md §10, fair by
    default)."""
    if running_limits or between_owners:
        oldest = _fair_oldest(dialect, services, running_limits, between_owners)
    else:
        queued = select(jobs.c.seq).where(jobs.c.status == Status.QUEUING, _due(jobs))
        oldest = _first_to_take(dialect, queued, jobs, services)
    return (
        update(jobs)
        .where(jobs.c.seq == oldest.scalar_subquery(), jobs.c.status == Status.QUEUING)
        .values(
            status=Status.RUNNING,
            node=bindparam("node"),
            # never before its queueing: each process reads the database's clock as its
            # own estimate (store.clock), and a claim a few ms after the start could read
            # an earlier time than the start did
            started_at=case(
                (jobs.c.queued_at > bindparam("now_ms"), jobs.c.queued_at),
                else_=bindparam("now_ms"),
            ),
            event_note=bindparam("note"),
            attempts=jobs.c.attempts + 1,
            lease_until=bindparam("lease_until"),
        )
        .returning(*jobs.c)
    )


def resume_statement(dialect: str, services: Iterable[str] | None = None) -> Statement:
    """Take the oldest parent whose children are all finished (docs/protocol.md §13): it runs
    again on this node, where it left off (its status, attempts and start unchanged)."""
    parent, child = jobs.alias("parent"), jobs.alias("child")
    unfinished = (
        select(child.c.seq)
        .where(child.c.parent_id == parent.c.id, in_states(UNFINISHED, child))
        .exists()
    )
    ready = select(parent.c.seq).where(
        parent.c.waiting_for.is_not(None),
        parent.c.node.is_(None),
        in_states(ACTIVE_RUNNING, parent),
        ~unfinished,
    )
    return (
        update(jobs)
        .where(
            jobs.c.seq == _first_to_take(dialect, ready, parent, services).scalar_subquery(),
            jobs.c.waiting_for.is_not(None),
            jobs.c.node.is_(None),
        )
        .values(
            node=bindparam("node"),
            lease_until=bindparam("lease_until"),
            waiting_for=None,
            lane=jobs.c.service + "/" + jobs.c.owner,
            event_note=bindparam("note"),
        )
        .returning(*jobs.c)
    )


def _first_to_take(
    dialect: str, query: Select, table: FromClause, services: Iterable[str] | None
) -> Select:
    """The first by ``seq`` of the rows of ``table`` that ``query`` selects, of
    ``services`` only (None: of all); on PostgreSQL locked for this claim, passing over
    a row another claim holds."""
    if services is not None:
        query = query.where(table.c.service.in_([literal(name) for name in services]))
    query = query.order_by(table.c.seq).limit(1)
    if dialect == "postgresql":
        query = query.with_for_update(skip_locked=True, of=table)
    return query


def _due(table: FromClause) -> ColumnElement:
    """Not waiting for a retry (or its time has come)."""
    return table.c.not_before.is_(None) | (table.c.not_before <= bindparam("now_ms"))


def _lane_busy(lane: ColumnElement) -> ColumnElement:
    """How many jobs of ``lane`` hold a worker now, all nodes together; read from the
    (status, lane, seq) index."""
    busy = jobs.alias("busy")
    return (
        select(func.count())
        .select_from(busy)
        .where(in_states(HOLDING_WORKER, busy), busy.c.lane == lane)
        .scalar_subquery()
    )


def _under_max_running(
    running_limits: tuple,
    lane: ColumnElement,
    matches: Callable[[str, str | None], ColumnElement],
) -> ColumnElement:
    """True where ``lane`` holds fewer workers than the ``max_running`` of the first of
    ``running_limits`` (owner, service or None, max_running) its job ``matches``; a job
    no limit matches has none."""
    limit = case(
        *[(matches(owner, service), literal(most)) for owner, service, most in running_limits],
        else_=literal(0),
    )
    return (limit == 0) | (_lane_busy(lane) < limit)


def _fair_oldest(
    dialect: str, services: Iterable[str] | None, running_limits: tuple, between_owners: bool
) -> Select:
    """The oldest queued job whose lane runs fewer jobs than its owner's max_running
    (docs/protocol.md §10); a parent waiting for its children holds no worker and is not
    counted (it leaves its lane meanwhile, see ``suspend``).  ``between_owners``: of
    those, the first of the lane running fewest jobs now (a lane is one user's jobs of
    one service: one user's flood of the queue takes a worker from nobody else's next
    job, each freed worker going to the lane that has fewest).  Counted by lane, not by
    owner, as ``max_running`` counts: the (status, lane, seq) index answers it, where
    an owner's count made SQLite, once analysed, scan the table (49 ms past 100 000
    queued jobs of one user: benchmarks/fairness.py).  Only the first job of each
    lane is a candidate, and the lanes are found by a walk over the (status, lane, seq)
    index, one step a lane: the cost grows with the number of lanes, not of the jobs
    queued in them (100 000 jobs of one user over quota do not slow anyone's claim).
    On PostgreSQL, as the first job of a lane is the only candidate, two nodes never
    take two jobs of a lane at once: the one that finds it locked skips the lane until
    its next claim.

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
    lanes = (
        select(func.min(jobs.c.lane).label("lane"))
        .where(jobs.c.status == Status.QUEUING)
        .cte("lanes", recursive=True)
    )
    following = (
        select(func.min(step.c.lane))
        .where(step.c.status == Status.QUEUING, step.c.lane > lanes.c.lane)
        .scalar_subquery()
    )
    lanes = lanes.union_all(select(following).where(lanes.c.lane.is_not(None)))
    if dialect != "postgresql":
        head = jobs.alias("head")
        first = (
            select(head.c.seq)
            .where(head.c.status == Status.QUEUING, head.c.lane == lanes.c.lane, _due(head))
            .order_by(head.c.seq)
            .limit(1)
            .scalar_subquery()
        )
        heads = (
            select(lanes.c.lane, first.label("seq"))
            .where(lanes.c.lane.is_not(None))
            .subquery("heads")
        )
        lane = heads.c.lane
        oldest = select(heads.c.seq).where(heads.c.seq.is_not(None))
        if running_limits:
            oldest = oldest.where(
                _under_max_running(
                    running_limits,
                    lane,
                    lambda owner, service: (
                        lane == literal(lane_of(service, owner))
                        if service is not None
                        else func.substr(lane, -len(owner) - 1) == literal("/" + owner)
                    ),
                )
            )
        if services is not None:
            oldest = oldest.where(
                func.substr(lane, 1, func.instr(lane, "/") - 1).in_(
                    [literal(name) for name in services]
                )
            )
        if between_owners:
            return oldest.order_by(_lane_busy(lane), heads.c.seq).limit(1)
        return oldest.order_by(heads.c.seq).limit(1)
    order: list[ColumnElement] = [literal_column("seq")]
    first_of_lane = select(_first_due_pg(lanes.c.lane).label("seq"))
    if between_owners:
        first_of_lane = first_of_lane.add_columns(_lane_busy(lanes.c.lane).label("lane_busy"))
        order.insert(0, literal_column("lane_busy"))
    heads = (
        first_of_lane.where(lanes.c.lane.is_not(None)).order_by(*order).subquery("heads")
    )  # the LATERAL below runs in this order
    job = jobs.alias("candidate")
    taken = select(job.c.seq).where(job.c.seq == heads.c.seq, job.c.status == Status.QUEUING)
    if running_limits:
        taken = taken.where(
            _under_max_running(
                running_limits,
                job.c.lane,
                lambda owner, service: (
                    (job.c.owner == literal(owner)) & (job.c.service == literal(service))
                    if service is not None
                    else job.c.owner == literal(owner)
                ),
            )
        )
    if services is not None:
        taken = taken.where(job.c.service.in_([literal(name) for name in services]))
    locked = taken.with_for_update(skip_locked=True).lateral("taken")
    in_order = [heads.c.lane_busy, heads.c.seq] if between_owners else [heads.c.seq]
    return select(locked.c.seq).select_from(heads).join(locked, true()).order_by(*in_order).limit(1)


def _first_due_pg(lane: ColumnElement) -> ColumnElement:
    """The first due job of ``lane`` on PostgreSQL, found the same way whatever the
    planner's statistics: the lane's first entry in the (status, lane, seq) index (the
    first at or after the lane in (lane, seq) order, which no other index gives, read
    from the index alone), taken if it is due.  Only when it waits for a retry are
    the lane's jobs read in turn for the first due one: the first due entry at or
    after the lane, this lane's or, if none of its jobs is due, the next lane's, which
    the check on each candidate's own lane then treats as that lane's."""
    entry, checked, later = jobs.alias("entry"), jobs.alias("checked"), jobs.alias("later")
    first_entry = (
        select(entry.c.seq)
        .where(entry.c.status == Status.QUEUING, entry.c.lane >= lane)
        .order_by(entry.c.lane, entry.c.seq)
        .limit(1)
        .correlate_except(entry)
        .scalar_subquery()
    )
    if_due = (
        select(checked.c.seq).where(checked.c.seq == first_entry, _due(checked)).scalar_subquery()
    )
    first_due = (
        select(later.c.seq)
        .where(later.c.status == Status.QUEUING, later.c.lane >= lane, _due(later))
        .order_by(later.c.lane, later.c.seq)
        .limit(1)
        .scalar_subquery()
    )
    return func.coalesce(if_due, first_due)
