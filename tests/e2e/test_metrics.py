"""``/metrics`` of a real node with two HTTP processes, parsed with prometheus_client's
own parser: the counts match what was run and asked, whichever process answers."""

import threading
import time

import pytest
import requests

from tests.clients import RemoteFault, make_client
from tests.e2e.test_accounts import accounts_toml, creds
from tests.harness import Server

SCRAPES = 8  # new connections each: the kernel spreads them over both HTTP processes


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    srv = Server(str(tmp_path_factory.mktemp("metrics")), server_keys={"processes": 2}).start()
    yield srv
    srv.stop()


def scrape(srv, **kwargs):
    """{(sample name, frozenset of labels): value} of one scrape (``Server.scrape``)."""
    return srv.scrape(**kwargs)


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0)


def wait_for(srv, predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(srv)
        if predicate(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.1)


def test_counters_match_the_jobs_run_and_the_calls_made(node):
    clients = {b: make_client(b, node.base) for b in ("json", "soap", "jsonrpc")}
    started = [node.start_job(durationMs=50, steps=2) for _ in range(3)]
    failing = node.start_job(durationMs=50, steps=2, failAtStep=1)
    for binding in ("soap", "jsonrpc"):
        started.append(clients[binding].call("XDemo", "startSimulate", {"durationMs": 50}))
    for job in started + [failing]:
        assert node.wait_done(job["id"])["status"] in ("SUCCEEDED", "FAILED")
    for job in started:
        clients["json"].call("XDemo", "fetchSimulateResponse", {"id": job["id"]})
    with pytest.raises(RemoteFault) as failed:
        clients["json"].call("XDemo", "fetchSimulateResponse", {"id": failing["id"]})
    with pytest.raises(RemoteFault) as unknown:
        clients["jsonrpc"].call(
            "XRuntime", "stopJob", {"id": "0b7e4f5c-0000-4000-8000-000000000000"}
        )
    assert unknown.value.type == "UnknownJobFault"
    garbage = node.post("XDemo", "no-such-operation-42", {})
    assert garbage.status_code == 400
    # an HTTP process writes the requests it answered at the end of its event loop's turn:
    # the answer to the last call can reach us before its count is written (seen in CI)
    wait_for(
        node,
        lambda s: (
            value(s, "xruntime_requests_total", binding="json", operation="(unknown)") == 1
            and value(s, "xruntime_faults_total", binding="json", fault="InvalidRequestFault") == 1
        ),
    )

    runs = []
    for _ in range(SCRAPES):
        s = scrape(node)
        runs.append(s)
        assert value(s, "xruntime_job_run_seconds_count", service="XDemo", status="SUCCEEDED") == 5
        assert value(s, "xruntime_job_run_seconds_count", service="XDemo", status="FAILED") == 1
        assert value(s, "xruntime_job_queue_wait_seconds_count", service="XDemo") == 6
        assert value(s, "xruntime_jobs", service="XDemo", status="SUCCEEDED") == 5
        assert value(s, "xruntime_jobs", service="XDemo", status="FAILED") == 1
        assert value(s, "xruntime_queue_length", service="XDemo") == 0
        assert value(s, "xruntime_requests_total", binding="json", operation="startSimulate") == 4
        assert value(s, "xruntime_requests_total", binding="soap", operation="startSimulate") == 1
        assert (
            value(s, "xruntime_requests_total", binding="jsonrpc", operation="startSimulate") == 1
        )
        assert (
            value(s, "xruntime_requests_total", binding="json", operation="fetchSimulateResponse")
            == 6
        )
        assert (
            value(
                s,
                "xruntime_request_duration_seconds_count",
                binding="json",
                operation="fetchSimulateResponse",
            )
            == 6
        )
        assert value(s, "xruntime_requests_total", binding="json", operation="watchJob") >= 6
        assert value(s, "xruntime_faults_total", binding="json", fault=failed.value.type) == 1
        assert value(s, "xruntime_faults_total", binding="jsonrpc", fault="UnknownJobFault") == 1
        assert value(s, "xruntime_faults_total", binding="json", fault="InvalidRequestFault") == 1
        assert value(s, "xruntime_requests_total", binding="json", operation="(unknown)") == 1
        assert not any("no-such-operation" in str(labels) for _, labels in s), (
            "a client's made-up operation must not become a label"
        )
        assert value(s, "xruntime_workers", state="idle") == node.workers
    assert all(r == runs[0] for r in runs), "every HTTP process must answer the same totals"
    assert failed.value.type == "ProcessingFault"


def test_held_watches_and_busy_workers(node):
    job = node.start_job(durationMs=6000, steps=1)  # no progress until it ends
    node.wait_status(job["id"], "RUNNING")
    answers = []

    def hold():
        answers.append(node.watch(job["id"], progressUpdatePeriod=2500, maximumPollingPeriod=2500))

    threads = [threading.Thread(target=hold) for _ in range(5)]
    for t in threads:
        t.start()
    s = wait_for(node, lambda s: value(s, "xruntime_held_watches") == 5)
    assert value(s, "xruntime_held_watches") == 5, "five watches are held across both processes"
    assert value(s, "xruntime_workers", state="busy") == 1
    assert value(s, "xruntime_workers", state="idle") == node.workers - 1
    assert value(s, "xruntime_jobs", service="XDemo", status="RUNNING") == 1
    for t in threads:
        t.join(10)
    assert [a["status"] for a in answers] == ["RUNNING"] * 5
    s = wait_for(node, lambda s: value(s, "xruntime_held_watches") == 0)
    assert value(s, "xruntime_held_watches") == 0
    node.wait_done(job["id"])


def test_a_queue_shows_its_length(tmp_path):
    srv = Server(str(tmp_path / "node"), workers=1).start()
    try:
        blocker = srv.start_job(durationMs=3000)
        srv.wait_status(blocker["id"], "RUNNING")
        waiting = [srv.start_job(durationMs=10) for _ in range(3)]
        s = scrape(srv)
        assert value(s, "xruntime_queue_length", service="XDemo") == 3
        assert value(s, "xruntime_jobs", service="XDemo", status="QUEUING") == 3
        assert value(s, "xruntime_workers", state="busy") == 1
        assert value(s, "xruntime_workers", state="idle") == 0
        for job in waiting:
            srv.call("XRuntime", "deleteJob", {"id": job["id"]})
    finally:
        srv.stop()


def test_with_accounts_on_only_an_admin_scrapes(tmp_path):
    users = {"alice": {}, "root": {"admin": True}}
    srv = Server(str(tmp_path / "node"), extra=accounts_toml(users), auth=creds("root")).start()
    try:
        url = f"{srv.base}/metrics"
        anonymous = requests.get(url, timeout=10)
        assert anonymous.status_code == 401
        assert anonymous.headers["WWW-Authenticate"] == 'Basic realm="xruntime"'
        assert requests.get(url, auth=("root", "wrong"), timeout=10).status_code == 401
        assert requests.get(url, auth=creds("alice"), timeout=10).status_code == 403
        token = creds("root")[1]  # as Prometheus sends it
        s = scrape(srv, headers={"Authorization": f"Bearer {token}"})
        assert value(s, "xruntime_workers", state="idle") == srv.workers
    finally:
        srv.stop()
