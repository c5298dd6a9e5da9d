"""Each job's history (docs/protocol.md §11), written by the database in the same statement.

A trigger on ``jobs`` adds a row to ``job_events`` when a job is inserted, when its
status changes and at its first fetch, inside the statement that makes the change:
there is never a change without its event nor an event without its change, whichever
code (or node) makes it, and the hot path stays one statement per change.  The event's
message is the ``event_note`` the statement writes with the change (each statement
that changes a status sets it, made with ``note_of``); its time is the database's
clock, one clock for every node.  ``job_events`` rows go with their job (``ON DELETE CASCADE``).
"""

import json

from sqlalchemy import text
from sqlalchemy.engine import Connection

from .triggers import install_sqlite_triggers

#: The longest event message stored (characters).
NOTE_CHARS = 500

#: Time in ms since the epoch, by the database's clock.
NOW_MS = {
    "sqlite": "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
    "postgresql": "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
}

_COLUMNS = "job_seq, time, status, attempt, node, message"


#: A change that takes a job off its node (a retry, a hand-back, a re-queue) names the
#: node it left.
_NODE = "COALESCE(NEW.node, OLD.node)"


def _event_inserts(now: str) -> tuple[str, str, str, str]:
    """The statements adding a job's event, with the database's clock ``now``, when it
    is queued, when its status changes, when it waits for its children and when it is
    first fetched (the same for both dialects)."""

    def insert(message: str, node: str) -> str:
        values = f"NEW.seq, {now}, NEW.status, NEW.attempts, {node}, {message}"
        return f"INSERT INTO job_events ({_COLUMNS}) VALUES ({values});"

    return (
        insert("COALESCE(NEW.event_note, 'queued')", "NEW.node"),
        insert("COALESCE(NEW.event_note, NEW.status)", _NODE),
        insert("COALESCE(NEW.event_note, 'waiting')", _NODE),
        insert("'fetched'", _NODE),
    )


def _sqlite_triggers() -> dict[str, str]:
    """name → the CREATE TRIGGER statement."""
    queued, changed, waiting, fetched = _event_inserts(NOW_MS["sqlite"])
    return {
        "job_queued": f"""CREATE TRIGGER job_queued AFTER INSERT ON jobs BEGIN
            {queued}
        END""",
        "job_changed": f"""CREATE TRIGGER job_changed AFTER UPDATE OF status ON jobs
            WHEN NEW.status IS NOT OLD.status BEGIN
            {changed}
        END""",
        "job_waiting": f"""CREATE TRIGGER job_waiting AFTER UPDATE OF waiting_for ON jobs
            WHEN NEW.waiting_for IS NOT OLD.waiting_for AND NEW.status IS OLD.status BEGIN
            {waiting}
        END""",
        "job_fetched": f"""CREATE TRIGGER job_fetched AFTER UPDATE OF first_fetched_at ON jobs
            WHEN OLD.first_fetched_at IS NULL AND NEW.first_fetched_at IS NOT NULL BEGIN
            {fetched}
        END""",
    }


def _postgresql_triggers() -> list[str]:
    """The function behind PostgreSQL's trigger (CREATE OR REPLACE)."""
    queued, changed, waiting, fetched = _event_inserts(NOW_MS["postgresql"])
    return [
        f"""CREATE OR REPLACE FUNCTION xruntime_job_event() RETURNS trigger AS $$
        BEGIN
            IF TG_OP = 'INSERT' THEN
                {queued}
            ELSIF NEW.status IS DISTINCT FROM OLD.status THEN
                {changed}
            ELSIF NEW.waiting_for IS DISTINCT FROM OLD.waiting_for THEN
                {waiting}
            ELSIF OLD.first_fetched_at IS NULL AND NEW.first_fetched_at IS NOT NULL THEN
                {fetched}
            END IF;
            RETURN NULL;
        END $$ LANGUAGE plpgsql""",
    ]


_PG_TRIGGER = (
    "CREATE TRIGGER job_event AFTER INSERT OR UPDATE OF status, first_fetched_at, waiting_for "
    "ON jobs FOR EACH ROW EXECUTE FUNCTION xruntime_job_event()"
)


def install_triggers(conn: Connection, dialect: str) -> None:
    """Create the triggers as this version defines them, where missing or different
    (SQLite keeps each trigger's text: one that matches is left alone, so opening a
    store changes no schema; the function behind PostgreSQL's is replaced, which takes
    no lock on the table, and its trigger made where missing); run where the schema is
    made."""
    if dialect == "sqlite":
        install_sqlite_triggers(conn, _sqlite_triggers())
        return
    for statement in _postgresql_triggers():
        conn.execute(text(statement))
    found = conn.execute(
        text(
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger "
            "WHERE tgname = 'job_event' AND tgrelid = 'jobs'::regclass"
        )
    ).scalar()
    if found is None or "waiting_for" not in found:  # missing, or made before child jobs
        conn.execute(text("DROP TRIGGER IF EXISTS job_event ON jobs"))
        conn.execute(text(_PG_TRIGGER))


def note_of(message: str) -> str:
    """An event's message as stored (at most NOTE_CHARS characters)."""
    return message if len(message) <= NOTE_CHARS else message[: NOTE_CHARS - 3] + "..."


def fault_type(fault_json: str | None) -> str:
    """The type name of a stored fault (the codec's JSON), for the message of a failure."""
    if fault_json is None:
        return "a fault"
    try:
        return json.loads(fault_json)["faultInfo"]["$type"]
    except (TypeError, ValueError, KeyError):
        return "a fault"
