"""A database made by an earlier xruntime, brought up to this schema when a node opens it.

``metadata.create_all`` makes missing tables only; columns and indexes added since
(accounts: ``owner``, ``lane``; retries: ``not_before``, ``retries``; the history:
``event_note`` and its triggers; child jobs: ``parent_id``, ``child_stage``,
``child_index``, ``waiting_for``, ``fail_fast``; stored bytes: ``stored_bytes``;
callbacks: ``callback_url``, ``callback_period``, ``callback_progress_at`` and the
triggers that fill ``callback_outbox``, a table ``create_all`` makes; the bound of a
job's result: ``result_bound``) are
added here, once, in the transaction that creates the schema (on PostgreSQL under its
advisory lock, so nodes starting together upgrade it once).  Jobs stored before
accounts belong to the anonymous user.
"""

from sqlalchemy import inspect, text, update
from sqlalchemy.engine import Connection

from .callbacks import install_callback_triggers
from .events import install_triggers
from .schema import STORED_BYTES, callback_outbox, jobs

#: Columns added after the first release, with the SQL that adds them to old tables.
ADDED_COLUMNS = {
    "owner": "VARCHAR(100) NOT NULL DEFAULT ''",
    "lane": "VARCHAR(201) NOT NULL DEFAULT ''",
    "not_before": "BIGINT",
    "retries": "INTEGER NOT NULL DEFAULT 0",
    "event_note": "VARCHAR(500)",
    "parent_id": "VARCHAR(36) REFERENCES jobs(id) ON DELETE CASCADE",
    "child_stage": "INTEGER",
    "child_index": "INTEGER",
    "waiting_for": "INTEGER",
    "fail_fast": "INTEGER NOT NULL DEFAULT 0",
    "stored_bytes": None,  # generated: by dialect, below
    "callback_url": "VARCHAR(2000)",
    "callback_period": "INTEGER",
    "callback_progress_at": "BIGINT",
    "result_bound": "BIGINT NOT NULL DEFAULT 0",
}

#: Columns added to ``callback_outbox`` since it was made (the row of the history that
#: tells an event's failed attempts, issue 32).
OUTBOX_ADDED_COLUMNS = {"history_seq": "INTEGER"}

#: SQLite adds a generated column only as VIRTUAL (computed when read, stored in the
#: index over it, which is all the sum reads); PostgreSQL's are STORED (the upgrade
#: rewrites the table once).
_GENERATED = {"sqlite": "VIRTUAL", "postgresql": "STORED"}


def upgrade(conn: Connection) -> list[str]:
    """Add what an older ``jobs`` table lacks; answers the names of the columns added."""
    present = {column["name"] for column in inspect(conn).get_columns("jobs")}
    added = [name for name in ADDED_COLUMNS if name not in present]
    for name in added:
        definition = (
            ADDED_COLUMNS[name]
            or f"BIGINT GENERATED ALWAYS AS ({STORED_BYTES}) {_GENERATED[conn.dialect.name]}"
        )
        conn.execute(text(f"ALTER TABLE jobs ADD COLUMN {name} {definition}"))
    if "lane" in added:
        conn.execute(update(jobs).values(lane=jobs.c.service + "/" + jobs.c.owner))
    for index in jobs.indexes:
        index.create(conn, checkfirst=True)
    present = {column["name"] for column in inspect(conn).get_columns("callback_outbox")}
    for name, definition in OUTBOX_ADDED_COLUMNS.items():
        if name not in present:
            conn.execute(text(f"ALTER TABLE callback_outbox ADD COLUMN {name} {definition}"))
            added.append(f"callback_outbox.{name}")
    for index in callback_outbox.indexes:
        index.create(conn, checkfirst=True)
    install_triggers(conn, conn.dialect.name)
    install_callback_triggers(conn, conn.dialect.name)
    return added
