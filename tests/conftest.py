"""The suite in parallel: pytest-xdist runs the test files on several workers (``-n``
in setup.cfg; ``XRUNTIME_TEST_WORKERS`` sets how many, 1 runs them in one process).

Most tests wait on real processes and real time (a job of a few seconds, a node's
start), not on the CPU, so a worker per core would leave the cores idle half the time:
the default is two per core.  What workers share is made theirs alone or taken in turn:

* PostgreSQL: each worker gets a database of its own beside the one
  ``XRUNTIME_TEST_DATABASE_URL`` names (``test_gw0``, ``test_gw1``…), created here and
  put in that variable before any test module reads it; the tests drop and create
  tables in it as they do in the one database of a serial run.
* ``@pytest.mark.exclusive``: a test that changes what every worker uses (it restarts
  PostgreSQL, builds network namespaces) or that measures this machine's speed runs
  while no other test runs.  Every other test holds a shared lock while it runs; an
  exclusive one waits for the running ones to end, and no new one starts meanwhile.
* The files run longest first (``LONGEST_FIRST``), so that no worker starts a long
  file when the others are nearly done; files with an exclusive test run last, when
  few tests are left to wait for.
"""

import fcntl
import os
import tempfile
from contextlib import contextmanager

import pytest

PG_ENV = "XRUNTIME_TEST_DATABASE_URL"
WORKERS_ENV = "XRUNTIME_TEST_WORKERS"


def pytest_xdist_auto_num_workers(config) -> int:
    if os.environ.get(WORKERS_ENV):
        return int(os.environ[WORKERS_ENV])
    return 2 * (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )


#: The files that take longest (seconds of test time summed over the file, measured
#: with --durations=0 on a 2-core machine), longest first; every other file follows
#: (end-to-end before unit), in the usual order.  Only the order depends on this list:
#: a file missing from it still runs.
LONGEST_FIRST = (
    "tests/e2e/test_all_bindings.py",  # 89 s
    "tests/e2e/test_serving.py",  # 83 s
    "tests/e2e/test_fuzz.py",  # 78 s
    "tests/e2e/test_generated_soap_clients.py",  # 74 s
    "tests/e2e/test_accounts.py",  # 63 s
    "tests/e2e/test_clock_skew.py",  # 44 s
    "tests/e2e/test_retention.py",  # 42 s
    "tests/e2e/test_child_jobs.py",  # 40 s
    "tests/e2e/test_retries_history.py",  # 40 s
    "tests/e2e/test_cli.py",  # 39 s
    "tests/e2e/test_status_stream.py",  # 38 s
    "tests/e2e/test_timeouts.py",  # 34 s
    "tests/e2e/test_config_reload.py",  # 32 s
    "tests/e2e/test_parsing_memory.py",  # 31 s
)


def pytest_collection_modifyitems(session, config, items) -> None:
    """Longest files first, files with an exclusive test last (see the docstring);
    the tests of a file keep their order."""
    exclusive = {item.path for item in items if item.get_closest_marker("exclusive")}
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def place(item) -> tuple[int, int]:
        name = item.path.relative_to(config.rootpath).as_posix()
        if item.path in exclusive:
            return (3, 0)
        if name in rank:
            return (0, rank[name])
        return (1, 0) if "/e2e/" in name else (2, 0)

    items.sort(key=place)  # (stable: the rest keep their order)


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "exclusive: runs while no other test of the run runs")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and os.environ.get(PG_ENV):
        os.environ[PG_ENV] = _database_of_worker(os.environ[PG_ENV], worker)


def _database_of_worker(url: str, worker: str) -> str:
    """The URL of ``url``'s database with ``_<worker>`` appended, created if missing."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    base = make_url(url)
    own = base.set(database=f"{base.database}_{worker}")
    engine = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            exists = conn.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": own.database}
            ).scalar()
            if not exists:
                conn.execute(text(f'CREATE DATABASE "{own.database}"'))
    finally:
        engine.dispose()
    return own.render_as_string(hide_password=False)


@contextmanager
def _locked(path: str, how: int):
    with open(path, "a") as f:
        fcntl.flock(f, how)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup, call and teardown of one test under the run's lock (under xdist only)."""
    run = getattr(item.config, "workerinput", {}).get("testrunuid")
    if run is None:
        yield
        return
    folder = os.path.join(tempfile.gettempdir(), f"xruntime-tests-{run}")
    os.makedirs(folder, exist_ok=True)
    turnstile, gate = os.path.join(folder, "turnstile"), os.path.join(folder, "gate")
    if item.get_closest_marker("exclusive"):
        with _locked(turnstile, fcntl.LOCK_EX), _locked(gate, fcntl.LOCK_EX):
            yield
    else:
        with _locked(turnstile, fcntl.LOCK_EX):  # passes unless an exclusive test waits
            pass
        with _locked(gate, fcntl.LOCK_SH):
            yield
