"""The refusals of docs/protocol.md §5–§7 reach the client in every binding, typed and with their
fields: QueueOverflowFault, ServiceNotConfiguredFault { service }, RequestTimedOutFault
(computation and queueing timeouts), and the IntermediateResponseLimitation of a job the
computation timeout stopped after some steps.

One node serves the module: one worker, at most one queued job, XCrashy switched off.
"""

import os
import subprocess
import sys
import time

import pytest
import requests
import zeep

from tests.clients import BINDINGS, RemoteFault, make_client, start, wait_done, wait_status, watch
from tests.harness import ROOT, Server

CONFIG = """\
[jobs]
max_queued = 1

[services.XCrashy]
enabled = false
"""
JSON_STATUS = {
    "QueueOverflowFault": 503,
    "ServiceNotConfiguredFault": 503,
    "RequestTimedOutFault": 504,
}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    srv = Server(str(tmp_path_factory.mktemp("node")), workers=1, extra=CONFIG).start()
    yield srv
    srv.stop()


@pytest.fixture(params=BINDINGS)
def client(request, node):
    return make_client(request.param, node.base)


@pytest.fixture(scope="module")
def crashy_wsdl(node, tmp_path_factory):
    """XCrashy's WSDL, pointed at the node, with the schema documents it imports beside
    it.  The node does not serve it (the service is off), so ``xruntime wsdl`` writes it
    here, as for a client built before the administrator switched the service off."""
    folder = tmp_path_factory.mktemp("wsdl")
    env = {**os.environ, "PYTHONPATH": ROOT, "XRUNTIME_SERVICE_MODULES": "tests.fixtures.crashy"}
    done = subprocess.run(
        [sys.executable, "-m", "xruntime", "wsdl", "--out", str(folder), "--base-url", node.base],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return str(folder / "XCrashy.wsdl")


def fault_of(call, *args):
    with pytest.raises(RemoteFault) as caught:
        call(*args)
    return caught.value


def check_fault(client, fault, type_name):
    """The fault's type, message and hint, and its form in the binding (docs/protocol.md §7)."""
    assert fault.type == type_name, (fault.type, fault.message)
    assert fault.message and "Traceback" not in fault.message
    assert fault.fields.get("hint"), fault.fields
    if client.name == "json":
        assert fault.status == JSON_STATUS[type_name]
    elif client.name == "soap":
        assert fault.code.endswith("Client"), fault.code  # a RejectedRequestFault
    else:
        assert -32099 <= fault.code <= -32000, fault.code


def fetch(client, job_id):
    return client.call("XDemo", "fetchSimulateResponse", {"id": job_id})


def jobs_stored(node):
    info = node.call("XRuntime", "getRuntimeInformation", {})
    return {c["status"]: c["count"] for c in info["jobs"]}


def erase(client, *job_ids):
    """Delete jobs and wait until they are gone, so that the worker is free again."""
    for job_id in job_ids:
        client.call("XRuntime", "deleteJob", {"id": job_id})
    for job_id in job_ids:
        deadline = time.time() + 8
        while watch(client, job_id)["status"] != "UNKNOWN":
            assert time.time() < deadline, f"job {job_id} was not erased"
            time.sleep(0.05)


@pytest.fixture
def blocker(client):
    """A long job holding the node's one worker."""
    job_id = start(client, durationMs=60000, steps=60)["id"]
    wait_status(client, job_id, "RUNNING")
    yield job_id
    erase(client, job_id)


# --------------------------------------------------------------------------- QueueOverflowFault


def test_queue_overflow(node, client, blocker):
    queued = start(client, durationMs=0)
    assert queued["status"] == "QUEUING"
    before = jobs_stored(node)
    assert before["QUEUING"] == 1
    fault = fault_of(client.call, "XDemo", "startSimulate", {"durationMs": 0})
    check_fault(client, fault, "QueueOverflowFault")
    fault = fault_of(client.call, "XDemo", "simulate", {"durationMs": 0})  # the synchronous form
    check_fault(client, fault, "QueueOverflowFault")
    assert jobs_stored(node) == before, "a refused start stored a job"
    erase(client, queued["id"])
    again = start(client, durationMs=0)  # room again: accepted
    assert again["status"] == "QUEUING"
    erase(client, again["id"])


# ------------------------------------------------------------------------ ServiceNotConfiguredFault


@pytest.mark.parametrize(
    "operation, request_data",
    [
        ("startCrash", {"mode": "sleep", "seconds": 0}),
        ("crash", {"mode": "sleep", "seconds": 0}),
        ("fetchCrashResponse", {"id": "no-such-job"}),
    ],
)
def test_service_not_configured(node, client, crashy_wsdl, operation, request_data):
    if client.name == "soap":
        client.clients["XCrashy"] = zeep.Client(crashy_wsdl)
    before = jobs_stored(node)
    fault = fault_of(client.call, "XCrashy", operation, request_data)
    check_fault(client, fault, "ServiceNotConfiguredFault")
    assert fault.fields["service"] == "XCrashy"
    assert jobs_stored(node) == before


def test_switched_off_service_is_not_served(node):
    assert requests.get(f"{node.base}/services/ws/XCrashy?wsdl", timeout=10).status_code == 404
    assert requests.get(f"{node.base}/services/ws/XCrashy?WSDL", timeout=10).status_code == 404
    assert requests.get(f"{node.base}/services/ws/XDemo?wsdl", timeout=10).status_code == 200
    assert requests.get(f"{node.base}/services/ws/XRuntime?wsdl", timeout=10).status_code == 200
    services = [s["name"] for s in node.call("XRuntime", "getRuntimeInformation", {})["services"]]
    assert "XCrashy" not in services and "XDemo" in services


# --------------------------------------------------------------------------- RequestTimedOutFault


def test_computation_timeout_without_result(client):
    t0 = time.monotonic()
    job = start(client, durationMs=5000, steps=1, timeouts={"computationTimeout": 300})["id"]
    assert wait_done(client, job)["status"] == "FAILED"
    assert time.monotonic() - t0 < 3, "the computation timeout did not end the job in time"
    fault = fault_of(fetch, client, job)
    check_fault(client, fault, "RequestTimedOutFault")
    erase(client, job)


def test_computation_timeout_with_intermediate_result(client):
    t0 = time.monotonic()
    job = start(client, durationMs=5000, steps=10, timeouts={"computationTimeout": 1200})["id"]
    done = wait_done(client, job)
    assert done["status"] == "SUCCEEDED"
    assert time.monotonic() - t0 < 4
    result = fetch(client, job)
    assert 1 <= result["stepsDone"] < 10
    [limitation] = result["resultLimitations"]
    assert limitation["$type"] == "IntermediateResponseLimitation"
    assert limitation["reason"] == "REQUEST_TIMED_OUT" and limitation["message"]
    erase(client, job)


def test_synchronous_form_times_out(client):
    t0 = time.monotonic()
    fault = fault_of(
        client.call,
        "XDemo",
        "simulate",
        {"durationMs": 5000, "steps": 1, "timeouts": {"computationTimeout": 300}},
    )
    check_fault(client, fault, "RequestTimedOutFault")
    assert time.monotonic() - t0 < 3


def test_queueing_timeout(client, blocker):
    t0 = time.monotonic()
    job = start(client, durationMs=0, timeouts={"queueingTimeout": 300})["id"]
    assert wait_done(client, job, timeout=10)["status"] == "FAILED"
    assert time.monotonic() - t0 < 4, "the queueing timeout did not end the queued job in time"
    fault = fault_of(fetch, client, job)
    check_fault(client, fault, "RequestTimedOutFault")
    erase(client, job)
