"""Whether ``[database] url`` names a database this node can use, said in one line.

``serve`` asks before it starts anything, and ``check-config --connect`` on request:
a database it cannot open or reach (a folder it may not write, a PostgreSQL database
that does not exist, a server that refuses or does not answer within the timeout) is
one line naming the key and the database's own reason, instead of a traceback of
SQLAlchemy's a hundred lines long.  Nothing is created on PostgreSQL; on SQLite the
file is made (as a node makes it), private.
"""

import os

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from . import sqlite

#: seconds to wait for a PostgreSQL server to answer
CONNECT_TIMEOUT_S = 5


class DatabaseUnusable(Exception):
    """The database of ``[database] url`` cannot be opened or reached; the message is
    one line: the database's own reason."""


def probe(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str:
    """Connect once to ``url``; a line that says what is there (the kind of database,
    and whether xruntime's tables are, with how many jobs), or DatabaseUnusable."""
    parsed = make_url(url)
    dialect = parsed.get_backend_name()
    connect_args: dict[str, object] = {}
    if dialect == "sqlite":
        path = parsed.database
        if path and path != ":memory:":
            try:
                sqlite.make_private_file(os.path.abspath(path))
            except OSError as exc:
                raise DatabaseUnusable(
                    f"cannot open the SQLite file {path}: {exc.strerror or exc}"
                ) from exc
        where = f"SQLite file {path}" if path else "SQLite in memory"
    else:
        connect_args["connect_timeout"] = max(1, int(timeout_s))
        where = f"PostgreSQL database {parsed.database!r} at {parsed.host or 'localhost'}"
    engine = create_engine(url, connect_args=connect_args)
    try:
        with engine.connect() as conn:
            if "jobs" not in inspect(conn).get_table_names():
                return f"{where}: no xruntime tables yet (a node creates them)"
            (count,) = conn.execute(text("SELECT count(*) FROM jobs")).one()
            return f"{where}: xruntime's tables, {count} jobs"
    except Exception as exc:  # the driver's reason, in one line
        cause = getattr(exc, "orig", None) or exc
        first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        raise DatabaseUnusable(f"cannot use the {where}: {first}") from exc
    finally:
        engine.dispose()
