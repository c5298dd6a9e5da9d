"""A call's store work run ``at_once`` (an HTTP process's event loop): where it would
wait for a lock before it writes, it raises WouldWait and has written nothing, so the
same work can run again in the pool; once it has written, it waits as anywhere else."""

import sqlite3
import threading
import time

import pytest

from xruntime.store import WouldWait, now_ms

from .helpers import new_record


@pytest.fixture
def locker(store):
    """Another program's connection to the store's database, holding nothing yet."""
    conn = sqlite3.connect(store.engine.url.database, isolation_level=None, check_same_thread=False)
    yield conn
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.close()


def test_a_write_that_would_wait_for_the_database_raises_would_wait_and_writes_nothing(
    store, locker
):
    assert store.answers_at_once
    rec = new_record()
    locker.execute("BEGIN IMMEDIATE")
    with pytest.raises(WouldWait), store.at_once():
        assert store.peek(rec.id) is None  # a read does not wait (WAL)
        store.create(rec, 100)
    locker.execute("ROLLBACK")
    assert store.peek(rec.id) is None
    with store.at_once():  # nothing to wait for now
        assert store.create(rec, 100)
    assert store.peek(rec.id).status == "QUEUING"


def test_a_write_that_would_wait_for_this_process_s_turn_raises_would_wait(store):
    rec = new_record()
    taken, release = threading.Event(), threading.Event()

    def writer():  # another thread of this process, in its turn to write
        with store._writing(time.monotonic() + 10):
            taken.set()
            release.wait(30)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert taken.wait(30)
        with pytest.raises(WouldWait), store.at_once():
            store.create(rec, 100)
    finally:
        release.set()
        thread.join(30)
    assert store.peek(rec.id) is None


def test_once_written_the_work_waits_for_the_lock_as_anywhere_else(store, locker):
    """A second write after the first must not raise: the first is committed, and
    running the work again would write it twice."""
    first, second = new_record(), new_record()
    store.create(first, 100)
    waited = threading.Event()

    def lock_then_release():
        locker.execute("BEGIN IMMEDIATE")
        waited.wait(30)
        locker.execute("ROLLBACK")

    with store.at_once():
        store.mark_fetched(first.id, now_ms())  # written: from here on it may wait
        thread = threading.Thread(target=lock_then_release)
        thread.start()
        while not locker.in_transaction:
            threading.Event().wait(0.001)
        threading.Timer(0.05, waited.set).start()
        assert store.create(second, 100)  # waited out the lock, not WouldWait
    thread.join(30)
    assert store.peek(second.id).status == "QUEUING"
    assert store.get(first.id).first_fetched_at is not None


def test_outside_at_once_a_write_waits_for_the_lock(store, locker):
    rec = new_record()
    locker.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.05, locker.execute, ("ROLLBACK",))
    release.start()
    try:
        assert store.create(rec, 100)
    finally:
        # the ROLLBACK's thread may still be inside the connection's execute when the
        # write it let through has returned: closing the connection under it (the
        # fixture) crashed the interpreter once in CI
        release.join(30)
    assert store.peek(rec.id).status == "QUEUING"


def test_a_call_that_meets_a_short_lock_is_done_on_the_loop_once_the_lock_is_gone(store, locker):
    """``operations.soon``: the call met another program's commit; it is tried again
    after the loop's next turn, where the commit has ended, and stored once, without
    a hop to the pool."""
    import asyncio

    from xruntime.operations.soon import soon
    from xruntime.support.blocking import install

    rec = new_record()
    threads = []

    def create():
        threads.append(threading.current_thread())
        return store.create(rec, 100)

    async def call():
        loop = asyncio.get_running_loop()
        install(loop, 2)
        locker.execute("BEGIN IMMEDIATE")
        loop.call_soon(locker.execute, "ROLLBACK")  # (the other program's commit ends)
        return await soon(store, create)

    assert asyncio.run(call())
    assert store.peek(rec.id).status == "QUEUING"
    assert threads == [threading.main_thread()] * 2  # met the lock, then done: on the loop
