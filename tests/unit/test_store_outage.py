"""The store unreachable for a while, without HTTP: which database errors mean "try
again", how long an SQLite write waits for a locked database, and the slot's patience
with a write that must not be lost."""

import sqlite3
import threading
import time

import pytest

from xruntime.bindings.json_binding import fault_response
from xruntime.engine import supervisor as supervisor_module
from xruntime.engine.supervisor import Supervisor
from xruntime.operations.failures import as_fault
from xruntime.protocol.faults import InternalErrorFault, TemporarilyUnavailableFault
from xruntime.store import StoreFull, StoreUnavailable, now_ms
from xruntime.store import sqlite as store_sqlite
from xruntime.store.unavailable import is_unavailable

from .test_store_races import new_record


@pytest.mark.parametrize(
    "message",
    [
        "database is locked",
        "attempt to write a readonly database",
        "database or disk is full",
        "disk I/O error",
        "unable to open database file",
    ],
)
def test_sqlite_errors_of_the_database_mean_try_again(message):
    assert is_unavailable(sqlite3.OperationalError(message))


@pytest.mark.parametrize(
    "error",
    [
        sqlite3.OperationalError("no such table: jobs"),
        sqlite3.OperationalError('near "SELEC": syntax error'),
        sqlite3.IntegrityError("UNIQUE constraint failed: jobs.id"),
        ValueError("a bug"),
    ],
)
def test_errors_of_a_statement_stay_bugs(error):
    assert not is_unavailable(error)


def test_postgresql_connection_errors_mean_try_again():
    import psycopg

    assert is_unavailable(psycopg.OperationalError("connection refused"))
    assert is_unavailable(psycopg.errors.AdminShutdown("terminating connection"))
    assert is_unavailable(psycopg.errors.ReadOnlySqlTransaction("read-only transaction"))
    assert not is_unavailable(psycopg.errors.UndefinedTable("no such table"))


def test_a_store_error_is_answered_try_again_and_a_bug_internal_error():
    fault = as_fault(StoreUnavailable("database is locked"), "XDemo/startSimulate")
    assert isinstance(fault, TemporarilyUnavailableFault)
    assert "locked" not in fault.message  # the database's words stay in the log
    response = fault_response(fault)
    assert response.status_code == 503 and int(response.headers["Retry-After"]) > 0
    assert isinstance(as_fault(KeyError("x"), "here"), InternalErrorFault)
    assert "Retry-After" not in fault_response(as_fault(KeyError("x"), "here")).headers


@pytest.fixture
def locked(store, monkeypatch):
    """The store's database with its write lock held by another program."""
    monkeypatch.setattr(store_sqlite, "BUSY_TIMEOUT_S", 0.3)
    locker = sqlite3.connect(store.engine.url.database, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    yield locker
    locker.execute("ROLLBACK")
    locker.close()


def test_a_write_to_a_locked_database_raises_store_unavailable_and_stores_nothing(store, locked):
    rec = new_record()
    with pytest.raises(StoreUnavailable):
        store.create(rec, 100)
    assert store.peek(rec.id) is None  # reads go on (WAL)
    locked.execute("ROLLBACK")
    locked.execute("BEGIN")  # (the fixture ends it)
    assert store.create(rec, 100)
    assert store.peek(rec.id).status == "QUEUING"


def test_writers_queued_behind_a_locked_database_each_wait_the_busy_timeout_not_in_turn(
    store, locked
):
    """Eight requests waiting to write each fail after BUSY_TIMEOUT_S, not one after
    the other (which would make the last wait eight times as long)."""
    took = []

    def write():
        start = time.monotonic()
        with pytest.raises(StoreUnavailable):
            store.create(new_record(), 100)
        took.append(time.monotonic() - start)

    threads = [threading.Thread(target=write) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(took) == 8
    assert max(took) < 3 * store_sqlite.BUSY_TIMEOUT_S


# ------------------------------------------------------------------ the slot's patience


class Flaky:
    """A write that fails with StoreUnavailable ``times`` times, then answers."""

    def __init__(self, times):
        self.left, self.calls = times, 0

    def __call__(self):
        self.calls += 1
        if self.left:
            self.left -= 1
            raise StoreUnavailable("the database is restarting")
        return True


def supervisor(store):
    return Supervisor(store, notifier=None, settings=None, node="test-node")


def test_a_write_that_must_not_be_lost_waits_for_the_store(store):
    write = Flaky(3)
    assert supervisor(store).persist(write, "the outcome of a job") is True
    assert write.calls == 4


def test_a_result_with_no_room_is_not_waited_for_but_a_small_write_is(store):
    """A full disk: the write of a result raises StoreFull at once (its job fails:
    engine.outcomes); any other write waits for room as for a restarting database."""
    full = StoreFull("the job store's disk is full: database or disk is full")

    def no_room():
        raise full

    with pytest.raises(StoreFull):
        supervisor(store).persist(no_room, "the outcome of a job", full_is_final=True)
    calls = []

    def small():  # no room twice, then some was freed
        calls.append(1)
        if len(calls) <= 2:
            raise full
        return True

    assert supervisor(store).persist(small, "the outcome of a job") is True
    assert len(calls) == 3


def test_a_node_shutting_down_gives_up_after_its_patience(store, monkeypatch):
    monkeypatch.setattr(supervisor_module, "CLOSING_PATIENCE", 0.3)
    sup = supervisor(store)
    sup.closing = True
    write = Flaky(10_000)
    start = time.monotonic()
    assert sup.persist(write, "the hand-back of a job") is None
    assert time.monotonic() - start < 3


def test_only_the_jobs_a_slot_holds_keep_their_lease(store):
    """A job of this node that no slot holds (its slot lost it) runs out of lease and
    is recovered by the node's own housekeeping."""
    held, lost = new_record(), new_record()
    for rec in (held, lost):
        assert store.create(rec, 0)
    sup = supervisor(store)
    for _rec in (held, lost):
        assert store.claim(sup.node, now_ms() - 60_000, 1_000) is not None  # leases long gone

    class Slot:
        current = held.id

    sup.slots = [Slot()]
    sup.housekeeping.renew_leases()
    recovered = store.recover(None, now_ms(), 3, lambda attempts: "{}")
    assert [r.id for r in recovered] == [lost.id]
    assert store.peek(lost.id).status == "QUEUING"
    assert store.peek(held.id).status == "RUNNING"


def test_opening_a_store_waits_for_a_writer_and_changes_no_schema(tmp_path):
    """A process of the node (or a second node on the file) opening the store while
    another writes waits for the write lock instead of failing at start; opening an
    up-to-date database rewrites nothing of its schema."""
    import sqlite3
    import threading
    import time as clock

    from xruntime.store import JobStore

    path = str(tmp_path / "db")
    JobStore("sqlite:///" + path).close()
    writer = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    version = writer.execute("PRAGMA schema_version").fetchone()[0]
    writer.execute("BEGIN IMMEDIATE")
    commit = threading.Timer(1.0, writer.execute, ("COMMIT",))
    commit.start()
    began = clock.monotonic()
    JobStore("sqlite:///" + path).close()
    assert clock.monotonic() - began >= 0.9
    commit.join(30)  # the connection is used below: not while the COMMIT is still in it
    assert writer.execute("PRAGMA schema_version").fetchone()[0] == version
    writer.close()
