"""A node that stalls while running a job, loses it, and wakes up: what its run still
writes is refused, and its log says the job was lost, not deleted.

Two real nodes on one PostgreSQL database, one worker each. Node A runs a job; A's main
process is frozen (SIGSTOP: a VM paused, a long GC, a cut-off host), its lease is made
to have run out, node B takes the job over (attempt 2). A is let go on (SIGCONT) while
B still runs: A's worker had finished meanwhile, so A's outcome is written first —
and refused."""

import os
import signal

import pytest
from sqlalchemy import create_engine, text

from tests.e2e.test_status_page import wait_for
from tests.harness import Server

URL = os.environ.get("XRUNTIME_TEST_DATABASE_URL")
pytestmark = pytest.mark.skipif(not URL, reason="XRUNTIME_TEST_DATABASE_URL is not set")


def events(srv, job_id):
    return srv.call("XRuntime", "getJobEvents", {"id": job_id})["events"]


@pytest.fixture
def engine():
    from xruntime.store.schema import metadata

    engine = create_engine(URL)
    metadata.drop_all(engine)
    yield engine
    engine.dispose()


def test_a_stalled_node_cannot_finish_the_job_another_node_took_over(tmp_path, engine):
    a = Server(
        str(tmp_path / "a"), database_url=URL, workers=1, server_keys={"node_name": "node-a"}
    ).start()
    b = None
    try:
        job_id = a.start_job(durationMs=4000, steps=4)["id"]
        wait_for(
            lambda: [
                e for e in events(a, job_id) if e["status"] == "RUNNING" and e["node"] == "node-a"
            ],
            60,
            "node A running the job",
        )
        b = Server(
            str(tmp_path / "b"), database_url=URL, workers=1, server_keys={"node_name": "node-b"}
        )
        os.kill(a.proc.pid, signal.SIGSTOP)  # A's supervisor and its leases freeze
        try:
            with engine.begin() as conn:  # ... long enough for its lease to run out
                conn.execute(text("UPDATE jobs SET lease_until = 0 WHERE id = :id"), {"id": job_id})
            b.start()
            wait_for(
                lambda: [
                    e
                    for e in events(b, job_id)
                    if e["status"] == "RUNNING" and e["node"] == "node-b"
                ],
                60,
                "node B running the job",
            )
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        wait_for(
            lambda: "lost to another run" in a.log(), 60, "node A's log saying the job was lost"
        )
        done = b.wait_done(job_id, timeout=60)
        assert done["status"] == "SUCCEEDED"
        history = events(b, job_id)
        finishers = [e for e in history if e["status"] == "SUCCEEDED"]
        assert [(e["node"], e["attempt"]) for e in finishers] == [("node-b", 2)], history
        assert [e["attempt"] for e in history if e["status"] == "RUNNING"] == [1, 2], history
        assert b.call("XDemo", "fetchSimulateResponse", {"id": job_id})["stepsDone"] == 4
        log = a.log()
        assert "erased (deleted" not in log and "after it was deleted" not in log, log[-3000:]
        assert "node-b (attempt 2)" in log or "taken over by another run" in log, log[-3000:]
    finally:
        for srv in (a, b):
            if srv is not None and srv.proc is not None:
                srv.stop()
