"""The callback outbox (docs/protocol.md §14): written by the database with the change it
reports, taken by the nodes that deliver it.

Triggers on ``jobs`` add a row to ``callback_outbox`` inside the statement that ends a
job with a callback (``job.finished``: SUCCEEDED or FAILED, whichever code or node ends
it) or stores its progress (``job.progress``, when the request asked for it and its
period has passed since the last one, ``callback_progress_at``).  So an event is never
lost between the change and its delivery: a node killed right after the change leaves
the row, and any node delivers it.  A job's end drops its progress events not yet taken:
they are out of date.

A job has at most one progress event waiting (not being delivered): the newest wins.  A
new progress event replaces the one waiting, and takes over its place in the line
(``due_at``: due as soon as the one it replaces, or after its retry delay), its
attempts so far and its history row (``history_seq``); it is a new event (a new row,
so a new ``webhook-id``: a receiver that took the older one does not drop it).  So a
job whose receiver is slow or down keeps one row in the outbox, not one per period.

A row is delivered by one node at a time (``outbox``): ``claim_callbacks`` takes due rows (``FOR
UPDATE SKIP LOCKED`` on PostgreSQL, so nodes sharing the store take different ones) and
moves their ``due_at`` to the end of the lease; a node that dies while delivering lets
the lease run out, and another node (or itself, restarted: ``release_callbacks``) takes
the row again.  ``callback_attempted`` ends an attempt: the row is deleted (delivered or
given up) or due again later, and the job's history gets the attempt's outcome, all in
one transaction.  Times are the database's clock.
"""

from sqlalchemy import text
from sqlalchemy.engine import Connection

from .events import NOW_MS
from .triggers import install_sqlite_triggers

FINISHED_EVENT = "job.finished"
PROGRESS_EVENT = "job.progress"

_COLUMNS = "job_id, job_seq, owner, url, type, status, elapsed, progress, created_at, due_at"
_FINISHED_WHEN = (
    "NEW.callback_url IS NOT NULL AND NEW.status IN ('SUCCEEDED', 'FAILED') "
    "AND NEW.status IS DISTINCT FROM OLD.status"
)
_PROGRESS_WHEN = (
    "NEW.callback_url IS NOT NULL AND NEW.callback_period IS NOT NULL "
    "AND NEW.status IN ('RUNNING', 'STOPPING') AND NEW.progress IS NOT NULL "
    "AND NEW.progress IS DISTINCT FROM OLD.progress "
    "AND (OLD.callback_progress_at IS NULL "
    "OR {now} >= OLD.callback_progress_at + NEW.callback_period)"
)


#: The job's progress event waiting (not being delivered), if any.
_WAITING = f"job_seq = NEW.seq AND type = '{PROGRESS_EVENT}' AND node IS NULL"


def _statements(now: str) -> tuple[str, str, str]:
    """(drop the job's progress events not taken, add its end, add its progress in
    place of the one waiting)."""

    def values(kind: str, elapsed: str) -> str:
        return (
            f"NEW.id, NEW.seq, NEW.owner, NEW.callback_url, '{kind}', NEW.status, {elapsed}, "
            f"NEW.progress, {now}"
        )

    finished_elapsed = f"GREATEST(0, COALESCE(NEW.finished_at, {now}) - NEW.queued_at)"
    progress = values(PROGRESS_EVENT, f"GREATEST(0, {now} - NEW.queued_at)")
    return (
        f"DELETE FROM callback_outbox WHERE {_WAITING};",
        f"INSERT INTO callback_outbox ({_COLUMNS}) "
        f"VALUES ({values(FINISHED_EVENT, finished_elapsed)}, {now});",
        # the newest wins: it takes the waiting one's place, attempts and history row
        # (an aggregate answers one row, with NULLs when none waits), then the older goes
        f"INSERT INTO callback_outbox ({_COLUMNS}, attempts, history_seq) "
        f"SELECT {progress}, COALESCE(MIN(due_at), {now}), COALESCE(MAX(attempts), 0), "
        f"MAX(history_seq) FROM callback_outbox WHERE {_WAITING}; "
        f"DELETE FROM callback_outbox WHERE {_WAITING} "
        f"AND seq < (SELECT MAX(seq) FROM callback_outbox WHERE {_WAITING});",
    )


def _sqlite_triggers() -> dict[str, str]:
    now = NOW_MS["sqlite"]
    drop, finished, progress = (
        s.replace("GREATEST(", "MAX(").replace("IS DISTINCT FROM", "IS NOT")
        for s in _statements(now)
    )
    finished_when = _FINISHED_WHEN.replace("IS DISTINCT FROM", "IS NOT")
    progress_when = _PROGRESS_WHEN.replace("IS DISTINCT FROM", "IS NOT").format(now=now)
    return {
        "callback_finished": f"""CREATE TRIGGER callback_finished AFTER UPDATE OF status ON jobs
            WHEN {finished_when} BEGIN
            {drop}
            {finished}
        END""",
        "callback_progress": f"""CREATE TRIGGER callback_progress AFTER UPDATE OF progress ON jobs
            WHEN {progress_when} BEGIN
            {progress}
            UPDATE jobs SET callback_progress_at = {now} WHERE seq = NEW.seq;
        END""",
    }


def _postgresql_statements() -> list[str]:
    """The functions (CREATE OR REPLACE) and triggers (made where missing) of PostgreSQL:
    the progress one runs BEFORE the update, so it stamps ``callback_progress_at`` in
    the row being written instead of updating the row again."""
    now = NOW_MS["postgresql"]
    drop, finished, progress = _statements(now)
    return [
        f"""CREATE OR REPLACE FUNCTION xruntime_callback_finished() RETURNS trigger AS $$
        BEGIN
            {drop}
            {finished}
            RETURN NULL;
        END $$ LANGUAGE plpgsql""",
        f"""CREATE OR REPLACE FUNCTION xruntime_callback_progress() RETURNS trigger AS $$
        BEGIN
            {progress}
            NEW.callback_progress_at := {now};
            RETURN NEW;
        END $$ LANGUAGE plpgsql""",
    ]


_PG_TRIGGERS = {
    "callback_finished": f"CREATE TRIGGER callback_finished AFTER UPDATE OF status ON jobs "
    f"FOR EACH ROW WHEN ({_FINISHED_WHEN}) EXECUTE FUNCTION xruntime_callback_finished()",
    "callback_progress": "CREATE TRIGGER callback_progress BEFORE UPDATE OF progress ON jobs "
    f"FOR EACH ROW WHEN ({_PROGRESS_WHEN.format(now=NOW_MS['postgresql'])}) "
    "EXECUTE FUNCTION xruntime_callback_progress()",
}


def install_callback_triggers(conn: Connection, dialect: str) -> None:
    """Create the outbox's triggers where missing or different (as ``events.install_triggers``
    does for the history); run where the schema is made."""
    if dialect == "sqlite":
        install_sqlite_triggers(conn, _sqlite_triggers())
        return
    for statement in _postgresql_statements():
        conn.execute(text(statement))
    found = set(
        conn.execute(
            text(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'jobs'::regclass "
                "AND tgname LIKE 'callback_%'"
            )
        ).scalars()
    )
    for name, create in _PG_TRIGGERS.items():
        if name not in found:
            conn.execute(text(create))
