"""Each owner's stored bytes as a running total kept by SQLite itself, read in one row.

``[jobs] max_stored_bytes`` is checked at every start and again before every result is
stored (``operations.storage_quota``, ``engine.outcomes``): what the owner's jobs take
(``jobs.stored_bytes``, ``job_results.bytes``), what their callbacks waiting to be
delivered take (``schema.OUTBOX_BYTES``), and what their unfinished jobs may still store
(``result_bound``).  Summed over the owner's rows, that read grows with every job kept:
a node that keeps each job for hours paid it twice a cycle, more than all the rest of
the store's work.  On SQLite the table ``owner_bytes`` holds the same figure per owner,
kept by triggers in the statements that change a row (a job's payloads, its status or
bound, a large result, an outbox row), so the check reads one row, and is a condition
of the write that stores (``within``): no read of its own.

The table and its triggers are made where the schema is made, with the figures of the
rows already there (``install``), in the schema's own transaction: a database made by
an older release gets them at its first open, and a node of that release, not knowing
them, still keeps the figures right, since the database runs the triggers for every
writer.  PostgreSQL sums instead (``statements``' ``stored_bytes``): a running total
would be one row that every write of the owner locks until its commit, across nodes.
"""

from collections.abc import Callable

from sqlalchemy import Select, bindparam, column, func, select, table, text
from sqlalchemy.engine import Connection
from sqlalchemy.sql import ColumnElement

from .schema import OUTBOX_ROW_BYTES
from .statements import UNFINISHED
from .triggers import install_sqlite_triggers

TABLE = "owner_bytes"
owner_bytes = table(TABLE, column("owner"), column("bytes"))

_CREATE = f"CREATE TABLE {TABLE} (owner VARCHAR(100) NOT NULL PRIMARY KEY, bytes BIGINT NOT NULL)"


def _job_bytes(row: str) -> str:
    """What a job's row counts for (``row``: new or old): its payloads, and its bound
    while it is unfinished."""
    states = ", ".join(f"'{state}'" for state in UNFINISHED)
    return (
        f"{row}.stored_bytes + CASE WHEN {row}.status IN ({states}) "
        f"THEN {row}.result_bound ELSE 0 END"
    )


def _outbox_bytes(row: str) -> str:
    """``schema.OUTBOX_BYTES`` of an outbox row."""
    return (
        f"COALESCE(CAST(length({row}.progress) AS BIGINT), 0) + length({row}.url) "
        f"+ {OUTBOX_ROW_BYTES}"
    )


def _result_bytes(row: str) -> str:
    return f"{row}.bytes"


#: table → what a row of it counts for towards its owner
_COUNTED = {"jobs": _job_bytes, "job_results": _result_bytes, "callback_outbox": _outbox_bytes}


def _add(row: str, bytes_of: Callable[[str], str], sign: str = "") -> str:
    return (
        f"INSERT INTO {TABLE} (owner, bytes) VALUES ({row}.owner, {sign}({bytes_of(row)})) "
        "ON CONFLICT (owner) DO UPDATE SET bytes = bytes + excluded.bytes;"
    )


def _triggers() -> dict[str, str]:
    """name → CREATE TRIGGER, three for each table counted."""
    made = {}
    for name, bytes_of in _COUNTED.items():
        made[f"{TABLE}_{name}_insert"] = (
            f"CREATE TRIGGER {TABLE}_{name}_insert AFTER INSERT ON {name} "
            f"BEGIN {_add('new', bytes_of)} END"
        )
        made[f"{TABLE}_{name}_delete"] = (
            f"CREATE TRIGGER {TABLE}_{name}_delete AFTER DELETE ON {name} "
            f"BEGIN {_add('old', bytes_of, '-')} END"
        )
        made[f"{TABLE}_{name}_update"] = (
            f"CREATE TRIGGER {TABLE}_{name}_update AFTER UPDATE ON {name} "
            f"WHEN ({bytes_of('new')}) IS NOT ({bytes_of('old')}) OR new.owner IS NOT old.owner "
            f"BEGIN {_add('old', bytes_of, '-')} {_add('new', bytes_of)} END"
        )
    return made


def _summed() -> str:
    """Every owner's figure summed over the rows as they are (what the triggers keep)."""
    parts = [
        f"SELECT owner, {bytes_of(name)} AS bytes FROM {name}"
        for name, bytes_of in _COUNTED.items()
    ]
    return (
        f"INSERT INTO {TABLE} (owner, bytes) SELECT owner, SUM(bytes) FROM "
        f"({' UNION ALL '.join(parts)}) GROUP BY owner"
    )


def install(conn: Connection) -> None:
    """(SQLite, in the schema's transaction.)  The table with every owner's figure, made
    where missing, and its triggers, made where missing or different."""
    present = conn.execute(
        text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name"),
        {"name": TABLE},
    ).first()
    if present is None:
        conn.execute(text(_CREATE))
        conn.execute(text(_summed()))
    install_sqlite_triggers(conn, _triggers())


def _kept(owner: ColumnElement) -> ColumnElement:
    """The figure of ``owner`` (0 for an owner with no row)."""
    return func.coalesce(
        select(owner_bytes.c.bytes).where(owner_bytes.c.owner == owner).scalar_subquery(), 0
    )


def kept_statement() -> Select:
    """An owner's figure, as the ``stored_bytes`` count."""
    return select(_kept(bindparam("owner")).label("n"))


def within(owner: ColumnElement, adding: ColumnElement) -> ColumnElement:
    """A write's condition that ``owner``'s figure, with ``adding`` more, stays within
    ``:max_stored``: the ``max_stored_bytes`` check as a part of the write that stores
    (a start's insert, a result's finish), read before the write changes the figure.
    One statement instead of a read and a write: the read was a transaction of its own
    on the way of every job, at the start and at the end."""
    return _kept(owner) + adding <= bindparam("max_stored")
