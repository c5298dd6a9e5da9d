"""Queueing and computation timeouts (docs/protocol.md §3, §5), over JSON on real servers:
set in the file, shortened (never lengthened) by a request's own ``timeouts``, per
service, for the synchronous form too, and the abort of an operation that ignores
the stop."""

import time

import pytest

from tests.clients import BINDINGS, RemoteFault, make_client, wait_done
from tests.harness import Server

TERMINAL = ("SUCCEEDED", "FAILED", "DELETED", "UNKNOWN")
HOUSEKEEPING = 1.0  # s: queued jobs are checked for their timeout this often
STOP_GRACE = 5.0  # s a timed-out operation gets to return before its process is killed


@pytest.fixture(scope="module")
def queue_server(tmp_path_factory):
    """One worker; queued XDemo jobs time out after 1 s, XCrashy ones after 3 s."""
    srv = Server(
        str(tmp_path_factory.mktemp("queueing")),
        workers=1,
        extra="""
        [jobs]
        queueing_timeout = "1s"

        [log]
        level = "debug"             # (every job's RUNNING line: a job that ran says so)

        [services.XCrashy]
        queueing_timeout = "3s"
        """,
    ).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def compute_server(tmp_path_factory):
    """One worker; running jobs are stopped after 1 s."""
    srv = Server(
        str(tmp_path_factory.mktemp("computation")),
        workers=1,
        extra="""
        [jobs]
        computation_timeout = "1s"
        """,
    ).start()
    yield srv
    srv.stop()


# ---------------------------------------------------------------------------- helpers


def occupy(srv):
    """Keep the only worker busy with a long XDemo job; answers its id."""
    job = srv.start_job(durationMs=60000, steps=60)
    srv.wait_status(job["id"], "RUNNING")
    return job["id"]


def release(srv, job_id):
    assert srv.call("XRuntime", "deleteJob", {"id": job_id})["status"] in ("DELETED", "UNKNOWN")
    deadline = time.time() + 10
    while srv.watch(job_id)["status"] != "UNKNOWN":
        assert time.time() < deadline, "the blocking job was not erased"
        time.sleep(0.05)


def crashy(srv, **request):
    return srv.call("XCrashy", "startCrash", request)


def watch_to_the_end(srv, job_id, timeout=30):
    """Watch until terminal; answers every Job seen, the last one terminal."""
    seen, deadline = [], time.time() + timeout
    while not seen or seen[-1]["status"] not in TERMINAL:
        assert time.time() < deadline, f"job {job_id} did not finish: {seen[-1:]}"
        seen.append(srv.watch(job_id, progressUpdatePeriod=250, maximumPollingPeriod=1000))
    return seen


def assert_timed_out_fault(srv, job_id, service="XDemo"):
    fetch = "fetchSimulateResponse" if service == "XDemo" else "fetchCrashResponse"
    r = srv.post(service, fetch, {"id": job_id})
    assert r.status_code == 504, (r.status_code, r.text)
    body = r.json()
    assert body["faultInfo"]["$type"] == "RequestTimedOutFault", body
    assert body["message"] and body["faultInfo"]["hint"]
    return body


def assert_never_ran(srv, job_id, seen):
    assert all(j["status"] in ("QUEUING", "FAILED") for j in seen), seen
    assert all("progress" not in j for j in seen), seen
    assert f"job {job_id} " in srv.log()
    assert f"job {job_id} XDemo.simulate RUNNING" not in srv.log()
    assert f"job {job_id} XCrashy.crash RUNNING" not in srv.log()


# ---------------------------------------------------------------------------- queueing


def test_queueing_timeout_from_the_file_fails_a_waiting_job(queue_server):
    srv = queue_server
    blocker = occupy(srv)
    try:
        queued = srv.start_job(durationMs=0)
        # a request asking for more than the file allows does not get it
        longer = srv.start_job(durationMs=0, timeouts={"queueingTimeout": 60000})
        for job in (queued, longer):
            seen = watch_to_the_end(srv, job["id"])
            assert seen[-1]["status"] == "FAILED", seen[-1]
            assert_never_ran(srv, job["id"], seen)
            # it failed about 1 s after it was queued (elapsedTime is frozen at the end)
            elapsed = seen[-1]["elapsedTime"] / 1000
            assert 1.0 <= elapsed <= 1.0 + 1.5, elapsed
            body = assert_timed_out_fault(srv, job["id"])
            # a second fetch answers the same fault
            assert assert_timed_out_fault(srv, job["id"]) == body
        # the blocker was not touched by any of it
        assert srv.watch(blocker)["status"] == "RUNNING"
    finally:
        release(srv, blocker)
    # the worker is free again, and a job that does not wait long enough is run
    assert srv.wait_done(srv.start_job(durationMs=0)["id"])["status"] == "SUCCEEDED"


def test_request_shortens_the_queueing_timeout_never_lengthens_it(queue_server):
    """XCrashy's file setting is 3 s: a request asking 500 ms gets 500 ms, one asking
    60 s gets 3 s, one asking nothing gets 3 s (the service's, not [jobs]' 1 s)."""
    srv = queue_server
    blocker = occupy(srv)
    try:
        shorter = crashy(srv, mode="sleep", seconds=0, timeouts={"queueingTimeout": 500})
        longer = crashy(srv, mode="sleep", seconds=0, timeouts={"queueingTimeout": 60000})
        plain = crashy(srv, mode="sleep", seconds=0)
        ends = {}
        for name, job in (("shorter", shorter), ("longer", longer), ("plain", plain)):
            seen = watch_to_the_end(srv, job["id"])
            assert seen[-1]["status"] == "FAILED", (name, seen[-1])
            assert_never_ran(srv, job["id"], seen)
            assert_timed_out_fault(srv, job["id"], "XCrashy")
            ends[name] = seen[-1]["elapsedTime"] / 1000
        assert 0.5 <= ends["shorter"] <= 0.5 + 1.5, ends
        assert ends["shorter"] < 3.0, ends
        assert 3.0 <= ends["longer"] <= 3.0 + 1.5, ends
        assert 3.0 <= ends["plain"] <= 3.0 + 1.5, ends
    finally:
        release(srv, blocker)


def test_job_past_its_queueing_timeout_is_not_run_when_a_worker_frees(queue_server):
    """The worker frees 1.4 s after the job was queued, with a 700 ms timeout: whether
    the housekeeping or the claim finds it first, it fails and never runs."""
    srv = queue_server
    for _ in range(3):  # the housekeeping's phase differs each time
        blocker = srv.start_job(durationMs=1400)  # queued first: it runs first
        job = srv.start_job(durationMs=0, resultSize=1, timeouts={"queueingTimeout": 700})
        done = srv.wait_done(job["id"])
        assert done["status"] == "FAILED", done
        assert "progress" not in done
        assert f"job {job['id']} XDemo.simulate RUNNING" not in srv.log()
        assert_timed_out_fault(srv, job["id"])
        assert srv.wait_done(blocker["id"])["status"] == "SUCCEEDED"


# ---------------------------------------------------------------------------- computation


def fetch_simulate(srv, job_id):
    r = srv.post("XDemo", "fetchSimulateResponse", {"id": job_id})
    assert r.status_code == 200, (r.status_code, r.text)
    return r.json()


def assert_timed_out_limitation(result):
    limitations = result.get("resultLimitations")
    assert limitations and len(limitations) == 1, result
    assert limitations[0]["$type"] == "IntermediateResponseLimitation"
    assert limitations[0]["reason"] == "REQUEST_TIMED_OUT"
    assert limitations[0]["message"]


def test_computation_timeout_gives_an_intermediate_result(compute_server):
    srv = compute_server
    job = srv.start_job(durationMs=5000, steps=10, resultSize=4)
    seen = watch_to_the_end(srv, job["id"])
    done = seen[-1]
    assert done["status"] == "SUCCEEDED", done
    assert 1.0 <= done["elapsedTime"] / 1000 < 1.8, done
    result = fetch_simulate(srv, job["id"])
    assert 1 <= result["stepsDone"] <= 3, result
    assert len(result["payload"]) == 4
    assert_timed_out_limitation(result)
    assert done["progress"]["successful"] == result["stepsDone"]
    assert f"job {job['id']} STOPPING (computation timeout of 1000 ms)" in srv.log()


def test_computation_timeout_before_the_first_step_fails(compute_server):
    srv = compute_server
    job = srv.start_job(durationMs=5000, steps=1)
    done = watch_to_the_end(srv, job["id"])[-1]
    assert done["status"] == "FAILED", done
    assert 1.0 <= done["elapsedTime"] / 1000 < 1.8, done
    assert_timed_out_fault(srv, job["id"])


def test_request_shortens_the_computation_timeout_never_lengthens_it(compute_server):
    srv = compute_server
    # 50 steps of 100 ms: the steps done tell how long it ran
    shorter = srv.start_job(durationMs=5000, steps=50, timeouts={"computationTimeout": 400})
    done = watch_to_the_end(srv, shorter["id"])[-1]
    assert done["status"] == "SUCCEEDED" and done["elapsedTime"] < 900, done
    result = fetch_simulate(srv, shorter["id"])
    assert 2 <= result["stepsDone"] <= 5, result
    assert_timed_out_limitation(result)

    longer = srv.start_job(durationMs=5000, steps=50, timeouts={"computationTimeout": 60000})
    done = watch_to_the_end(srv, longer["id"])[-1]
    assert done["status"] == "SUCCEEDED" and 1000 <= done["elapsedTime"] < 1800, done
    result = fetch_simulate(srv, longer["id"])
    assert 7 <= result["stepsDone"] <= 12, result
    assert_timed_out_limitation(result)


def test_operation_ignoring_the_stop_is_aborted_after_the_grace_period(compute_server):
    srv = compute_server
    t0 = time.time()
    job = crashy(srv, mode="ignore_stop", seconds=30)
    seen = watch_to_the_end(srv, job["id"], timeout=20)
    took = time.time() - t0
    done = seen[-1]
    assert done["status"] == "FAILED", done
    assert "STOPPING" in [j["status"] for j in seen], "the timeout should have asked it to stop"
    assert 1.0 + STOP_GRACE - 0.3 <= done["elapsedTime"] / 1000 <= 1.0 + STOP_GRACE + 1.0, done
    assert took <= 1.0 + STOP_GRACE + 1.5, took
    body = assert_timed_out_fault(srv, job["id"], "XCrashy")
    assert "aborted" in body["message"], body
    # the worker is free again (its process was replaced)
    t1 = time.time()
    after = srv.start_job(durationMs=0)
    assert srv.wait_done(after["id"], timeout=15)["status"] == "SUCCEEDED"
    assert time.time() - t1 < 10
    assert fetch_simulate(srv, after["id"])["stepsDone"] == 1


def test_synchronous_simulate_is_bounded_by_the_computation_timeout(compute_server):
    srv = compute_server
    t0 = time.time()
    result = srv.call("XDemo", "simulate", {"durationMs": 5000, "steps": 10, "resultSize": 3})
    took = time.time() - t0
    assert 1.0 <= took < 2.0, took
    assert 1 <= result["stepsDone"] <= 3 and len(result["payload"]) == 3, result
    assert_timed_out_limitation(result)

    t0 = time.time()
    r = srv.post("XDemo", "simulate", {"durationMs": 5000, "steps": 1})
    took = time.time() - t0
    assert 1.0 <= took < 2.0, took
    assert r.status_code == 504, (r.status_code, r.text)
    assert r.json()["faultInfo"]["$type"] == "RequestTimedOutFault"

    # and the request's own, shorter, timeout
    t0 = time.time()
    r = srv.post(
        "XDemo",
        "simulate",
        {"durationMs": 5000, "steps": 1, "timeouts": {"computationTimeout": 300}},
    )
    assert r.status_code == 504 and time.time() - t0 < 0.9, (r.status_code, time.time() - t0)


# ---------------------------------------------------------------------------- bounds


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize(
    "field, value",
    [
        ("queueingTimeout", 2**63 - 1),
        ("computationTimeout", 2**63 - 1),
        ("computationTimeout", 604_800_001),
        ("queueingTimeout", -1),
    ],
)
def test_a_timeout_past_the_limit_is_refused(server, binding, field, value):
    """docs/protocol.md §15: a request's timeout past ``[jobs] max_request_timeout`` (7 days by
    default) or below 0 is an InvalidValueFault naming it, and nothing is stored.  (An
    unbounded one overflowed PostgreSQL's bigint in housekeeping every second, and
    killed the worker slot on SQLite.)"""
    client = make_client(binding, server.base)
    before = server.call("XRuntime", "listJobs", {"limit": 1000}).get("jobs", [])
    with pytest.raises(RemoteFault) as refused:
        client.call("XDemo", "startSimulate", {"timeouts": {field: value}, "steps": 1})
    assert refused.value.type == "InvalidValueFault", refused.value
    assert refused.value.fields["parameter"] == f"timeouts.{field}"
    assert refused.value.fields["value"] == str(value)
    assert server.call("XRuntime", "listJobs", {"limit": 1000}).get("jobs", []) == before


def test_the_longest_timeout_allowed_is_taken(server):
    job = server.start_job(
        timeouts={"queueingTimeout": 604_800_000, "computationTimeout": 604_800_000}, durationMs=0
    )
    assert wait_done(make_client("json", server.base), job["id"])["status"] == "SUCCEEDED"
