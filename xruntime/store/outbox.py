"""The store's side of delivering callbacks: taking the outbox's rows, ending attempts.

See ``callbacks`` for how the rows are written and leased.
"""

from sqlalchemy import delete, func, select, text, update

from .database import Database
from .events import NOW_MS, note_of
from .payload import unpack
from .records import CallbackEvent
from .schema import callback_outbox

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


class CallbackOutbox(Database):
    """The store's side of callbacks: the outbox, as the delivering nodes use it."""

    def next_callback_due(self) -> int | None:
        """When the next callback may be attempted (ms; a leased one when its lease
        ends), or None when there is none."""
        with self._read() as conn:
            return conn.execute(select(func.min(callback_outbox.c.due_at))).scalar()

    def claim_callbacks(
        self, node: str, now: int, lease_ms: int, limit: int
    ) -> list[tuple[CallbackEvent, int]]:
        """Take up to ``limit`` due callbacks to deliver from ``node`` until ``now +
        lease_ms``, oldest first: [(the event, the lease, which fences its outcome)]."""
        lease = now + lease_ms
        due = (
            select(callback_outbox.c.seq)
            .where(callback_outbox.c.due_at <= now)
            .order_by(callback_outbox.c.due_at)
            .limit(limit)
        )
        if self.dialect == "postgresql":
            due = due.with_for_update(skip_locked=True)
        with self._write() as conn:
            rows = conn.execute(
                update(callback_outbox)
                .where(callback_outbox.c.seq.in_(due.scalar_subquery()))
                .values(due_at=lease, node=node)
                .returning(*_EVENT_COLUMNS)
            ).all()
        events = []
        for row in sorted(rows, key=lambda r: r.seq):
            values = dict(row._mapping)
            values.pop("due_at")
            values["progress"] = unpack(values["progress"])
            events.append((CallbackEvent(**values), lease))
        return events

    def callback_attempted(
        self, event: CallbackEvent, lease: int, node: str, message: str, due_at: int | None
    ) -> bool:
        """End an attempt of ``event`` taken with ``lease``: delete it (``due_at`` None:
        delivered, or given up) or make it due at ``due_at`` with one more attempt
        counted; and add ``message`` to its job's history (if the job is still stored).
        False when the row was no longer this attempt's (its lease had run out and
        another node took it, or it was dropped meanwhile)."""
        mine = (
            (callback_outbox.c.seq == event.seq)
            & (callback_outbox.c.node == node)
            & (callback_outbox.c.due_at == lease)
        )
        with self._write() as conn:
            if due_at is None:
                done = conn.execute(delete(callback_outbox).where(mine)).rowcount
            else:
                done = conn.execute(
                    update(callback_outbox)
                    .where(mine)
                    .values(due_at=due_at, node=None, attempts=callback_outbox.c.attempts + 1)
                ).rowcount
            conn.execute(
                text(
                    "INSERT INTO job_events (job_seq, time, status, attempt, node, message) "
                    f"SELECT seq, {NOW_MS[self.dialect]}, status, attempts, :node, :message "
                    "FROM jobs WHERE seq = :job_seq"
                ),
                {"node": node, "message": note_of(message), "job_seq": event.job_seq},
            )
        return done == 1

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
