"""PostgreSQL's change feed (LISTEN/NOTIFY) losing its connection: the changes published
meanwhile never arrive, so the listener says ``MISSED`` when it loses its connection
and again when it has one back, and hears changes again after."""

import os
import threading
import time
import uuid

import pytest
from sqlalchemy import create_engine, text

from xruntime.store.changes import MISSED
from xruntime.store.channel import PostgresChannel

from .conftest import PG_ENV

pytestmark = pytest.mark.skipif(not os.environ.get(PG_ENV), reason=f"{PG_ENV} is not set")


class Heard:
    def __init__(self):
        self.ids: list[str] = []
        self.changed = threading.Condition()

    def job(self, job_id):
        with self.changed:
            self.ids.append(job_id)
            self.changed.notify_all()

    def until(self, condition, timeout=20.0):
        with self.changed:
            assert self.changed.wait_for(lambda: condition(self.ids), timeout), self.ids


def listening(engine, name):
    with engine.connect() as conn:
        return (
            conn.execute(
                text(
                    "SELECT pid FROM pg_stat_activity"
                    " WHERE application_name = :n AND query LIKE 'LISTEN%'"
                ),
                {"n": name},
            )
            .scalars()
            .all()
        )


def test_a_lost_listener_says_missed_twice_and_hears_again():
    url = os.environ[PG_ENV]
    origin = f"test-{uuid.uuid4().hex[:8]}"
    heard = Heard()
    listener = PostgresChannel(url, f"{origin}-b", heard.job, lambda: None)
    publisher = PostgresChannel(url, f"{origin}-a", lambda _: None, lambda: None)
    engine = create_engine(url)
    try:
        listener.start()
        name = listener.listener_name["application_name"]
        deadline = time.monotonic() + 20
        while not listening(engine, name):
            assert time.monotonic() < deadline, "the listener never listened"
            time.sleep(0.05)
        publisher.publish("before")
        heard.until(lambda ids: ids == ["before"])

        with engine.connect() as conn:  # the database drops the listener's connection
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = :n"
                ),
                {"n": name},
            )
        heard.until(lambda ids: ids.count(MISSED) == 2)  # lost, then back
        assert heard.ids == ["before", MISSED, MISSED]

        publisher.publish("after")
        heard.until(lambda ids: ids[-1:] == ["after"])
    finally:
        listener.close()
        publisher.close()
        engine.dispose()
