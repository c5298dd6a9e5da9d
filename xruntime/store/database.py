"""The store's way to its database: one engine, short transactions, statements compiled once.

``Database`` opens the engine for a SQLAlchemy URL (SQLite, the embedded default, or
PostgreSQL), makes or upgrades the schema, and gives the store's methods (``sql``,
``children``) the few ways they run SQL: a write transaction (``_write``), a DBAPI
cursor for the hot path's single statements (``_run``, ``_guarded``), each turning
an unreachable database into ``StoreUnavailable``.  SQLite runs in WAL mode; its
writers are kept apart by a turn in each process and by SQLite's own lock between
processes (``sqlite``), and a transaction of several statements takes the database's
write lock when it begins (``BEGIN IMMEDIATE``), so a read-then-write (the
``max_queued`` check) is atomic across processes too.  PostgreSQL's writers are kept
apart by row locks and ``FOR UPDATE SKIP LOCKED`` claims; its clock decides between
nodes (``clock``).
"""

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import TracebackType
from typing import Any

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.sql import ColumnElement, Select

from . import result_files, sqlite
from .clock import DatabaseClock
from .clock import stop_using as stop_using_clock
from .clock import use as use_clock
from .postgresql import POOL_TIMEOUT_S, postgresql_connect_args
from .records import Run
from .schema import feed_metadata
from .schema_versions import bring_up_to_date
from .statements import Prepared, Statement, guarded_statements, prepared_statements
from .unavailable import unavailable_as_store_error

log = logging.getLogger(__name__)

#: PostgreSQL advisory lock serialising the schema's creation.
SCHEMA_LOCK_KEY = 0x78727430
#: PostgreSQL advisory lock serialising the max_queued checks (count, then insert).
QUEUE_LOCK_KEY = 0x78727431
#: Statements compiled for their arguments kept at most (their arguments change with
#: the settings: past this many, the cache starts afresh).
COMPILED_KEPT = 64


def guard_values(job_id: str, run: Run | None, values: dict[str, Any]) -> dict[str, Any]:
    """A guarded statement's parameters: ``values``, the job and, fenced, the run."""
    values = dict(values, job_id=job_id)
    if run is not None:
        values.update(run_node=run.node, run_attempt=run.attempt)
    return values


class Database:
    """The engine of a SQLAlchemy URL (``sqlite:///path`` or ``postgresql+psycopg://…``)
    and the ways the store's methods run their SQL on it."""

    def __init__(self, url: str, background_checkpoints: bool = False):
        """``background_checkpoints``: on SQLite, no commit of this process copies the
        WAL into the database; its node's ``sqlite.WalCheckpointer`` does (a node's
        processes open their stores so)."""
        self.url = url
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        self.checkpointer: sqlite.WalCheckpointer | None = None
        #: where large results are kept as files (``result_files``): beside a SQLite
        #: database's file; None on PostgreSQL and for a database in memory
        self.result_folder: str | None = None
        if self.dialect == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                sqlite.make_private_file(os.path.abspath(parsed.database))
                self.result_folder = result_files.folder_of(parsed.database)
            self.engine = create_engine(
                url,
                pool_size=20,
                max_overflow=200,
                pool_reset_on_return=None,
                connect_args={"check_same_thread": False},
            )
            event.listen(self.engine, "connect", sqlite.set_up_connection)
            if background_checkpoints:
                event.listen(self.engine, "connect", sqlite.no_checkpoint_at_commit)
            self._writers: sqlite.WriterTurns | None = sqlite.WriterTurns()
        else:
            self.engine = create_engine(
                url,
                pool_size=20,
                max_overflow=100,
                pool_pre_ping=True,
                pool_timeout=POOL_TIMEOUT_S,
                connect_args=postgresql_connect_args(parsed.query),
            )
            self._writers = None  # row locks keep PostgreSQL's writers apart
        #: each thread's own connection for the prepared statements, on an SQLite file
        #: (a database in memory is one per connection; PostgreSQL's come from the pool)
        self._own: sqlite.ThreadConnections | None = None
        if self.result_folder is not None:
            self._own = sqlite.ThreadConnections(self._detached)
        self._make_schema()
        self.clock: DatabaseClock | None = None
        if self.dialect == "postgresql":  # several hosts: the database's clock decides
            self.clock = DatabaseClock(self._database_ms)
            use_clock(self.clock)
        self._prepared = {
            key: Prepared(build(), self.engine.dialect, columns, keys)
            for key, (build, columns, keys) in prepared_statements().items()
        }
        self._compiled_cache: dict[tuple, Prepared] = {}

    def _as_stored(self, blob: bytes | memoryview) -> bytes | memoryview:
        """A result as the store read it: a reference to files is their bytes."""
        located = self._located(blob)
        return blob if located is None else located.read()

    def _located(self, blob: bytes | memoryview) -> result_files.Located | None:
        """Where a result kept in result files is (None: it is in ``blob`` itself)."""
        if self.result_folder is None:
            return None
        spans = result_files.spans_in(blob, self.result_folder)
        return None if spans is None else result_files.Located(self.result_folder, spans)

    def _make_schema(self) -> None:
        """Create the tables (or bring an older database up to date:
        ``schema_versions``) in one transaction:
        on PostgreSQL under an advisory lock, so that nodes starting together do it
        once; on SQLite with the write lock, waited for (up to SCHEMA_WAIT_S) while the
        node's other processes or a cleanup are writing."""
        deadline = time.monotonic() + sqlite.SCHEMA_WAIT_S

        def attempt():
            with self.engine.begin() as conn:
                if self.dialect == "postgresql":  # an upgrade may rewrite a large table
                    conn.execute(text("SET LOCAL statement_timeout = 0"))
                    conn.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY}
                    )
                else:
                    sqlite.begin_immediate(conn.exec_driver_sql, deadline)
                applied = bring_up_to_date(conn)
                if applied:
                    log.info("the job store's schema: %s applied", ", ".join(applied))
                if self.dialect == "sqlite":
                    feed_metadata.create_all(conn)

        sqlite.retry_while_busy(attempt, deadline)

    def _writing(self, deadline: float):
        """This process's turn to write, on SQLite (none needed on PostgreSQL)."""
        return self._writers.turn(deadline) if self._writers is not None else nullcontext()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction of several statements (SQLAlchemy Core), committed at the
        end; on SQLite it holds the database's write lock from its beginning."""
        deadline = sqlite.write_deadline()
        with unavailable_as_store_error(), self._writing(deadline), self.engine.begin() as conn:
            if self.dialect == "sqlite":  # other processes write too: take the lock first
                sqlite.begin_immediate(conn.exec_driver_sql, deadline)
            yield conn
        sqlite.written()

    def _locking(self, query: Select, skip_locked: bool = False) -> Select:
        """``query`` taking the rows it reads for this write transaction: FOR UPDATE on
        PostgreSQL (``skip_locked``: passing over rows another holds); on SQLite the
        transaction's write lock holds every other writer already."""
        if self.dialect == "postgresql":
            return query.with_for_update(skip_locked=skip_locked)
        return query

    @property
    def answers_at_once(self) -> bool:
        """Whether a small call's store work may run ``at_once`` (an event loop's own
        thread): on SQLite, where it is a few local reads and one short write, and what
        would wait raises WouldWait; never on PostgreSQL, where every statement waits
        for the network."""
        return self.dialect == "sqlite"

    @staticmethod
    def at_once() -> AbstractContextManager[None]:
        """``sqlite.at_once``: the store work within waits for no lock before it writes."""
        return sqlite.at_once()

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A connection to read with (SQLAlchemy Core)."""
        with unavailable_as_store_error(), self.engine.connect() as conn:
            yield conn

    def _cursor(self, write: bool, binary: bool = False) -> "_Statement":
        """``with``: a DBAPI cursor, committed at the end: on this thread's own connection
        to an SQLite file (``sqlite.ThreadConnections``), else on a pooled one.  On SQLite
        the connection commits each statement itself (every hot-path write is a single
        statement), so the database's write lock is held only while SQLite runs it,
        never while Python waits for its GIL.  ``binary``: PostgreSQL answers in its
        binary form, for reads of large payloads (a ``bytea`` as text is hex, twice its
        size, encoded by the server and decoded here: 3× the time for a 36 MB result)."""
        return _Statement(self, write, binary)

    def _detached(self) -> Any:
        """A connection set up as the pool's are (its ``connect`` events), taken out of
        the pool for good: closing it closes it."""
        connection = self.engine.raw_connection()
        connection.detach()
        return connection

    def _compiled(
        self, key: tuple, build: Callable[[], Statement], columns: list | None = None
    ) -> Prepared:
        """``build()``'s statement compiled for this database, once per ``key``: for the
        statements that vary with their arguments (the services, limits or states they
        name)."""
        p = self._compiled_cache.get(key)
        if p is None:
            if len(self._compiled_cache) >= COMPILED_KEPT:
                self._compiled_cache.clear()
            p = self._compiled_cache[key] = Prepared(build(), self.engine.dialect, columns)
        return p

    def _run(self, key: str | Prepared, write: bool, **params: Any) -> tuple[int, dict | None]:
        """Run a prepared statement (its key, or a Prepared); answers (rowcount, first
        row as a dict or None)."""
        p = key if isinstance(key, Prepared) else self._prepared[key]
        with self._cursor(write) as cur:
            cur.execute(p.sql, p.args(params))
            raw = cur.cursor
            if not p.columns:  # it answers no rows
                return raw.rowcount, None
            rows = raw.fetchall()  # to its end: the statement is done
            return raw.rowcount, (dict(zip(p.columns, rows[0], strict=True)) if rows else None)

    def _rows(self, key: str | Prepared, binary: bool = False, **params: Any) -> list[tuple]:
        """Run a prepared read; answers all its rows (``binary``: see ``_cursor``)."""
        p = key if isinstance(key, Prepared) else self._prepared[key]
        with self._cursor(False, binary) as cur:
            cur.execute(p.sql, p.args(params))
            return cur.cursor.fetchall()

    def _count(self, key: str, **params: Any) -> int:
        """Run a prepared count (its one row's ``n``)."""
        _, row = self._run(key, False, **params)
        assert row is not None  # an aggregate answers a row
        return int(row["n"])

    def _guarded(
        self,
        key: str,
        job_id: str,
        states: Iterable[str],
        run: Run | None = None,
        also: tuple[ColumnElement, ...] = (),
        **values: Any,
    ) -> bool:
        """Run a guarded statement (``statements.guarded_statements``); True if the job
        was in one of ``states`` (and still ``run``'s, when given) and ``also`` held.
        ``also`` is compiled once per set of condition objects: module constants, kept
        by identity (a ColumnElement's ``==`` builds SQL rather than comparing)."""
        states = tuple(states)
        fenced = run is not None
        p = self._compiled(
            ("guarded", key, states, fenced, tuple(map(id, also))),
            lambda: guarded_statements(states, fenced, also)[key],
        )
        return self._run(p, True, **guard_values(job_id, run, values))[0] == 1

    def _database_ms(self) -> int:
        """The database's clock, read now (PostgreSQL)."""
        with self._read() as conn:
            return int(
                conn.execute(
                    text("SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)")
                ).scalar_one()
            )

    def ping(self) -> None:
        """``SELECT 1`` on a pooled connection (``/readyz``); StoreUnavailable when the
        database does not answer."""
        with self._read() as conn:
            conn.execute(text("SELECT 1")).scalar_one()

    def checkpoint_in_background(self) -> None:
        """(The node's main process, on SQLite.) Start the node's WAL checkpointer."""
        database = make_url(self.url).database
        if self.dialect == "sqlite" and database and database != ":memory:":
            self.checkpointer = sqlite.WalCheckpointer(os.path.abspath(database))
            self.checkpointer.start()

    def close(self) -> None:
        """Stop the database's clock and the checkpointer; close the pool's connections."""
        if self.checkpointer is not None:
            self.checkpointer.stop()
        if self.clock is not None:
            self.clock.close()
            stop_using_clock(self.clock)
        if self._own is not None:
            self._own.close()
        self.engine.dispose()


class _Statement:
    """``Database._cursor``: the scope of one statement's cursor.  A class, not a
    generator's context manager: every statement of the store enters one, and the
    generator, its context manager, the turn's and the error translation's cost as many
    calls again as the statement's own work (about 25 Python calls a write, against 11).
    On entering, this process's turn to write (a write, on SQLite), the connection and
    its cursor; on leaving, the commit (or the rollback), the connection given back (a
    pooled one), the turn given back, and an unreachable database's error raised as
    ``StoreUnavailable`` (``unavailable_as_store_error``), in that order."""

    __slots__ = ("db", "write", "binary", "conn", "cursor", "turn")

    def __init__(self, db: Database, write: bool, binary: bool) -> None:
        self.db, self.write, self.binary = db, write, binary
        self.turn: sqlite.WriterTurns | None = None

    def __enter__(self) -> sqlite.PatientCursor:
        db = self.db
        deadline = sqlite.write_deadline()
        try:
            if self.write and db._writers is not None:
                db._writers.take(deadline)
                self.turn = db._writers
            try:
                own = db._own
                conn = self.conn = own.get() if own is not None else db.engine.raw_connection()
                try:
                    if self.binary and db.dialect == "postgresql":
                        raw = conn.cursor(binary=True)
                    else:
                        raw = conn.cursor()
                except BaseException:
                    self._roll_back()
                    self._give_back()
                    raise
            except BaseException:
                if self.turn is not None:
                    self.turn.give()
                raise
        except Exception as error:
            _as_store_error(error)
            raise
        self.cursor = sqlite.PatientCursor(raw, deadline)
        return self.cursor

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            try:
                if error is None:
                    self.conn.commit()
                    if self.write:
                        sqlite.written()
                else:
                    self._roll_back()
            except BaseException:
                if error is None:  # the commit failed
                    self._roll_back()
                raise
            finally:
                self._give_back()
                if self.turn is not None:
                    self.turn.give()
        except Exception as failed:
            _as_store_error(failed)
            raise
        if isinstance(error, Exception):
            _as_store_error(error)

    def _roll_back(self) -> None:
        """Roll back; a connection lost (a cut, a restart) is dropped, rather than
        failing its reset with a traceback (this thread's own: a new one next time)."""
        try:
            self.conn.rollback()
        except Exception:
            if self.db._own is not None:
                self.db._own.drop()
            else:
                self.conn.invalidate()

    def _give_back(self) -> None:
        if self.db._own is None:
            self.conn.close()


def _as_store_error(error: BaseException) -> None:
    """Raise ``error`` as ``unavailable_as_store_error`` would (StoreUnavailable,
    StoreFull) where it is one of those; else return."""
    unavailable_as_store_error().__exit__(type(error), error, error.__traceback__)
