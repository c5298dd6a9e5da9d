"""The store's side of delivering callbacks: taking the outbox's rows, ending attempts.

See ``callbacks`` for how the rows are written and leased.  The statements of each
delivery (is one due, take them, end an attempt) are compiled once and run on a DBAPI
cursor, as the job's own hot path is (``statements``): through SQLAlchemy's execution
they cost a node with callbacks half its jobs per second on SQLite.
"""

from collections.abc import Sequence
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

from . import sqlite
from .database import Database
from .events import NOW_MS, note_of
from .payload import unpack
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
_MINE = (
    (callback_outbox.c.seq == bindparam("seq"))
    & (callback_outbox.c.node == bindparam("holder"))
    & (callback_outbox.c.due_at == bindparam("lease"))
)


def _statements(dialect: Dialect) -> dict[str, Prepared]:
    """The outbox's statements, compiled for ``dialect``."""
    due = (
        select(callback_outbox.c.seq)
        .where(callback_outbox.c.due_at <= bindparam("now"))
        .order_by(callback_outbox.c.due_at)
        .limit(bindparam("limit", type_=Integer))
    )
    if dialect.name == "postgresql":  # nodes sharing the store take different rows
        due = due.with_for_update(skip_locked=True)
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
        "claim": (
            cast(
                Statement,
                update(callback_outbox)
                .where(callback_outbox.c.seq.in_(due.scalar_subquery()))
                .values(due_at=bindparam("lease"), node=bindparam("holder"))
                .returning(*_EVENT_COLUMNS),
            ),
            _NAMES,
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
        self, node: str, now: int, lease_ms: int, limit: int
    ) -> list[tuple[CallbackEvent, int]]:
        """Take up to ``limit`` due callbacks to deliver from ``node`` until ``now +
        lease_ms``, oldest first: [(the event, the lease, which fences its outcome)]."""
        lease = now + lease_ms
        p = self._outbox("claim")
        with self._cursor(True) as cur:
            cur.execute(p.sql, p.args({"now": now, "limit": limit, "lease": lease, "holder": node}))
            rows = [dict(zip(_NAMES, row, strict=True)) for row in cur.fetchall()]
        events = []
        for values in sorted(rows, key=lambda r: r["seq"]):
            values.pop("due_at")
            values["progress"] = unpack(values["progress"])
            events.append((CallbackEvent(**values), lease))
        return events

    def callbacks_attempted(self, node: str, attempts: Sequence[CallbackAttempt]) -> list[bool]:
        """End ``node``'s ``attempts`` in one transaction: each event is deleted
        (``due_at`` None: delivered, or given up) or due at ``due_at`` with one more
        attempt counted, and its message goes to its job's history (if the job is still
        stored).  For each, False when the row was no longer this attempt's (its lease
        had run out and another node took it, or it was dropped meanwhile).  One
        transaction for all: on SQLite each write takes the one write lock the job's
        own writes wait for (docs/architecture.md, "Callbacks under load")."""
        history = self._outbox("history")
        mine = []
        with self._cursor(True) as cur:
            if self.dialect == "sqlite":  # the statements together
                sqlite.begin_immediate(cur.execute, cur.deadline)
            for attempt in attempts:
                event = attempt.event
                end = self._outbox("delivered" if attempt.due_at is None else "again")
                values = {"seq": event.seq, "holder": node, "lease": attempt.lease}
                cur.execute(end.sql, end.args(dict(values, due_at=attempt.due_at)))
                mine.append(cur.rowcount == 1)
                message = note_of(attempt.message)
                values = {"holder": node, "message": message, "job_seq": event.job_seq}
                cur.execute(history.sql, history.args(values))
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
