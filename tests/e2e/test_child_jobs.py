"""Child jobs (docs/protocol.md §13) through real nodes over real HTTP: XSweep
(xruntime/examples/sweep.py) fans out XDemo simulations as child jobs."""

import os
import re
import time

import pytest

from tests.harness import Server

MODULES = {"XRUNTIME_SERVICE_MODULES": "tests.fixtures.crashy,xruntime_services.xsweep"}
PG_URL = os.environ.get("XRUNTIME_TEST_DATABASE_URL")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    srv = Server(
        str(tmp_path_factory.mktemp("children")),
        env=MODULES,
        workers=2,
        extra='[log]\nlevel = "debug"\n',  # (every job's end, a success too, is logged)
    ).start()
    yield srv
    srv.stop()


def sweep(srv, **request):
    return srv.call("XSweep", "startSweep", request)["id"]


def children(srv, parent_id):
    return srv.call("XRuntime", "listJobs", {"parentId": parent_id, "limit": 1000}).get("jobs", [])


def events(srv, job_id):
    return srv.call("XRuntime", "getJobEvents", {"id": job_id})


def wait_children(srv, parent_id, successful, timeout=20):
    """Wait until at least ``successful`` children of the parent SUCCEEDED; answers them all."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = children(srv, parent_id)
        if sum(c["status"] == "SUCCEEDED" for c in found) >= successful:
            return found
        time.sleep(0.05)
    raise AssertionError(f"fewer than {successful} children of {parent_id} succeeded")


def fault_type(srv, service, operation, job_id):
    r = srv.post(service, operation, {"id": job_id})
    assert r.status_code != 200, r.text
    return r.json()["faultInfo"]["$type"]


# --------------------------------------------------------------------------- fan-out


def test_two_workers_finish_a_parent_of_100_children(node):
    began = time.monotonic()
    parent = sweep(node, scenarios=100, durationMs=20)
    seen, job = [], None
    while time.monotonic() - began < 60:
        job = node.watch(parent, progressUpdatePeriod=100, maximumPollingPeriod=2000)
        progress = job.get("progress")
        if progress and progress.get("$type") == "BulkProgress":
            assert (
                progress["successful"] + progress["failed"] + progress["remaining"] == 100
                or job["status"] != "RUNNING"
            ), progress
            if not seen or progress["successful"] != seen[-1]:
                seen.append(progress["successful"])
        if job["status"] not in ("QUEUING", "RUNNING"):
            break
    assert job["status"] == "SUCCEEDED", job
    assert seen == sorted(seen) and len(set(seen)) >= 2, seen
    assert node.call("XSweep", "fetchSweepResponse", {"id": parent}) == {
        "scenariosRun": 100,
        "stepsDone": 100,
        "failedScenarios": 0,
    }
    assert len(children(node, parent)) == 100


def test_a_parent_of_parents(node):
    parent = sweep(node, scenarios=4, durationMs=10, depth=2)
    assert node.wait_done(parent, timeout=60)["status"] == "SUCCEEDED"
    assert node.call("XSweep", "fetchSweepResponse", {"id": parent}) == {
        "scenariosRun": 16,
        "stepsDone": 16,
        "failedScenarios": 0,
    }
    middle = children(node, parent)
    assert len(middle) == 4
    assert all(
        c["parentId"] == parent and c["service"] == "XSweep" and c["status"] == "SUCCEEDED"
        for c in middle
    )
    leaves = children(node, middle[0]["id"])
    assert len(leaves) == 4 and all(
        c["parentId"] == middle[0]["id"] and c["service"] == "XDemo" for c in leaves
    )
    assert events(node, leaves[0]["id"])["parentId"] == middle[0]["id"]
    assert events(node, middle[0]["id"])["parentId"] == parent
    top = events(node, parent)
    assert "parentId" not in top or top["parentId"] is None
    messages = [e["message"] for e in top["events"]]
    assert "waiting for 4 child jobs" in messages
    assert any(re.fullmatch(r"resumed on worker \d+: its child jobs are done", m) for m in messages)
    # a parent is not listed as a child of anyone
    assert parent not in [c["id"] for c in children(node, middle[0]["id"])]


def test_a_child_can_be_watched_but_not_stopped_or_deleted(node):
    parent = sweep(node, scenarios=3, durationMs=600, steps=3)
    found = wait_children(node, parent, 0)
    while not found:
        found = children(node, parent)
    child = found[0]["id"]
    assert node.watch(child)["status"] in ("QUEUING", "RUNNING", "SUCCEEDED")
    for operation in ("stopJob", "deleteJob"):
        r = node.post("XRuntime", operation, {"id": child})
        assert r.status_code == 409, (operation, r.text)
        body = r.json()
        assert body["faultInfo"]["$type"] == "JobStateFault" and parent in body["faultInfo"]["hint"]
    assert node.wait_done(child)["status"] == "SUCCEEDED"
    assert node.call("XDemo", "fetchSimulateResponse", {"id": child})["stepsDone"] == 3
    assert node.wait_done(parent)["status"] == "SUCCEEDED"
    for operation in ("stopJob", "deleteJob"):  # finished: still refused
        r = node.post("XRuntime", operation, {"id": child})
        assert r.status_code == 409 and r.json()["faultInfo"]["$type"] == "JobStateFault"
    assert node.call("XRuntime", "deleteJob", {"id": parent})["status"] == "DELETED"


def test_stop_the_parent_midway(node):
    parent = sweep(node, scenarios=40, durationMs=300, steps=6)
    wait_children(node, parent, 2)
    stopped_at = time.monotonic()
    assert node.call("XRuntime", "stopJob", {"id": parent})["status"] == "STOPPING"
    assert node.wait_done(parent, timeout=10)["status"] == "SUCCEEDED"
    assert time.monotonic() - stopped_at < 3
    result = node.call("XSweep", "fetchSweepResponse", {"id": parent})
    assert 2 <= result["scenariosRun"] < 40, result
    assert any(
        limit["$type"] == "IntermediateResponseLimitation" for limit in result["resultLimitations"]
    )
    assert result["scenariosRun"] + result["failedScenarios"] == 40
    found = children(node, parent)
    assert len(found) == 40 and all(c["status"] in ("SUCCEEDED", "FAILED") for c in found)
    never_started = [c for c in found if "startedAt" not in c]
    assert len(never_started) >= 30
    for c in never_started:
        assert c["status"] == "FAILED"
        assert fault_type(node, "XDemo", "fetchSimulateResponse", c["id"]) == "RequestStoppedFault"
    assert sum(c["status"] == "SUCCEEDED" for c in found) == result["scenariosRun"]
    for c in found:
        if "startedAt" in c and c["status"] == "FAILED":
            assert (
                fault_type(node, "XDemo", "fetchSimulateResponse", c["id"]) == "RequestStoppedFault"
            )
    # the children running at the stop were stopped, not run to the end
    stopped = [
        m
        for c in found
        for m in (e["message"] for e in events(node, c["id"])["events"])
        if m == "stop asked: its parent was stopped"
    ]
    assert 1 <= len(stopped) <= 2


def test_delete_the_parent_midway(node):
    parent = sweep(node, scenarios=40, durationMs=300, steps=6)
    found = wait_children(node, parent, 2)
    assert node.call("XRuntime", "deleteJob", {"id": parent})["status"] == "DELETED"
    deleted_at = len(node.log())
    assert children(node, parent) == []
    assert node.watch(parent)["status"] == "UNKNOWN"
    for c in found:
        assert node.watch(c["id"])["status"] == "UNKNOWN"
        assert node.post("XRuntime", "getJobEvents", {"id": c["id"]}).status_code == 404
    # both workers are free at once: two jobs started now run side by side
    began = time.monotonic()
    jobs = [node.start_job(durationMs=5000, steps=5)["id"] for _ in range(2)]
    for job in jobs:
        while (
            node.watch(job, progressUpdatePeriod=100, maximumPollingPeriod=100)["status"]
            != "RUNNING"
        ):
            assert time.monotonic() - began < 2, "a worker still runs a child of the deleted parent"
    for job in jobs:
        assert node.call("XRuntime", "deleteJob", {"id": job})["status"] == "DELETED"
    time.sleep(0.5)  # (a child of 300 ms left running would have logged its end by now)
    after = node.log()[deleted_at:]
    assert not any(f"job {c['id']} XDemo.simulate SUCCEEDED" in after for c in found)


def test_a_failing_child_fails_the_parent_unless_tolerated(node):
    parent = sweep(node, scenarios=5, durationMs=50, failScenario=3)
    assert node.wait_done(parent)["status"] == "FAILED"
    r = node.post("XSweep", "fetchSweepResponse", {"id": parent})
    assert r.status_code == 500
    assert r.json()["faultInfo"]["$type"] == "ProcessingFault"
    assert "failed at step 1" in r.json()["message"]
    tolerant = sweep(node, scenarios=5, durationMs=50, failScenario=3, tolerateFailures=True)
    assert node.wait_done(tolerant)["status"] == "SUCCEEDED"
    assert node.call("XSweep", "fetchSweepResponse", {"id": tolerant}) == {
        "scenariosRun": 4,
        "stepsDone": 4,
        "failedScenarios": 1,
    }


def test_a_soap_client_sees_parent_id(node):
    from tests.clients import make_client

    parent = sweep(node, scenarios=2, durationMs=10)
    assert node.wait_done(parent)["status"] == "SUCCEEDED"
    client = make_client("soap", node.base)
    page = client.call("XRuntime", "listJobs", {"parentId": parent})
    jobs = page["jobs"] if isinstance(page, dict) else page.jobs
    ids = {(j["parentId"] if isinstance(j, dict) else j.parentId) for j in jobs}
    assert len(jobs) == 2 and ids == {parent}


# --------------------------------------------------------------------------- crash safety


def test_sigkill_while_children_run(tmp_path):
    srv = Server(str(tmp_path / "node"), env=MODULES, workers=2).start()
    try:
        parent = sweep(srv, scenarios=20, durationMs=400, steps=2)
        done_before = [c["id"] for c in wait_children(srv, parent, 4) if c["status"] == "SUCCEEDED"]
        srv.kill()
        srv = Server(str(tmp_path / "node"), port=srv.port, env=MODULES, workers=2).start()
        assert srv.wait_done(parent, timeout=60)["status"] == "SUCCEEDED"
        assert srv.call("XSweep", "fetchSweepResponse", {"id": parent})["scenariosRun"] == 20
        by_id = {c["id"]: c for c in children(srv, parent)}
        assert len(by_id) == 20 and all(c["status"] == "SUCCEEDED" for c in by_id.values())
        for child in done_before:
            runs = [
                e
                for e in events(srv, child)["events"]
                if e["message"].startswith("running on worker")
            ]
            assert len(runs) == 1, events(srv, child)
            assert by_id[child]["attempts"] == 1
    finally:
        if srv.proc is not None:
            srv.kill()


@pytest.mark.skipif(not PG_URL, reason="XRUNTIME_TEST_DATABASE_URL is not set")
def test_children_run_on_both_nodes_of_postgresql(tmp_path):
    from sqlalchemy import create_engine

    from xruntime.store.schema import metadata

    engine = create_engine(PG_URL)
    metadata.drop_all(engine)
    engine.dispose()
    a = Server(str(tmp_path / "a"), database_url=PG_URL, env=MODULES, workers=1).start()
    b = Server(str(tmp_path / "b"), database_url=PG_URL, env=MODULES, workers=1).start()
    try:
        parent = sweep(a, scenarios=12, durationMs=200)
        assert b.wait_done(parent, timeout=60)["status"] == "SUCCEEDED"
        assert a.call("XSweep", "fetchSweepResponse", {"id": parent})["scenariosRun"] == 12
        nodes = {
            e["node"]
            for c in children(b, parent)
            for e in events(a, c["id"])["events"]
            if e["message"].startswith("running on worker")
        }
        assert len(nodes) == 2, nodes
    finally:
        for srv in (a, b):
            srv.kill()


def test_a_waiting_parent_past_its_computation_timeout_stops_with_its_tree(node):
    """The timeout counts while the parent waits (no worker holds it to notice): its
    tree is stopped then, not after every child ran, and it answers what it has."""
    began = time.monotonic()
    parent = sweep(node, scenarios=40, durationMs=300, timeouts={"computationTimeout": 1000})
    assert node.wait_done(parent)["status"] == "SUCCEEDED"
    assert time.monotonic() - began < 5  # 40 × 300 ms on 2 workers: 6 s
    result = node.call("XSweep", "fetchSweepResponse", {"id": parent})
    assert [x["reason"] for x in result["resultLimitations"]] == ["REQUEST_TIMED_OUT"]
    assert 1 <= result["scenariosRun"] < 40
    assert result["scenariosRun"] + result["failedScenarios"] == 40
    assert any(
        e["message"] == "stop asked: computation timeout" for e in events(node, parent)["events"]
    )


# --------------------------------------------------------------------------- limits


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """At most 20 jobs queued on the node; alice may have 5 XDemo jobs queued."""
    import secrets

    from xruntime.operations.accounts import token_sha256

    token = secrets.token_urlsafe(24)
    srv = Server(
        str(tmp_path_factory.mktemp("limited")),
        env=MODULES,
        workers=1,
        extra=f"""
        [jobs]
        max_queued = 20
        [auth]
        required = true
        [users.alice]
        token_sha256 = "{token_sha256(token)}"
        [users.alice.services.XDemo]
        max_queued = 5
        [users.root]
        token_sha256 = "{token_sha256(token[::-1])}"
        admin = true
        """,
        auth=("root", token[::-1]),
    ).start()
    srv.alice = ("alice", token)
    yield srv
    srv.stop()


def queued_total(srv):
    return {
        c["status"]: c["count"]
        for c in srv.call("XRuntime", "getRuntimeInformation", {"withJobCounts": True})["jobs"]
    }.get("QUEUING", 0)


def test_children_count_against_the_queue_limit(limited):
    """docs/protocol.md §15, as measured by benchmarks/abuse.py (item 5): children were
    inserted past max_queued (829 queued with max_queued 20). A parent whose children
    would overflow the queue fails with QueueOverflowFault and queues none of them."""
    parent = sweep(limited, scenarios=25, durationMs=20)
    job = limited.wait_status(parent, "FAILED")
    assert job["status"] == "FAILED"
    assert fault_type(limited, "XSweep", "fetchSweepResponse", parent) == "QueueOverflowFault"
    assert children(limited, parent) == []
    assert queued_total(limited) == 0
    # 20 fit
    parent = sweep(limited, scenarios=20, durationMs=1)
    assert limited.wait_status(parent, "SUCCEEDED", timeout=60)["status"] == "SUCCEEDED"


def test_children_count_against_the_owners_max_queued(limited):
    """alice may have 5 XDemo jobs queued: her sweep of 6 fails with QuotaExceededFault,
    one of 5 runs."""
    import requests

    def alice_sweep(scenarios):
        r = requests.post(
            limited.url("XSweep", "startSweep"),
            json={"scenarios": scenarios, "durationMs": 1},
            auth=limited.alice,
            timeout=10,
        )
        assert r.status_code == 200, r.text
        return r.json()["id"]

    parent = alice_sweep(6)
    assert limited.wait_status(parent, "FAILED")["status"] == "FAILED"
    r = requests.post(
        limited.url("XSweep", "fetchSweepResponse"),
        json={"id": parent},
        auth=limited.alice,
        timeout=10,
    )
    assert r.json()["faultInfo"]["$type"] == "QuotaExceededFault", r.text
    assert "max_queued of 5" in r.json()["message"]
    assert children(limited, parent) == []
    parent = alice_sweep(5)
    assert limited.wait_status(parent, "SUCCEEDED", timeout=60)["status"] == "SUCCEEDED"
