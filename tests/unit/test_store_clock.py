"""The clock that decides between nodes is the database's (docs/protocol.md §15):
``DatabaseClock`` carries the last reading forward on the monotonic clock, so
a node's wrong or jumping wall clock does not move it."""

import time

import pytest

from xruntime.store import clock as store_clock
from xruntime.store.clock import DatabaseClock

TEN_MINUTES_MS = 600_000


def test_the_databases_time_whatever_this_hosts_clock_says():
    def database():  # the database: 10 min ahead
        return int(time.time() * 1000) + TEN_MINUTES_MS

    c = DatabaseClock(database, resample_s=3600)
    try:
        assert abs(c.now_ms() - database()) < 100
        assert abs(c.offset_ms - TEN_MINUTES_MS) < 100
    finally:
        c.close()


def test_a_jump_of_the_wall_clock_does_not_move_it(monkeypatch):
    c = DatabaseClock(lambda: 1_000_000, resample_s=3600)
    try:
        before = c.now_ms()
        monkeypatch.setattr(time, "time", lambda: 9e9)  # the host's clock jumps
        assert before <= c.now_ms() <= before + 1000
    finally:
        c.close()


def test_a_failed_or_slow_reading_keeps_the_last_one():
    readings = iter([5_000_000])

    def read():
        value = next(readings, None)
        if value is None:
            raise OSError("the database cannot be reached")
        return value

    c = DatabaseClock(read, resample_s=3600)
    try:
        assert not c.sample()  # failed: the first reading stands
        assert 5_000_000 <= c.now_ms() < 5_010_000

        def slow():
            time.sleep(0.6)
            return 1

        c._read_ms = slow
        assert not c.sample()  # over MAX_ROUND_TRIP_S: not used
        assert c.now_ms() >= 5_000_000
    finally:
        c.close()


def test_now_ms_is_the_clock_in_use():
    c = DatabaseClock(lambda: 42_000, resample_s=3600)
    try:
        store_clock.use(c)
        assert 42_000 <= store_clock.now_ms() < 52_000
    finally:
        store_clock.use(None)
        c.close()
    assert abs(store_clock.now_ms() - time.time() * 1000) < 1000


@pytest.mark.parametrize("dialect", ["postgresql"])
def test_a_postgresql_store_reads_its_clock(dialect):
    import os

    url = os.environ.get("XRUNTIME_TEST_DATABASE_URL")
    if not url:
        pytest.skip("XRUNTIME_TEST_DATABASE_URL is not set: no PostgreSQL to test against")
    from xruntime.store import JobStore

    store = JobStore(url)
    try:
        assert store.clock is not None and abs(store.clock.offset_ms) < 1000  # one host here
        assert abs(store_clock.now_ms() - store._database_ms()) < 200
    finally:
        store.close()
        store_clock.use(None)
