"""The status page's snapshot (``node_status.snapshot``) read from a real store, no HTTP:
what an administrator reads on the page must be what the store holds."""

import json
import time

from xruntime import __version__
from xruntime.admin.node_status import snapshot
from xruntime.store import now_ms

from .helpers import LEASE_MS, NODE, claim_exactly, new_record, progress_json


def test_snapshot_of_an_idle_node(any_store):
    started = time.time() - 90
    snap = snapshot(any_store, NODE, 4, started)
    assert snap["node"] == NODE and snap["version"] == __version__
    assert 90_000 <= snap["uptimeMs"] < 100_000
    assert snap["startedAt"] == int(started * 1000)
    assert snap["workers"] == {"total": 4, "busy": 0, "idle": 4}
    assert snap["queued"] == 0 and snap["running"] == [] and snap["moreRunning"] == 0
    assert snap["jobs"] == {
        s: 0 for s in ("QUEUING", "RUNNING", "STOPPING", "SUCCEEDED", "FAILED", "DELETED")
    }
    json.dumps(snap)  # sent as it is


def test_running_jobs_newest_first_with_their_progress_read_for_a_bar(any_store):
    older, newer, waiting = (
        new_record(owner="alice"),
        new_record(owner="bob", service="XDima"),
        new_record(),
    )
    for rec in (older, newer, waiting):
        assert any_store.create(rec, 0)
    first = any_store.claim(NODE, now_ms(), LEASE_MS)
    second = any_store.claim("another-node", now_ms(), LEASE_MS)
    assert (first.id, second.id) == (older.id, newer.id)
    assert any_store.set_progress(older.id, progress_json(remaining=15, successful=4, failed=1))
    assert any_store.request_stop(newer.id)

    snap = snapshot(any_store, NODE, 2, time.time())
    assert snap["workers"] == {"total": 2, "busy": 1, "idle": 1}  # this node's alone
    assert snap["queued"] == 1
    assert snap["jobs"]["RUNNING"] == 1 and snap["jobs"]["STOPPING"] == 1
    assert [j["id"] for j in snap["running"]] == [newer.id, older.id]
    stopping, running = snap["running"]
    assert stopping["status"] == "STOPPING" and stopping["node"] == "another-node"
    assert stopping["user"] == "bob" and stopping["service"] == "XDima"
    assert stopping["bar"] is None and stopping["progress"] is None
    assert running["progress"] == {
        "$type": "BulkProgress",
        "remaining": 15,
        "successful": 4,
        "failed": 1,
    }
    assert running["bar"] == {"fraction": 0.25, "text": "5/20 (1 failed)"}
    assert running["operation"] == "simulate" and running["parentId"] is None
    assert running["elapsedMs"] >= 0


def test_an_anonymous_job_has_no_user_and_a_child_names_its_parent(any_store):
    parent = new_record()
    assert any_store.create(parent, 0)
    claim_exactly(any_store, parent.id)
    child = new_record()
    assert (
        any_store.suspend(
            parent.id, NODE, 0, True, [child], progress_json(1, 0), "waiting for 1 child job"
        )
        == "RUNNING"
    )
    claim_exactly(any_store, child.id)
    snap = snapshot(any_store, NODE, 2, time.time())
    by_id = {j["id"]: j for j in snap["running"]}
    assert by_id[child.id]["parentId"] == parent.id
    assert by_id[parent.id]["user"] is None
    assert by_id[parent.id]["bar"]["text"] == "0/1"
    assert snap["workers"]["busy"] == 1  # the waiting parent holds no worker


def test_past_the_limit_the_other_running_jobs_are_counted(any_store):
    records = [new_record() for _ in range(7)]
    for rec in records:
        assert any_store.create(rec, 0)
    for _ in records:
        assert any_store.claim(NODE, now_ms(), LEASE_MS) is not None
    snap = snapshot(any_store, NODE, 8, time.time(), limit=5)
    assert [j["id"] for j in snap["running"]] == [r.id for r in reversed(records)][:5]
    assert snap["moreRunning"] == 2
