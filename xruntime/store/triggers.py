"""Making a store's SQLite triggers as this version defines them (the history's,
``events``; the callback outbox's, ``callbacks``).

SQLite keeps each trigger's text: a trigger whose text matches is left alone, so opening
a store changes no schema; one missing or different is made again.
"""

from sqlalchemy import text
from sqlalchemy.engine import Connection


def install_sqlite_triggers(conn: Connection, wanted: dict[str, str]) -> None:
    """Make each trigger of ``wanted`` (name → its CREATE TRIGGER) where missing or
    different."""
    present: dict[str, str] = dict(
        conn.execute(text("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")).all()
    )
    for name, create in wanted.items():
        if present.get(name) != create:
            conn.execute(text(f"DROP TRIGGER IF EXISTS {name}"))
            conn.execute(text(create))
