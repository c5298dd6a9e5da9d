"""Which schema a database has, and bringing it to this code's: Alembic revisions.

The version is Alembic's ``alembic_version`` row; the revisions are in ``migrations/``
(one module each, applied in order).  When a store opens a database, in the transaction
that makes the schema and under its lock (``Database._make_schema``: PostgreSQL's
advisory lock, SQLite's write lock), ``bring_up_to_date``:

- a database without xruntime's tables is made at the latest revision
  (``schema.metadata``) and marked so;
- a database made before schema versions (no version, its tables there) is brought to
  the baseline by ``migrate.upgrade`` (which knows every earlier schema), marked with the
  baseline, and upgraded from there;
- a database behind this code's head is upgraded revision by revision;
- a database at the head has its triggers made again where missing or different, as
  every open did before versions (``events.install_triggers``);
- a database at a revision this code does not know was upgraded by a newer release:
  it is used when that release listed this code's head among the versions that can
  still use it (``schema.schema_readers``: its revisions since only added to the
  schema), and refused otherwise (``SchemaTooNew``, one line).

After an upgrade, ``schema_readers`` lists the head and the revisions before it that
nodes may still run: walking back from the head while each revision
``keeps_older_nodes``.  Alembic itself is imported only when there is something to do:
opening a database at the head reads one row (every HTTP process opens the store), and a
new database is marked at the head with Alembic's table and row written directly
(``_mark_new``).

``xruntime db current|upgrade|history`` (``current``, ``upgrade``, ``history``) do the
same by hand, for an administrator who leaves upgrades to the command
(``[database] auto_upgrade = false``: ``serve`` then refuses a database behind its head,
``check_at_start``).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from sqlalchemy import (
    Column,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    delete,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import Connection

from . import migrate, owner_bytes
from .callbacks import install_callback_triggers
from .events import install_triggers
from .schema import metadata, schema_readers

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

# Alembic's own lines (its plug-ins, its "context impl") say nothing to an administrator:
# the store logs the revisions it applied itself
logging.getLogger("alembic").setLevel(logging.WARNING)

#: The folder of the revisions.
MIGRATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")
#: The first revision: the schema of the last release without versions.
BASELINE = "0001_baseline"
#: This code's latest revision (tests/unit/test_schema_versions.py checks it is the
#: revisions' head): a database at it is opened without importing Alembic.
HEAD = "0003_owner_sums_postgresql_only"
#: The head and the revisions before it whose nodes can use its schema (``readers_of``
#: the head; tests/unit/test_schema_versions.py checks it against the revisions): a new
#: database is marked without importing Alembic.
HEAD_READERS = ("0003_owner_sums_postgresql_only", "0002_schema_readers", "0001_baseline")
#: The tables of the baseline (a database made before versions gets those it lacks).
BASELINE_TABLES = ("jobs", "job_events", "job_results", "callback_outbox")


#: Alembic's table of a database's revision, as Alembic makes it (its
#: ``DefaultImpl.version_table_impl``), for ``_mark_new``.
alembic_version = Table(
    "alembic_version",
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)


class SchemaTooNew(Exception):
    """The database was upgraded by a newer xruntime past what this code can use."""


class UpgradeNeeded(Exception):
    """The database is behind this code's schema, and upgrades are left to
    ``xruntime db upgrade``."""


def version_of(conn: Connection) -> str | None:
    """The database's revision: None for a database without versions (or without
    xruntime's tables: see ``has_tables``)."""
    if "alembic_version" not in inspect(conn).get_table_names():
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def has_tables(conn: Connection) -> bool:
    return "jobs" in inspect(conn).get_table_names()


def bring_up_to_date(conn: Connection) -> list[str]:
    """Make or upgrade the schema on ``conn`` (in the caller's transaction, under its
    lock); answers the revisions applied (empty when it was at the head)."""
    if not has_tables(conn):
        metadata.create_all(conn)
        _install_triggers(conn)
        _mark_new(conn)
        return [HEAD]
    current = version_of(conn)
    if current == HEAD:
        _install_triggers(conn)  # (as every open has: a trigger changed in place)
        return []
    script = _script()
    if current is not None and _unknown(script, current):
        _check_can_read(conn, current)
        return []
    applied: list[str] = []
    if current is None:  # made before schema versions: first to the baseline
        metadata.create_all(conn, tables=[metadata.tables[name] for name in BASELINE_TABLES])
        migrate.upgrade(conn)
        _mark(conn, BASELINE)
        applied.append(BASELINE)
    applied += _upgrade(conn, script)
    _install_triggers(conn)
    return applied


def check_at_start(conn: Connection, auto_upgrade: bool) -> str:
    """(``serve``, before anything starts.)  A line saying the database's version;
    ``SchemaTooNew`` for one this code cannot use, ``UpgradeNeeded`` for one behind it
    when upgrades are left to the command."""
    if not has_tables(conn):
        return f"no xruntime tables yet: made at {HEAD}"
    current = version_of(conn)
    if current == HEAD:
        return f"schema {HEAD}"
    script = _script()
    if current is not None and _unknown(script, current):
        _check_can_read(conn, current)
        return f"schema {current}, newer than this xruntime's {HEAD} and compatible with it"
    if not auto_upgrade:
        raise UpgradeNeeded(
            f"the database is at schema {current or 'before versions'}, behind this "
            f"xruntime's {HEAD}, and [database] auto_upgrade is false: run "
            "`xruntime db upgrade` (after a backup), then start the node"
        )
    return f"schema {current or 'before versions'}: a node upgrades it to {HEAD} when it starts"


def readers_of(script: ScriptDirectory) -> list[str]:
    """The head and the revisions before it whose nodes can use its schema."""
    readers = []
    for revision in script.walk_revisions():  # newest first
        readers.append(revision.revision)
        if not getattr(revision.module, "keeps_older_nodes", False):
            break
    return readers


def current_line(conn: Connection) -> str:
    """``xruntime db current``: the database's version, and the versions that can use it."""
    if not has_tables(conn):
        return "no xruntime tables yet (a node, or `xruntime db upgrade`, makes them)"
    current = version_of(conn)
    if current is None:
        return f"before schema versions (`xruntime db upgrade` brings it to {HEAD})"
    readers = sorted(conn.execute(select(schema_readers.c.revision)).scalars())
    where = "this xruntime's" if current == HEAD else f"this xruntime's is {HEAD}"
    return f"{current} ({where}); usable by the nodes of {', '.join(readers) or current}"


def current_line_of(url: str) -> str:
    """``current_line`` of the database at ``url``, on a connection of its own."""
    from sqlalchemy import create_engine

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return current_line(conn)
    finally:
        engine.dispose()


def history() -> list[str]:
    """Every revision, newest first: its id, what older nodes can do, its title."""
    return [
        f"{revision.revision}: {(revision.doc or '').splitlines()[0]}"
        + ("" if getattr(revision.module, "keeps_older_nodes", False) else " (stop older nodes)")
        for revision in _script().walk_revisions()
    ]


# ------------------------------------------------------------------------ inside


def _config(conn: Connection | None = None) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", MIGRATIONS)
    config.attributes["connection"] = conn
    return config


def _script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config())


def _unknown(script: ScriptDirectory, revision: str) -> bool:
    from alembic.util import CommandError

    try:
        return script.get_revision(revision) is None
    except CommandError:  # (Alembic's word for a revision it does not have)
        return True


def _check_can_read(conn: Connection, current: str) -> None:
    readers: set[str] = set()
    if "schema_readers" in inspect(conn).get_table_names():
        readers = set(conn.execute(select(schema_readers.c.revision)).scalars())
    if HEAD not in readers:
        raise SchemaTooNew(
            f"the database is at schema {current}, which a newer xruntime made and this "
            f"one ({HEAD}) cannot use: run the newer release, or restore a backup taken "
            "before the upgrade"
        )


def _upgrade(conn: Connection, script: ScriptDirectory) -> list[str]:
    from alembic import command

    before = version_of(conn)
    command.upgrade(_config(conn), "head")
    after = version_of(conn)
    applied: list[str] = []
    for revision in script.iterate_revisions(after, before):  # newest first
        applied.insert(0, revision.revision)
    _set_readers(conn, readers_of(script))
    return applied


def _mark(conn: Connection, revision: str) -> None:
    from alembic import command

    command.stamp(_config(conn), revision)  # (its readers: ``_upgrade`` lists them)


def _mark_new(conn: Connection) -> None:
    """Mark a database just made at the head as Alembic's ``stamp`` does (its table, the
    head's row) and list its readers, without importing Alembic: Alembic, Mako and
    Pygments would stay in the main process's memory for its life (about 10 MB), for
    one row written once."""
    alembic_version.create(conn, checkfirst=True)
    conn.execute(delete(alembic_version))
    conn.execute(insert(alembic_version).values(version_num=HEAD))
    _set_readers(conn, list(HEAD_READERS))


def _set_readers(conn: Connection, readers: list[str]) -> None:
    conn.execute(delete(schema_readers))
    conn.execute(insert(schema_readers), [{"revision": revision} for revision in readers])


def _install_triggers(conn: Connection) -> None:
    install_triggers(conn, conn.dialect.name)
    install_callback_triggers(conn, conn.dialect.name)
    if conn.dialect.name == "sqlite":
        owner_bytes.install(conn)
