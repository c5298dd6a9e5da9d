"""Retries, each job's history and listing (docs/protocol.md §11, §12) through real nodes over
real HTTP, with every binding's real client."""

import json
import os
import re
import threading
import time
import uuid

import pytest

from tests.clients import BINDINGS, RemoteFault, make_client, start, wait_done
from tests.fixtures.released_schema import released_database
from tests.waiting import until
from xruntime.payload.form import pack

RETRIES = """
    [jobs]
    retry_backoff = "400ms"
    retry_max_delay = "10s"
    """


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    from tests.harness import Server

    srv = Server(str(tmp_path_factory.mktemp("retries")), extra=RETRIES).start()
    yield srv
    srv.stop()


def events(srv, job_id):
    return srv.call("XRuntime", "getJobEvents", {"id": job_id})["events"]


def messages(srv, job_id):
    return [(e["status"], e["message"]) for e in events(srv, job_id)]


def retry_planned(srv, job_id):
    """Until the job's history tells of a retry planned."""
    until(
        lambda: any(m.startswith("retry") for _, m in messages(srv, job_id)),
        f"a retry of {job_id} planned",
    )


def seconds(event) -> float:
    t = event["time"]
    return (
        time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S"))
        - time.timezone
        + int(t[20:23]) / 1000
    )


# --------------------------------------------------------------------------- retries


def test_two_transient_failures_then_success_on_the_third_run(node):
    job = node.start_job(steps=2, durationMs=100, transientFailures=2)
    assert node.wait_done(job["id"])["status"] == "SUCCEEDED"
    assert node.call("XDemo", "fetchSimulateResponse", {"id": job["id"]})["stepsDone"] == 2
    found = events(node, job["id"])
    runs = [e for e in found if e["status"] == "RUNNING"]
    retries = [e for e in found if e["message"].startswith("retry ")]
    assert [e["attempt"] for e in runs] == [1, 2, 3]
    assert len(retries) == 2 and all(
        "TransientFault: transient failure" in e["message"] for e in retries
    )
    delays = [float(re.search(r"planned in ([\d.]+) s", e["message"]).group(1)) for e in retries]
    assert 0.35 <= delays[0] <= 0.45 and 0.7 <= delays[1] <= 0.9  # 400 ms, then doubled, ±10 %
    # and the runs really waited that long
    waited = [seconds(runs[i + 1]) - seconds(retries[i]) for i in range(2)]
    assert waited[0] >= delays[0] - 0.06 and waited[1] >= delays[1] - 0.06  # (the message rounds)
    assert [s for s, _ in messages(node, job["id"])][-2:] == [
        "SUCCEEDED",
        "SUCCEEDED",
    ]  # succeeded, fetched


def test_past_max_retries_the_job_fails_with_the_transient_fault(fresh_server):
    srv = fresh_server(extra=RETRIES + "max_retries = 1\n").start()
    job = srv.start_job(steps=1, transientFailures=2)
    assert srv.wait_done(job["id"])["status"] == "FAILED"
    r = srv.post("XDemo", "fetchSimulateResponse", {"id": job["id"]})
    assert r.status_code == 500 and r.json()["faultInfo"]["$type"] == "TransientFault"
    assert "transient failure 2 of 2" in r.json()["message"]
    found = messages(srv, job["id"])
    assert [m for _, m in found if m.startswith("retry")] == [found[2][1]]
    assert found[2][1].startswith("retry 1 of 1 planned in")
    assert found[-2] == ("FAILED", "failed: TransientFault")


def test_retry_later_waits_at_least_its_delay(node):
    began = time.monotonic()
    job = node.start_job(steps=1, retryLaterMs=1500)
    assert node.wait_done(job["id"])["status"] == "SUCCEEDED"
    assert time.monotonic() - began >= 1.5
    found = events(node, job["id"])
    planned = next(e for e in found if e["message"].startswith("retry"))
    assert "planned in 1.5 s: the request asked XDemo to run later" in planned["message"]
    second_run = [e for e in found if e["status"] == "RUNNING"][1]
    assert seconds(second_run) - seconds(planned) >= 1.49


def test_delete_during_the_retry_wait_erases_the_job(node):
    job = node.start_job(steps=1, retryLaterMs=60_000)
    retry_planned(node, job["id"])
    # QUEUING for the minute it waits: a short poll answers it (a default one would wait)
    assert node.watch(job["id"], maximumPollingPeriod=500)["status"] == "QUEUING"
    r = node.post("XRuntime", "stopJob", {"id": job["id"]})
    assert (
        r.status_code == 409 and r.json()["faultInfo"]["$type"] == "JobStateFault"
    )  # as any QUEUING job
    assert node.call("XRuntime", "deleteJob", {"id": job["id"]})["status"] == "DELETED"
    assert node.watch(job["id"])["status"] == "UNKNOWN"
    assert node.post("XRuntime", "getJobEvents", {"id": job["id"]}).status_code == 404


def test_a_retry_later_past_max_request_timeout_waits_that_long_only(fresh_server):
    """RetryLater is bounded as a request's timeouts are: a due time years away (or past
    what the database holds) is never stored."""
    srv = fresh_server(extra=RETRIES + 'max_request_timeout = "3s"\n').start()
    job = srv.start_job(steps=1, retryLaterMs=3_600_000)
    retry_planned(srv, job["id"])
    assert any(
        m.startswith("retry 1 of 3 planned in 3.0 s") for _, m in messages(srv, job["id"])
    ), messages(srv, job["id"])
    assert srv.wait_done(job["id"], timeout=30)["status"] == "SUCCEEDED"


def test_sigkill_during_the_retry_wait_loses_nothing(fresh_server):
    srv = fresh_server(extra=RETRIES).start()
    job = srv.start_job(steps=1, retryLaterMs=6000)
    retry_planned(srv, job["id"])
    planned_at = time.time()
    srv.kill()
    srv = fresh_server(port=srv.port, extra=RETRIES).start()
    assert srv.wait_done(job["id"])["status"] == "SUCCEEDED"
    assert time.time() - planned_at >= 5.9  # not run before its time
    assert [s for s, _ in messages(srv, job["id"])] == [
        "QUEUING",
        "RUNNING",
        "QUEUING",
        "RUNNING",
        "SUCCEEDED",
    ]


# --------------------------------------------------------------------------- history


def test_history_of_a_stop_a_computation_timeout_and_a_fetch(node):
    stopped = node.start_job(steps=200, durationMs=20_000)
    node.wait_status(stopped["id"], "RUNNING")
    until(  # a few steps done
        lambda: (
            node.watch(stopped["id"], progressUpdatePeriod=250)
            .get("progress", {})
            .get("successful", 0)
            >= 2
        ),
        "two of the job's steps done",
    )
    node.call("XRuntime", "stopJob", {"id": stopped["id"]})
    node.wait_done(stopped["id"])
    node.call("XDemo", "fetchSimulateResponse", {"id": stopped["id"]})
    assert [s for s, _ in messages(node, stopped["id"])] == [
        "QUEUING",
        "RUNNING",
        "STOPPING",
        "SUCCEEDED",
        "SUCCEEDED",
    ]
    assert [m for _, m in messages(node, stopped["id"])][2:] == [
        "stop asked",
        "succeeded",
        "fetched",
    ]
    timed = node.start_job(steps=100, durationMs=10_000, timeouts={"computationTimeout": 500})
    node.wait_done(timed["id"])
    assert [m for _, m in messages(node, timed["id"])][2:] == [
        "stop asked: computation timeout",
        "succeeded",
    ]
    failing = node.start_job(steps=2, failAtStep=1)
    node.wait_done(failing["id"])
    assert messages(node, failing["id"])[-1] == ("FAILED", "failed: ProcessingFault")


def test_history_of_a_node_death_and_the_run_after_it(fresh_server):
    srv = fresh_server().start()
    job = srv.start_job(steps=4, durationMs=2000)
    srv.wait_status(job["id"], "RUNNING")
    srv.kill()
    srv = fresh_server(port=srv.port).start()
    assert srv.wait_done(job["id"])["status"] == "SUCCEEDED"
    found = events(srv, job["id"])
    node_name = found[1]["node"]
    assert [(e["status"], e["attempt"], e["message"]) for e in found] == [
        ("QUEUING", 0, "queued"),
        ("RUNNING", 1, found[1]["message"]),
        ("QUEUING", 1, f"queued again: its node {node_name} died"),
        ("RUNNING", 2, found[3]["message"]),
        ("SUCCEEDED", 2, "succeeded"),
    ]
    assert found[1]["message"].startswith("running on worker ")


@pytest.mark.parametrize("binding", BINDINGS)
def test_events_and_listing_in_every_binding(node, binding):
    client = make_client(binding, node.base)
    job = start(client, steps=1, durationMs=50)
    wait_done(client, job["id"])
    answer = client.call("XRuntime", "getJobEvents", {"id": job["id"]})
    assert answer["id"] == job["id"]
    assert [e["status"] for e in answer["events"]] == ["QUEUING", "RUNNING", "SUCCEEDED"]
    assert all(
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["time"]) for e in answer["events"]
    )
    page = client.call(
        "XRuntime", "listJobs", {"status": ["SUCCEEDED"], "service": "XDemo", "limit": 5}
    )
    assert page["jobs"][0]["id"] == job["id"]  # newest first
    summary = page["jobs"][0]
    assert (
        summary["status"],
        summary.get("user") or "",
        summary["fetched"],
        summary["attempts"],
    ) == ("SUCCEEDED", "", False, 1)
    with pytest.raises(RemoteFault) as caught:
        client.call("XRuntime", "getJobEvents", {"id": str(uuid.uuid4())})
    assert caught.value.type == "UnknownJobFault"
    with pytest.raises(RemoteFault) as caught:
        client.call("XRuntime", "listJobs", {"limit": 1001})
    assert caught.value.type == "InvalidValueFault"


def test_listing_pages_while_jobs_are_added(node):
    before = [node.start_job(steps=1, durationMs=0)["id"] for _ in range(25)]
    stop, added = threading.Event(), []

    def add():
        import requests

        session = requests.Session()  # its own: the node's session is the test's
        while not stop.is_set():
            added.append(
                session.post(node.url("XDemo", "startSimulate"), json={"steps": 1}).json()["id"]
            )

    adder = threading.Thread(target=add)
    adder.start()
    try:
        seen, cursor = [], None
        while True:
            page = node.call(
                "XRuntime", "listJobs", {"limit": 7, **({"cursor": cursor} if cursor else {})}
            )
            seen += [j["id"] for j in page["jobs"]]
            cursor = page.get("nextCursor")
            if cursor is None:
                break
    finally:
        stop.set()
        adder.join()
    assert len(seen) == len(set(seen))
    assert [j for j in seen if j in set(before)] == before[::-1]
    assert added


# --------------------------------------------------------------------------- upgrade


def test_a_node_on_a_database_of_the_previous_release_keeps_its_jobs(fresh_server, tmp_path):
    """The schema as the last release made it (before accounts and history): its
    finished job is fetched with its result, its queued job runs."""
    srv = fresh_server()
    db = os.path.join(srv.folder, "data", "xruntime.db")
    os.makedirs(os.path.dirname(db))
    now = int(time.time() * 1000)
    result = json.dumps({"stepsDone": 7, "payload": "kept"})
    released_database(
        "sqlite:///" + db,
        [
            dict(
                id="11111111-1111-4111-8111-111111111111",
                status="SUCCEEDED",
                request=pack('{"steps":7}'),
                result=pack(result),
                queued_at=now - 5000,
                started_at=now - 4000,
                finished_at=now - 1000,
                attempts=1,
            ),
            dict(
                id="22222222-2222-4222-8222-222222222222",
                status="QUEUING",
                request=pack('{"steps":1}'),
                queued_at=now - 500,
            ),
        ],
    )
    srv.start()
    fetched = srv.call(
        "XDemo", "fetchSimulateResponse", {"id": "11111111-1111-4111-8111-111111111111"}
    )
    assert (fetched["stepsDone"], fetched["payload"]) == (7, "kept")
    assert srv.wait_done("22222222-2222-4222-8222-222222222222")["status"] == "SUCCEEDED"
    assert [s for s, _ in messages(srv, "22222222-2222-4222-8222-222222222222")] == [
        "RUNNING",
        "SUCCEEDED",
    ]
    assert messages(srv, "11111111-1111-4111-8111-111111111111") == [("SUCCEEDED", "fetched")]
    listed = srv.call("XRuntime", "listJobs", {})["jobs"]
    assert [j["id"][0] for j in listed] == ["2", "1"]


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_cursor_past_the_integer_range_is_a_client_fault(node, binding):
    """benchmarks/abuse.py, item 9: a cursor carrying a sequence past int64 answered 500 and
    logged a traceback each time; it is an InvalidValueFault naming ``cursor``."""
    import base64

    cursor = base64.urlsafe_b64encode(f"before:{2**64}".encode()).decode().rstrip("=")
    client = make_client(binding, node.base)
    with pytest.raises(RemoteFault) as refused:
        client.call("XRuntime", "listJobs", {"cursor": cursor})
    assert (
        refused.value.type == "InvalidValueFault" and refused.value.fields["parameter"] == "cursor"
    )
    assert "Traceback" not in node.log()
