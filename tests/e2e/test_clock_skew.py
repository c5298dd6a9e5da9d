"""Nodes whose clocks are wrong by minutes (docs/protocol.md §15): times that
decide between nodes come from the database's clock.

Three real nodes on one PostgreSQL database: one with this host's clock, one 10 minutes
ahead and one 10 minutes behind (Debian's libfaketime, preloaded into the node and its
worker processes). Measured before: a node 45 s ahead re-queued every job of a live
node within 5 s, three times each, and all of them failed."""

import os
import time

import pytest
from sqlalchemy import create_engine

from tests.harness import ROOT, Server

URL = os.environ.get("XRUNTIME_TEST_DATABASE_URL")
FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
#: Keeps time.sleep working under Debian's libfaketime (see its docstring): without it
#: every time.sleep of a skewed node raised EINVAL, its housekeeping thread died at once
#: (no lease renewal, recovery or timeouts there), and this test passed all the same.
FAKETIME_SHIM = os.path.join(ROOT, "tests", "faketime_shim")
JOBS = 50
FETCHED_RETENTION_S = 20

pytestmark = pytest.mark.skipif(not URL, reason="XRUNTIME_TEST_DATABASE_URL is not set")


def skewed(offset: str) -> dict:
    """The environment of a node whose wall clock is ``offset`` off (e.g. "+10m")."""
    return {
        "LD_PRELOAD": FAKETIME,
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_DONT_RESET": "1",
        "PYTHONPATH": f"{FAKETIME_SHIM}:{ROOT}",
    }


@pytest.fixture
def nodes(tmp_path):
    if not os.path.exists(FAKETIME):
        why = f"no libfaketime at {FAKETIME} (apt-get install faketime)"
        if os.environ.get("XRUNTIME_TEST_REQUIRE_FAKETIME") == "1":
            pytest.fail(why + "; XRUNTIME_TEST_REQUIRE_FAKETIME=1 requires it")
        pytest.skip(why)
    from xruntime.store.schema import metadata

    engine = create_engine(URL)
    metadata.drop_all(engine)
    engine.dispose()
    extra = f"""
        [jobs]
        queueing_timeout = "2m"
        fetched_retention = "{FETCHED_RETENTION_S}s"
        cleanup_interval = "1s"
        """
    started = []
    try:
        for name, offset in (("on-time", None), ("ahead", "+10m"), ("behind", "-10m")):
            srv = Server(
                str(tmp_path / name),
                database_url=URL,
                extra=extra,
                server_keys={"node_name": name},
                env=skewed(offset) if offset else None,
            )
            started.append(srv.start())
        yield started
    finally:
        for srv in started:
            srv.stop()


def test_skewed_nodes_requeue_nothing_and_time_nothing_out_early(nodes):
    ahead = nodes[1]
    assert b"FAKETIME=+10m" in open(f"/proc/{ahead.proc.pid}/environ", "rb").read()
    ids = [nodes[i % 3].start_job(durationMs=1500, steps=3)["id"] for i in range(JOBS)]
    for job_id in ids:
        done = nodes[0].wait_done(job_id, timeout=180)
        assert done["status"] == "SUCCEEDED", done
    runs = {}
    for job_id in ids:
        events = nodes[0].call("XRuntime", "getJobEvents", {"id": job_id})["events"]
        runs[job_id] = [e for e in events if e["status"] == "RUNNING"]
        assert not [
            e for e in events if "queued again" in e["message"] or "died" in e["message"]
        ], events
    assert all(len(r) == 1 for r in runs.values()), "a job ran more than once"
    assert {r[0]["node"] for r in runs.values()} == {"on-time", "ahead", "behind"}, (
        "every node ran jobs (else the test proves nothing)"
    )
    for srv in nodes:
        log = srv.log()
        assert "lost to another run" not in log
        assert "Traceback" not in log and "Exception in thread" not in log, log[-3000:]

    # retention: a fetched job is erased FETCHED_RETENTION_S after its fetch, not before
    fetched_at = time.monotonic()
    for i, job_id in enumerate(ids):
        assert nodes[i % 3].call("XDemo", "fetchSimulateResponse", {"id": job_id})["stepsDone"] == 3
    while nodes[0].call("XRuntime", "watchJob", {"id": ids[0]})["status"] != "UNKNOWN":
        assert time.monotonic() - fetched_at < FETCHED_RETENTION_S + 30, "never erased"
        time.sleep(0.2)
    erased_after = time.monotonic() - fetched_at
    assert erased_after >= FETCHED_RETENTION_S - 2, f"erased {erased_after:.1f} s after its fetch"
