"""A node on PostgreSQL: the same life, and a job that survives a SIGKILL."""

import os
import uuid

import pytest
from sqlalchemy import create_engine

from tests.harness import Server

URL = os.environ.get("XRUNTIME_TEST_DATABASE_URL")
pytestmark = pytest.mark.skipif(not URL, reason="XRUNTIME_TEST_DATABASE_URL is not set")


@pytest.fixture
def pg_node(tmp_path):
    from xruntime.store.schema import metadata

    engine = create_engine(URL)
    metadata.drop_all(engine)
    engine.dispose()
    servers = []

    def make(port=None):
        srv = Server(str(tmp_path / "node"), port=port, database_url=URL)
        servers.append(srv)
        return srv.start()

    yield make
    for srv in servers:
        if srv.proc is not None:
            srv.kill()


def test_life_on_postgresql(pg_node):
    srv = pg_node()
    job = srv.start_job(durationMs=300, steps=3, resultSize=10)
    assert srv.wait_done(job["id"])["status"] == "SUCCEEDED"
    assert srv.call("XDemo", "fetchSimulateResponse", {"id": job["id"]})["stepsDone"] == 3
    running = srv.start_job(durationMs=5000, steps=5)
    srv.wait_status(running["id"], "RUNNING")
    assert srv.call("XRuntime", "stopJob", {"id": running["id"]})["status"] == "STOPPING"
    assert srv.wait_done(running["id"])["status"] in ("SUCCEEDED", "FAILED")
    assert srv.call("XRuntime", "deleteJob", {"id": str(uuid.uuid4())})["status"] == "UNKNOWN"


def test_sigkill_and_restart_on_postgresql(pg_node):
    srv = pg_node()
    job = srv.start_job(durationMs=1500, steps=3)
    srv.wait_status(job["id"], "RUNNING")
    srv.kill()
    srv = pg_node(port=srv.port)
    assert srv.wait_done(job["id"])["status"] == "SUCCEEDED"
    assert srv.call("XDemo", "fetchSimulateResponse", {"id": job["id"]})["stepsDone"] == 3


def test_two_nodes_wake_each_other(tmp_path):
    """A watch on one node answers within milliseconds of a change on the other; a stop
    or delete asked on one node reaches the worker on the other at once."""
    import time

    from xruntime.store.schema import metadata

    engine = create_engine(URL)
    metadata.drop_all(engine)
    engine.dispose()
    a = Server(str(tmp_path / "a"), database_url=URL, workers=1).start()
    b = Server(str(tmp_path / "b"), database_url=URL, workers=1).start()
    try:
        # a job queued on A, watched on B: B answers the moment it ends
        for _ in range(3):
            job = a.start_job(durationMs=600)
            t0 = time.monotonic()
            answer = b.watch(job["id"], progressUpdatePeriod=250, maximumPollingPeriod=20000)
            while answer["status"] not in ("SUCCEEDED", "FAILED"):
                answer = b.watch(job["id"], progressUpdatePeriod=250, maximumPollingPeriod=20000)
            took = time.monotonic() - t0
            assert answer["status"] == "SUCCEEDED"
            assert took - answer["elapsedTime"] / 1000 < 0.3, took
        # a long job, stopped and deleted through the node that does not run it
        jobs = [a.start_job(durationMs=20000, steps=20) for _ in range(2)]  # one per node
        for j in jobs:
            a.wait_status(j["id"], "RUNNING")
        for j in jobs:
            while "progress" not in b.watch(j["id"], progressUpdatePeriod=250):
                pass
        stopper, deleter = jobs
        t0 = time.monotonic()
        assert b.call("XRuntime", "stopJob", {"id": stopper["id"]})["status"] == "STOPPING"
        assert a.call("XRuntime", "stopJob", {"id": stopper["id"]})["status"] in (
            "STOPPING",
            "SUCCEEDED",
        )
        assert b.wait_done(stopper["id"])["status"] == "SUCCEEDED"
        assert time.monotonic() - t0 < 1.5, "the stop reached the other node's worker at once"
        assert b.call("XDemo", "fetchSimulateResponse", {"id": stopper["id"]})["resultLimitations"]
        t0 = time.monotonic()
        assert a.call("XRuntime", "deleteJob", {"id": deleter["id"]})["status"] == "DELETED"
        while b.watch(deleter["id"])["status"] != "UNKNOWN":
            assert time.monotonic() - t0 < 2.0, "the delete reached the other node's worker at once"
            time.sleep(0.02)
    finally:
        a.stop()
        b.stop()
