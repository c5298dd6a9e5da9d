"""Whether ``[database] url`` names a database this node can use, said in one line.

``serve`` asks before it starts anything, and ``check-config --connect`` on request:
a database it cannot open or reach (a folder it may not write, a PostgreSQL database
that does not exist, a server that refuses or does not answer within the timeout, a
schema a newer xruntime made) is one line naming the key and the reason, instead of a
traceback of SQLAlchemy's a hundred lines long.  Nothing is created on PostgreSQL; on SQLite the
file is made (as a node makes it), private.
"""

import os

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from . import schema_versions, sqlite

#: seconds to wait for a PostgreSQL server to answer
CONNECT_TIMEOUT_S = 5


class DatabaseUnusable(Exception):
    """The database of ``[database] url`` cannot be opened or reached; the message is
    one line: the database's own reason."""


def probe(url: str, timeout_s: float = CONNECT_TIMEOUT_S, auto_upgrade: bool = True) -> str:
    """Connect once to ``url``; a line that says what is there (the kind of database,
    its schema version and how many jobs), or DatabaseUnusable: it cannot be opened or
    reached, or its schema is one this code cannot use, or behind it with
    ``auto_upgrade`` off (``schema_versions.check_at_start``)."""
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
            if not schema_versions.has_tables(conn):
                return f"{where}: no xruntime tables yet (a node creates them)"
            schema = schema_versions.check_at_start(conn, auto_upgrade)
            (count,) = conn.execute(text("SELECT count(*) FROM jobs")).one()
            return f"{where}: {schema}, {count} jobs"
    except (schema_versions.SchemaTooNew, schema_versions.UpgradeNeeded) as exc:
        raise DatabaseUnusable(str(exc)) from exc
    except Exception as exc:  # the driver's reason, in one line
        cause = getattr(exc, "orig", None) or exc
        first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        raise DatabaseUnusable(f"cannot use the {where}: {first}") from exc
    finally:
        engine.dispose()
