"""The store's side of delivering callbacks: taking the outbox's rows, ending attempts.

See ``callbacks`` for how the rows are written and leased.  The statements of each
delivery (is one due, take them, end an attempt) are compiled once and run on a DBAPI
cursor, as the job's own hot path is (``statements``): through SQLAlchemy's execution
they cost a node with callbacks half its jobs per second on SQLite.

A claim takes due events fairly between owners (issue 32): round robin, each owner's
oldest due event first, then each owner's second, and so on (``ROW_NUMBER() OVER
(PARTITION BY owner ORDER BY due_at)``), so that one owner's thousand due events wait
behind their own, not in front of another owner's one.  It never takes an event of a
job whose other event is being delivered (by any node: a job's events go one at a
time, in order), and the caller may leave any candidate (``admit``: the delivery's caps
per owner and per target).  The candidates are read, then each chosen row is taken by
an UPDATE that holds only if it is still due: of two nodes choosing one row, one takes
it (on PostgreSQL the second's UPDATE waits for the first's and then finds it leased;
rows are taken in ``seq`` order, so two claims never wait for each other in a circle).

An event's failed attempts share one row of its job's history, replaced at each by the
latest (``history_seq``: "… (attempt 3 of 12; next in 4 s)"); its end (delivered,
given up) is a row of its own.  So a receiver that is down for a day adds two rows per event,
not one per attempt.
"""

from collections.abc import Callable, Sequence
from typing import cast

from sqlalchemy import (
    Integer,
    String,
    bindparam,
    delete,
    func,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.engine import Dialect

from ..payload.form import unpack
from . import sqlite
from .database import Database
from .events import NOW_MS, note_of
from .records import CallbackAttempt, CallbackEvent
from .schema import callback_outbox, job_events, jobs
from .statements import Prepared, Statement

_EVENT_COLUMNS = [
    callback_outbox.c[name]
    for name in (
        "seq",
        "job_id",
        "job_seq",
        "owner",
        "url",
        "type",
        "status",
        "elapsed",
        "progress",
        "created_at",
        "attempts",
        "due_at",
    )
]


_NAMES = [column.name for column in _EVENT_COLUMNS]
#: Candidates read per claim beyond those asked for: left ones (an owner or target at
#: its cap) do not starve the others behind them.
EXTRA_CANDIDATES = 64
_MINE = (
    (callback_outbox.c.seq == bindparam("seq"))
    & (callback_outbox.c.node == bindparam("holder"))
    & (callback_outbox.c.due_at == bindparam("lease"))
)


def _statements(dialect: Dialect) -> dict[str, Prepared]:
    """The outbox's statements, compiled for ``dialect``."""
    sibling = callback_outbox.alias("sibling")
    rank = (
        func.row_number()
        .over(
            partition_by=callback_outbox.c.owner,
            order_by=(callback_outbox.c.due_at, callback_outbox.c.seq),
        )
        .label("rank")
    )
    ranked = (
        select(*_EVENT_COLUMNS, rank)
        .where(
            callback_outbox.c.due_at <= bindparam("now"),
            ~select(sibling.c.seq)
            .where(
                sibling.c.job_seq == callback_outbox.c.job_seq,
                sibling.c.node.is_not(None),
                sibling.c.due_at > bindparam("now"),
            )
            .exists(),
        )
        .subquery("ranked")
    )
    candidates = (
        select(*(ranked.c[name] for name in _NAMES))
        .where(ranked.c.rank <= bindparam("per_owner", type_=Integer))
        .order_by(ranked.c.rank, ranked.c.due_at, ranked.c.seq)
        .limit(bindparam("limit", type_=Integer))
    )
    history = select(
        jobs.c.seq,
        literal_column(NOW_MS[dialect.name]),
        jobs.c.status,
        jobs.c.attempts,
        bindparam("holder", type_=String),
        bindparam("message", type_=String),
    ).where(jobs.c.seq == bindparam("job_seq"))
    built: dict[str, tuple[Statement, list[str] | None]] = {
        "next_due": (select(func.min(callback_outbox.c.due_at).label("n")), ["n"]),
        "candidates": (candidates, _NAMES),
        "take": (
            update(callback_outbox)
            .where(
                callback_outbox.c.seq == bindparam("seq"),
                callback_outbox.c.due_at <= bindparam("now"),
            )
            .values(due_at=bindparam("lease"), node=bindparam("holder")),
            None,
        ),
        "delivered": (delete(callback_outbox).where(_MINE), None),
        "again": (
            update(callback_outbox)
            .where(_MINE)
            .values(due_at=bindparam("due_at"), node=None, attempts=callback_outbox.c.attempts + 1),
            None,
        ),
        "history": (
            insert(job_events).from_select(
                ["job_seq", "time", "status", "attempt", "node", "message"], history
            ),
            None,
        ),
        # a failed attempt: the row of the event's earlier failed attempts goes, and
        # one with this attempt's message takes its place, last in the history
        "history_drop": (
            delete(job_events).where(
                job_events.c.seq
                == select(callback_outbox.c.history_seq)
                .where(callback_outbox.c.seq == bindparam("seq"))
                .scalar_subquery(),
                job_events.c.job_seq == bindparam("job_seq"),
            ),
            None,
        ),
        # written, and named in the event's row
        "history_first": (
            cast(
                Statement,
                insert(job_events)
                .from_select(["job_seq", "time", "status", "attempt", "node", "message"], history)
                .returning(job_events.c.seq),
            ),
            ["seq"],
        ),
        "history_named": (
            update(callback_outbox)
            .where(callback_outbox.c.seq == bindparam("seq"))
            .values(history_seq=bindparam("history_seq")),
            None,
        ),
    }
    return {
        key: Prepared(statement, dialect, columns) for key, (statement, columns) in built.items()
    }


class CallbackOutbox(Database):
    """The store's side of callbacks: the outbox, as the delivering nodes use it."""

    def _outbox(self, key: str) -> Prepared:
        found = self.__dict__.get("_outbox_statements")
        if found is None:
            found = self.__dict__["_outbox_statements"] = _statements(self.engine.dialect)
        return found[key]

    def next_callback_due(self) -> int | None:
        """When the next callback may be attempted (ms; a leased one when its lease
        ends), or None when there is none."""
        return self._run(self._outbox("next_due"), False)[1]["n"]  # type: ignore[index]

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
        lease_ms``, round robin between owners (each one's oldest due first; at most
        ``per_owner`` of each considered, default ``limit``), never one of a job whose
        other event is being delivered, and only those ``admit`` (when given) lets
        through, asked in that order: [(the event, the lease, which fences its
        outcome)]."""
        lease = now + lease_ms
        candidates, take = self._outbox("candidates"), self._outbox("take")
        params = {
            "now": now,
            "per_owner": max(1, per_owner or limit),
            "limit": limit + EXTRA_CANDIDATES,
        }
        with self._cursor(True) as cur:
            cur.execute(candidates.sql, candidates.args(params))
            chosen: list[CallbackEvent] = []
            jobs_chosen: set[int] = set()
            for row in cur.fetchall():
                if len(chosen) >= limit:
                    break
                values = dict(zip(_NAMES, row, strict=True))
                values.pop("due_at")
                values["progress"] = unpack(values["progress"])
                event = CallbackEvent(**values)
                if event.job_seq in jobs_chosen or (admit is not None and not admit(event)):
                    continue
                jobs_chosen.add(event.job_seq)
                chosen.append(event)
            taken = []
            for event in sorted(chosen, key=lambda e: e.seq):  # one order: no deadlock
                values = {"seq": event.seq, "now": now, "lease": lease, "holder": node}
                cur.execute(take.sql, take.args(values))
                if cur.rowcount == 1:  # (another node took it since it was read)
                    taken.append((event, lease))
        return taken

    def callbacks_attempted(self, node: str, attempts: Sequence[CallbackAttempt]) -> list[bool]:
        """End ``node``'s ``attempts`` in one transaction: each event is deleted
        (``due_at`` None: delivered, or given up) or due at ``due_at`` with one more
        attempt counted, and its message goes to its job's history (if the job is still
        stored): an end in a row of its own, a failed attempt in one row per event, which
        replaces the row of its earlier failed attempts (``history_seq``) and comes last
        in the history.  For each, False when the row was no longer this attempt's (its
        lease had run out and another node took it, or it was dropped meanwhile): its
        message gets a row of its own.  One transaction for all: on SQLite each write
        takes the one write lock the job's own writes wait for (docs/architecture.md,
        "Callbacks under load")."""
        history = self._outbox("history")
        mine = []
        with self._cursor(True) as cur:
            if self.dialect == "sqlite":  # the statements together
                sqlite.begin_immediate(cur.execute, cur.deadline)
            for attempt in attempts:
                event = attempt.event
                message = note_of(attempt.message)
                noted = {
                    "seq": event.seq,
                    "holder": node,
                    "message": message,
                    "job_seq": event.job_seq,
                }
                again = attempt.due_at is not None
                end = self._outbox("again" if again else "delivered")
                values = {"seq": event.seq, "holder": node, "lease": attempt.lease}
                cur.execute(end.sql, end.args(dict(values, due_at=attempt.due_at)))
                mine.append(cur.rowcount == 1)
                if again and mine[-1]:  # (the row, due again, still names its history row)
                    for key in ("history_drop", "history_first"):
                        p = self._outbox(key)
                        cur.execute(p.sql, p.args(noted))
                    row = cur.fetchone()
                    if row is not None:  # (none: the job is erased)
                        p = self._outbox("history_named")
                        cur.execute(p.sql, p.args({"seq": event.seq, "history_seq": row[0]}))
                    continue
                cur.execute(history.sql, history.args(noted))
        return mine

    def release_callbacks(self, node: str, now: int) -> int:
        """Make the callbacks ``node`` had taken due now (its previous run was killed
        while delivering them); how many."""
        with self._write() as conn:
            return conn.execute(
                update(callback_outbox)
                .where(callback_outbox.c.node == node)
                .values(due_at=now, node=None)
            ).rowcount

    def pending_callbacks(self, job_id: str | None = None) -> int:
        """How many callbacks wait to be delivered (of ``job_id``, when given)."""
        query = select(func.count()).select_from(callback_outbox)
        if job_id is not None:
            query = query.where(callback_outbox.c.job_id == job_id)
        with self._read() as conn:
            return conn.execute(query).scalar_one()
