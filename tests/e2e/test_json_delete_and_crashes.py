"""deleteJob in every state, and what happens when service code misbehaves."""

import time

import pytest

from tests.harness import Server
from tests.waiting import until


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One real node for the module (SQLite, 2 workers), at DEBUG: every job's RUNNING
    line is written, so that a job that never ran can be told from one that did."""
    srv = Server(str(tmp_path_factory.mktemp("node")), extra='[log]\nlevel = "debug"\n')
    yield srv.start()
    srv.stop()


def crash(server, mode, seconds=None):
    body = {"mode": mode}
    if seconds is not None:
        body["seconds"] = seconds
    return server.call("XCrashy", "startCrash", body)


def wait_worker_free(server, timeout):
    """A fresh job starts running within ``timeout`` s: a worker is free."""
    job = server.start_job(durationMs=0)
    return server.wait_done(job["id"], timeout=timeout)["status"] == "SUCCEEDED"


def test_delete_queued_job_never_runs(server):
    blockers = [server.start_job(durationMs=5000) for _ in range(2)]
    for b in blockers:
        server.wait_status(b["id"], "RUNNING")
    queued = server.start_job(durationMs=0)
    assert (
        server.watch(queued["id"], progressUpdatePeriod=250, maximumPollingPeriod=250)["status"]
        == "QUEUING"
    )
    assert server.call("XRuntime", "deleteJob", {"id": queued["id"]})["status"] == "DELETED"
    assert server.watch(queued["id"])["status"] == "UNKNOWN"
    for b in blockers:
        server.call("XRuntime", "deleteJob", {"id": b["id"]})
    assert wait_worker_free(server, 10)
    assert server.watch(queued["id"])["status"] == "UNKNOWN"
    assert f"job {queued['id']} XDemo.simulate RUNNING" not in server.log()
    assert f"job {queued['id']} XDemo.simulate QUEUING" in server.log()  # (the lines are there)


def test_delete_running_job_aborts_it(server):
    job = server.start_job(durationMs=30000, steps=3)
    server.wait_status(job["id"], "RUNNING")
    answer = server.call("XRuntime", "deleteJob", {"id": job["id"]})
    assert answer["status"] == "DELETED"
    # once the worker let go, the record is erased
    assert server.wait_done(job["id"], timeout=5)["status"] in ("DELETED", "UNKNOWN")
    deadline = time.time() + 5
    while server.watch(job["id"])["status"] != "UNKNOWN":
        assert time.time() < deadline
        time.sleep(0.05)
    assert server.call("XRuntime", "deleteJob", {"id": job["id"]})["status"] == "UNKNOWN"


def test_delete_stopping_job(server):
    job = crash(server, "ignore_stop", 20)
    server.wait_status(job["id"], "RUNNING")
    assert server.call("XRuntime", "stopJob", {"id": job["id"]})["status"] == "STOPPING"
    assert server.call("XRuntime", "stopJob", {"id": job["id"]})["status"] == "STOPPING"
    assert server.call("XRuntime", "deleteJob", {"id": job["id"]})["status"] == "DELETED"
    r = server.post("XRuntime", "stopJob", {"id": job["id"]})
    if r.status_code == 409:  # still DELETED: stop refused with the state
        assert r.json()["faultInfo"]["status"] == "DELETED"
    t0 = time.monotonic()
    until(lambda: server.watch(job["id"])["status"] == "UNKNOWN", "the deleted job erased")
    assert time.monotonic() - t0 < 5.5, "a deleted job frees its worker within 5 s"


def test_delete_kills_an_operation_that_ignores_the_stop(server):
    job = crash(server, "ignore_stop", 60)
    server.wait_status(job["id"], "RUNNING")
    t0 = time.monotonic()
    server.call("XRuntime", "deleteJob", {"id": job["id"]})
    until(lambda: server.watch(job["id"])["status"] == "UNKNOWN", "the deleted job erased")
    assert time.monotonic() - t0 < 5.5
    assert "killed" in server.log()
    assert wait_worker_free(server, 30)


def test_delete_finished_jobs_erases_them(server):
    ok = server.start_job(durationMs=0)
    failed = server.start_job(failAtStep=1)
    for job, status in ((ok, "SUCCEEDED"), (failed, "FAILED")):
        assert server.wait_done(job["id"])["status"] == status
        assert server.call("XRuntime", "deleteJob", {"id": job["id"]})["status"] == "DELETED"
        assert server.watch(job["id"])["status"] == "UNKNOWN"
        r = server.post("XDemo", "fetchSimulateResponse", {"id": job["id"]})
        assert r.status_code == 404


def test_worker_that_exits_fails_its_job_and_is_replaced(server):
    for mode in ("exit", "segfault"):
        job = crash(server, mode)
        assert server.wait_done(job["id"])["status"] == "FAILED"
        r = server.post("XCrashy", "fetchCrashResponse", {"id": job["id"]})
        assert r.status_code == 500
        assert r.json()["faultInfo"]["$type"] == "InternalErrorFault"
        assert "died" in r.json()["message"]
    assert wait_worker_free(server, 30)
    info = server.call("XRuntime", "getRuntimeInformation", {})
    assert info["uptime"] > 0  # the server itself is still up


def test_service_exception_is_internal_error_without_traceback(server):
    job = crash(server, "raise")
    assert server.wait_done(job["id"])["status"] == "FAILED"
    r = server.post("XCrashy", "fetchCrashResponse", {"id": job["id"]})
    assert r.status_code == 500
    assert r.json()["faultInfo"]["$type"] == "InternalErrorFault"
    assert "ZeroDivisionError" in r.json()["message"]
    assert "Traceback" not in r.text and 'File "' not in r.text
    assert "Traceback" in server.log()  # the traceback goes to the server log


def test_fetch_with_another_services_fetch_is_invalid_fetch_type(server):
    job = crash(server, "sleep", 0)
    server.wait_done(job["id"])
    r = server.post("XDemo", "fetchSimulateResponse", {"id": job["id"]})
    assert r.status_code == 400
    assert r.json()["faultInfo"] == {
        "$type": "InvalidFetchTypeFault",
        "jobId": job["id"],
        "hint": r.json()["faultInfo"]["hint"],
    }
