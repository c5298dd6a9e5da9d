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
