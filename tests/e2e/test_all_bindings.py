"""The XDemo life, the state table (docs/protocol.md §3) and the watch rules (§4), run over each
binding through real HTTP: JSON with requests, SOAP with zeep from the served WSDL,
JSON-RPC 2.0 with requests."""

import time
import uuid

import pytest
import zeep

from tests.clients import (
    BINDINGS,
    TERMINAL,
    RemoteFault,
    make_client,
    start,
    wait_done,
    wait_status,
    watch,
)


@pytest.fixture(params=BINDINGS)
def client(request, server):
    return make_client(request.param, server.base)


CRASHY_JOBS = set()  # jobs of the XCrashy test service, fetched with its own fetch


def fetch(client, job_id):
    if job_id in CRASHY_JOBS:
        return client.call("XCrashy", "fetchCrashResponse", {"id": job_id})
    return client.call("XDemo", "fetchSimulateResponse", {"id": job_id})


def start_ignoring_stop(client):
    """A job whose operation ignores a stop for 20 s (it stays STOPPING or DELETED)."""
    job = client.call("XCrashy", "startCrash", {"mode": "ignore_stop", "seconds": 20})["id"]
    CRASHY_JOBS.add(job)
    return job


def fault_of(call, *args):
    with pytest.raises(RemoteFault) as caught:
        call(*args)
    return caught.value


def in_state(client, state):
    """A job of XDemo in ``state`` (an unused id for UNKNOWN)."""
    if state == "UNKNOWN":
        return str(uuid.uuid4())
    if state == "QUEUING":
        blockers = [start(client, durationMs=4000)["id"] for _ in range(2)]
        for b in blockers:
            wait_status(client, b, "RUNNING")
        job = start(client, durationMs=0)["id"]
        client._blockers = blockers
        return job
    if state in ("RUNNING", "STOPPING"):
        job = (
            start_ignoring_stop(client)
            if state == "STOPPING"
            else start(client, durationMs=20000, steps=20)["id"]
        )
        wait_status(client, job, "RUNNING")
        if state == "STOPPING":
            assert client.call("XRuntime", "stopJob", {"id": job})["status"] == "STOPPING"
        return job
    if state == "SUCCEEDED":
        job = start(client, durationMs=0)["id"]
    elif state == "FAILED":
        job = start(client, failAtStep=1)["id"]
    else:  # DELETED: a running job, deleted; it stays DELETED while its operation winds down
        job = start_ignoring_stop(client)
        wait_status(client, job, "RUNNING")
        assert client.call("XRuntime", "deleteJob", {"id": job})["status"] == "DELETED"
        return job
    assert wait_done(client, job)["status"] == state
    return job


def cleanup(client, job):
    for j in [job] + getattr(client, "_blockers", []):
        client.call("XRuntime", "deleteJob", {"id": j})
    client._blockers = []


# --------------------------------------------------------------------------- the life


def test_life(client):
    job = start(client, durationMs=2000, steps=3, resultSize=12)
    assert job["status"] == "QUEUING" and job["elapsedTime"] == 0
    assert uuid.UUID(job["id"]).version == 4
    seen = []
    while job["status"] not in TERMINAL:
        job = watch(client, job["id"], progressUpdatePeriod=250)
        seen.append(job)
    assert job["status"] == "SUCCEEDED"
    assert job["progress"]["$type"] == "BulkProgress"
    assert (
        job["progress"]["successful"],
        job["progress"]["remaining"],
        job["progress"]["failed"],
    ) == (3, 0, 0)
    assert any(j["status"] == "RUNNING" for j in seen[:-1])
    result = fetch(client, job["id"])
    assert result["stepsDone"] == 3 and len(result["payload"]) == 12
    assert fetch(client, job["id"]) == result
    assert client.call("XRuntime", "deleteJob", {"id": job["id"]})["status"] == "DELETED"
    assert watch(client, job["id"])["status"] == "UNKNOWN"


def test_synchronous_form(client):
    result = client.call("XDemo", "simulate", {"durationMs": 200, "steps": 2, "resultSize": 3})
    assert result["stepsDone"] == 2 and len(result["payload"]) == 3


def test_stop_gives_intermediate_result(client):
    job = start(client, durationMs=5000, steps=10)["id"]
    progress = wait_status(client, job, "RUNNING")
    while progress.get("progress", {}).get("successful", 0) < 1:
        progress = watch(client, job, progressUpdatePeriod=250)
    assert client.call("XRuntime", "stopJob", {"id": job})["status"] == "STOPPING"
    assert wait_done(client, job)["status"] == "SUCCEEDED"
    result = fetch(client, job)
    assert 1 <= result["stepsDone"] < 10
    [limitation] = result["resultLimitations"]
    assert limitation["$type"] == "IntermediateResponseLimitation"
    assert limitation["reason"] == "REQUEST_STOPPED" and limitation["message"]


# --------------------------------------------------------------------------- the state table


@pytest.mark.parametrize("state", ["QUEUING", "RUNNING", "STOPPING", "DELETED"])
def test_fetch_refused_by_state(client, state):
    job = in_state(client, state)
    fault = fault_of(fetch, client, job)
    assert fault.type == "JobStateFault"
    assert fault.fields["jobId"] == job and fault.fields["status"] == state and fault.fields["hint"]
    cleanup(client, job)


def test_fetch_unknown(client):
    job = str(uuid.uuid4())
    fault = fault_of(fetch, client, job)
    assert fault.type == "UnknownJobFault" and fault.fields["jobId"] == job


def test_fetch_failed_raises_its_own_fault(client):
    job = in_state(client, "FAILED")
    fault = fault_of(fetch, client, job)
    assert fault.type == "ProcessingFault" and "step 1" in fault.message and fault.fields["hint"]


@pytest.mark.parametrize(
    "state, answer",
    [
        ("QUEUING", "JobStateFault"),
        ("RUNNING", "STOPPING"),
        ("STOPPING", "STOPPING"),
        ("SUCCEEDED", "SUCCEEDED"),
        ("FAILED", "FAILED"),
        ("DELETED", "JobStateFault"),
        ("UNKNOWN", "UnknownJobFault"),
    ],
)
def test_stop_in_each_state(client, state, answer):
    job = in_state(client, state)
    if answer.endswith("Fault"):
        fault = fault_of(client.call, "XRuntime", "stopJob", {"id": job})
        assert fault.type == answer and fault.fields["jobId"] == job
        if answer == "JobStateFault":
            assert fault.fields["status"] == state
    else:
        assert client.call("XRuntime", "stopJob", {"id": job})["status"] == answer
    if state != "UNKNOWN":
        cleanup(client, job)


@pytest.mark.parametrize(
    "state", ["QUEUING", "RUNNING", "STOPPING", "SUCCEEDED", "FAILED", "DELETED", "UNKNOWN"]
)
def test_delete_in_each_state(client, state):
    job = in_state(client, state)
    answer = client.call("XRuntime", "deleteJob", {"id": job})
    assert answer["status"] == ("UNKNOWN" if state == "UNKNOWN" else "DELETED")
    assert answer["id"] == job
    deadline = time.time() + 6  # a deleted job is erased once its worker let go
    while watch(client, job)["status"] != "UNKNOWN":
        assert time.time() < deadline
        time.sleep(0.05)
    cleanup(client, job) if state == "QUEUING" else None


# --------------------------------------------------------------------------- watch rules


def test_watch_answers_at_once_when_terminal_or_unknown(client):
    job = in_state(client, "SUCCEEDED")
    t0 = time.monotonic()
    assert watch(client, job, progressUpdatePeriod=5000)["status"] == "SUCCEEDED"
    assert watch(client, str(uuid.uuid4()), progressUpdatePeriod=5000)["status"] == "UNKNOWN"
    assert time.monotonic() - t0 < 2.0  # (at once: the period asked for is 5 s)


def test_watch_not_before_progress_update_period(client):
    job = start(client, durationMs=4000, steps=40)["id"]
    wait_status(client, job, "RUNNING")
    t0 = time.monotonic()
    answer = watch(client, job, progressUpdatePeriod=800)
    assert 0.8 <= time.monotonic() - t0 < 1.2
    assert answer["progress"]["successful"] >= 3
    client.call("XRuntime", "deleteJob", {"id": job})


def test_watch_at_the_latest_at_maximum_polling_period(client):
    job = start(client, durationMs=5000, steps=1)["id"]
    wait_status(client, job, "RUNNING")
    t0 = time.monotonic()
    assert (
        watch(client, job, progressUpdatePeriod=100, maximumPollingPeriod=400)["status"]
        == "RUNNING"
    )
    assert 0.4 <= time.monotonic() - t0 < 0.7  # 100 is clamped to 250; the maximum is 400
    client.call("XRuntime", "deleteJob", {"id": job})


def test_watch_answers_when_the_job_ends(client):
    job = start(client, durationMs=1500)["id"]
    wait_status(client, job, "RUNNING")
    t0 = time.monotonic()
    answer = watch(client, job, progressUpdatePeriod=250, maximumPollingPeriod=20000)
    # the end: SUCCEEDED, or the last step's progress, which XDemo reports just before it
    assert answer["status"] == "SUCCEEDED" or answer["progress"]["remaining"] == 0
    assert time.monotonic() - t0 < 1.8


def test_watch_period_must_be_an_integer(client):
    fault = fault_of(
        client.call, "XRuntime", "watchJob", {"id": "x", "progressUpdatePeriod": "soon"}
    )
    assert fault.type == "InvalidValueFault" and fault.fields["parameter"] == "progressUpdatePeriod"


def test_watch_without_id(client):
    # zeep refuses to leave out a required element unless told to skip it
    request = {"id": zeep.xsd.SkipValue} if client.name == "soap" else {}
    fault = fault_of(client.call, "XRuntime", "watchJob", request)
    assert fault.type == "MissingParameterFault" and fault.fields["parameter"] == "id"


# --------------------------------------------------------------------------- faults


def test_invalid_values_name_the_field(client):
    for request, parameter in (
        ({"steps": 0}, "steps"),
        ({"durationMs": -1}, "durationMs"),
        ({"failAtStep": 0}, "failAtStep"),
        ({"timeouts": {"computationTimeout": "x"}}, "timeouts.computationTimeout"),
    ):
        fault = fault_of(client.call, "XDemo", "startSimulate", request)
        assert fault.type == "InvalidValueFault", request
        assert fault.fields["parameter"] == parameter and fault.fields["hint"]


def test_invalid_value_is_the_value_as_sent(client):
    """A latitude (a double) of 95 is out of range: the fault's value is "95", as sent,
    in every binding (not "95.0", the number it was read as)."""
    fault = fault_of(
        client.call,
        "XDima",
        "startCreateDistanceMatrix",
        {"startLocations": [{"longitude": 0, "latitude": 95}]},
    )
    assert fault.type == "InvalidValueFault"
    assert (fault.fields["parameter"], fault.fields["value"]) == (
        "startLocations[0].latitude",
        "95",
    )


def test_invalid_fetch_type(client):
    job = client.call("XCrashy", "startCrash", {"mode": "sleep", "seconds": 0})["id"]
    wait_done(client, job)
    fault = fault_of(fetch, client, job)
    assert fault.type == "InvalidFetchTypeFault" and fault.fields["jobId"] == job


def test_request_stopped_and_internal_error_faults(client):
    job = start(client, durationMs=20000, steps=1)["id"]
    wait_status(client, job, "RUNNING")
    client.call("XRuntime", "stopJob", {"id": job})
    assert wait_done(client, job)["status"] == "FAILED"
    assert fault_of(fetch, client, job).type == "RequestStoppedFault"
    crash = client.call("XCrashy", "startCrash", {"mode": "raise"})["id"]
    wait_done(client, crash)
    fault = fault_of(client.call, "XCrashy", "fetchCrashResponse", {"id": crash})
    assert fault.type == "InternalErrorFault" and "Traceback" not in fault.message


def test_fault_codes_per_binding(client):
    fault = fault_of(fetch, client, str(uuid.uuid4()))
    if client.name == "json":
        assert fault.status == 404
    elif client.name == "soap":
        assert fault.code.endswith("Client")
    else:
        assert fault.code == -32602
    crash = client.call("XCrashy", "startCrash", {"mode": "raise"})["id"]
    wait_done(client, crash)
    fault = fault_of(client.call, "XCrashy", "fetchCrashResponse", {"id": crash})
    assert {"json": 500, "soap": None, "jsonrpc": None}[client.name] == fault.status
    if client.name == "soap":
        assert fault.code.endswith("Server")
    if client.name == "jsonrpc":
        assert -32099 <= fault.code <= -32000
