"""A job that reports progress without pause still obeys stop, delete
and SIGTERM at once, and its progress reaches the watchers.

XDemo with ``durationMs`` 0 reports after every step without pause; XCrashy's "flood"
writes progress messages straight into the pipe, past the worker's coalescing, and
ignores the stop, so that the slot's own checks are what ends it.
"""

import signal
import time

FLOOD = {"steps": 1_000_000, "durationMs": 0}  # about 10 s of reports without pause


def flood_running(srv):
    """Start a flooding XDemo job and answer its id once it has reported progress."""
    job = srv.start_job(**FLOOD)
    deadline = time.monotonic() + 30
    while "progress" not in srv.watch(job["id"], progressUpdatePeriod=250):
        assert time.monotonic() < deadline, "the flooding job reported no progress"
    return job["id"]


def wait_unknown(srv, job_id, timeout):
    deadline = time.monotonic() + timeout
    while srv.watch(job_id)["status"] != "UNKNOWN":
        assert time.monotonic() < deadline, f"job {job_id} was not erased within {timeout} s"
        time.sleep(0.05)


#: Every job's RUNNING line (with its attempt) is written at DEBUG.
DEBUG_LOG = '[log]\nlevel = "debug"\n'


def attempt_logged(srv, job_id) -> str:
    return srv.log().split(f"job {job_id} XDemo.simulate RUNNING")[-1].splitlines()[0]


def test_progress_of_a_flooding_job_reaches_the_watcher(server):
    job_id = flood_running(server)
    first = server.watch(job_id, progressUpdatePeriod=250)["progress"]["successful"]
    later = server.watch(job_id, progressUpdatePeriod=250)
    assert later["status"] == "RUNNING" and later["progress"]["successful"] > first
    server.call("XRuntime", "deleteJob", {"id": job_id})
    wait_unknown(server, job_id, 5)


def test_stop_of_a_flooding_job_takes_effect_at_once(server):
    job_id = flood_running(server)
    t0 = time.monotonic()
    assert server.call("XRuntime", "stopJob", {"id": job_id})["status"] in ("STOPPING", "SUCCEEDED")
    done = server.wait_done(job_id, timeout=10)
    assert time.monotonic() - t0 < 2.0
    assert done["status"] == "SUCCEEDED"
    result = server.call("XDemo", "fetchSimulateResponse", {"id": job_id})
    assert 1 <= result["stepsDone"] < FLOOD["steps"]
    assert result["resultLimitations"][0]["reason"] == "REQUEST_STOPPED"


def test_delete_of_a_flooding_job_takes_effect_at_once(server):
    job_id = flood_running(server)
    t0 = time.monotonic()
    assert server.call("XRuntime", "deleteJob", {"id": job_id})["status"] == "DELETED"
    wait_unknown(server, job_id, 10)
    assert time.monotonic() - t0 < 2.0


def test_delete_of_a_raw_flood_that_ignores_the_stop_kills_it(server):
    job = server.call("XCrashy", "startCrash", {"mode": "flood", "seconds": 60})
    server.wait_status(job["id"], "RUNNING")
    t0 = time.monotonic()
    server.call("XRuntime", "deleteJob", {"id": job["id"]})
    wait_unknown(server, job["id"], 10)
    assert time.monotonic() - t0 < 5.5  # the 3 s grace, then the kill
    assert f"job {job['id']}: worker" in server.log()


def test_sigterm_during_a_flood_hands_the_job_back_and_exits_quickly(fresh_server):
    srv = fresh_server(extra=DEBUG_LOG).start()
    job_id = flood_running(srv)
    raw = srv.call("XCrashy", "startCrash", {"mode": "flood", "seconds": 60})
    srv.wait_status(raw["id"], "RUNNING")
    t0 = time.monotonic()
    assert srv.stop(signal.SIGTERM) == 0
    assert time.monotonic() - t0 < 5
    for handed in (job_id, raw["id"]):
        assert f"job {handed} handed back to the queue" in srv.log()

    srv = fresh_server(port=srv.port, extra=DEBUG_LOG).start()
    srv.wait_status(job_id, "RUNNING")
    assert "(attempt 1)" in attempt_logged(srv, job_id)  # the hand-back was not an attempt
    srv.call("XRuntime", "deleteJob", {"id": raw["id"]})
    srv.call("XRuntime", "deleteJob", {"id": job_id})
    wait_unknown(srv, job_id, 10)
