"""Shared fixtures of the unit tests: a real job store, a real JobManager, XDemo.

No HTTP, no subprocesses: the operation layer (``JobManager``) runs on a real
``JobStore`` (an SQLite file under ``tmp_path``; PostgreSQL too for the tests that
ask for ``any_store`` when ``XRUNTIME_TEST_DATABASE_URL`` is set) and a real in-process
``Notifier``.  Jobs are moved between states with the store's own guarded methods,
the way the supervisor does.
"""

import functools
import os

import pytest

from xruntime.engine.notifier import Notifier
from xruntime.settings.config import Settings
from xruntime.store import JobStore

from .helpers import BlockingJobs

PG_ENV = "XRUNTIME_TEST_DATABASE_URL"


def sqlite_url(tmp_path) -> str:
    return "sqlite:///" + str(tmp_path / "db")


@functools.cache
def own_postgres_database(url: str) -> str:
    """The URL of a database beside ``url``'s for the store fixtures alone
    (``<database>_unit``, created if missing).  An end-to-end test of the same worker
    starts nodes on ``url``'s database; a node that outlives its test by a moment would
    claim the queued jobs a store test waits to claim itself."""
    from tests.conftest import _database_of_worker

    return _database_of_worker(url, "unit")


def fresh_postgres_store(url: str) -> JobStore:
    """A store on an empty ``jobs`` table of the PostgreSQL database at ``url``."""
    from sqlalchemy import create_engine, text

    from xruntime.store.schema import metadata

    engine = create_engine(url)
    try:
        metadata.drop_all(engine)
        with engine.begin() as conn:  # (a test may have left another version there)
            conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
        metadata.create_all(engine)
    finally:
        engine.dispose()
    return JobStore(url)


@pytest.fixture
def store(tmp_path):
    """A real JobStore on an SQLite file of this test alone."""
    s = JobStore(sqlite_url(tmp_path))
    yield s
    s.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request, tmp_path):
    """The store on SQLite, and on PostgreSQL when XRUNTIME_TEST_DATABASE_URL is set."""
    if request.param == "sqlite":
        s = JobStore(sqlite_url(tmp_path))
    else:
        url = os.environ.get(PG_ENV)
        if not url:
            pytest.skip(f"{PG_ENV} is not set: no PostgreSQL to test against")
        s = fresh_postgres_store(own_postgres_database(url))
    yield s
    s.close()


@pytest.fixture
def notifier():
    n = Notifier()
    yield n
    n.close()


@pytest.fixture
def settings():
    """The settings in force (defaults); tests may replace ``holder[0]``."""
    return [Settings()]


@pytest.fixture
def jobs(store, notifier, settings):
    """The operation layer on the real store and notifier, without worker processes;
    its watches wait on an event loop of their own (``helpers.BlockingJobs``)."""
    manager = BlockingJobs(store, notifier, lambda: settings[0])
    yield manager
    manager.close()


@pytest.fixture(scope="session")
def simulate_op():
    """XDemo's long operation ``simulate``, as the registry finds it."""
    from xruntime.author.registry import discover

    return discover()["XDemo"].long_operations["simulate"]
