"""Child jobs (docs/protocol.md §13) in the store, without HTTP or workers: SQLite, and
PostgreSQL when XRUNTIME_TEST_DATABASE_URL is set."""

import json

from sqlalchemy import select

from xruntime.protocol.faults import RequestStoppedFault
from xruntime.store import QueueFull, QueueLimit, now_ms
from xruntime.store.schema import jobs as jobs_table

from .helpers import (
    LEASE_MS,
    NODE,
    claim_exactly,
    fault_json,
    new_record,
    progress_json,
    result_json,
    stored_response,
)

STOP_FAULT = fault_json(
    RequestStoppedFault("its parent job was stopped before this child job started")
)


def running_parent(store, owner="alice"):
    """A parent job, claimed: RUNNING on NODE."""
    parent = new_record(owner=owner)
    assert store.create(parent, 0)
    claim_exactly(store, parent.id)
    return parent.id


def fan_out(store, parent_id, count, stage=0, fail_fast=True):
    children = [new_record() for _ in range(count)]  # owner "" on purpose: the parent's is taken
    status = store.suspend(
        parent_id,
        NODE,
        stage,
        fail_fast,
        children,
        progress_json(count, 0),
        f"waiting for {count} child jobs",
    )
    assert status == "RUNNING"
    return [c.id for c in children]


def raw(store, job_id, *columns):
    with store.engine.connect() as conn:
        return conn.execute(
            select(*(jobs_table.c[c] for c in columns)).where(jobs_table.c.id == job_id)
        ).first()


def succeed(store, job_id):
    assert store.finish(job_id, "SUCCEEDED", now_ms(), result=result_json(stored_response()))


def bulk(store, job_id):
    return json.loads(store.peek(job_id).progress)


def test_suspend_queues_the_children_in_the_parents_lane_and_frees_the_node(any_store):
    store = any_store
    parent = running_parent(store, owner="alice")
    kids = fan_out(store, parent, 3)
    rec = store.peek(parent)
    assert (
        rec.status == "RUNNING"
        and rec.node is None
        and rec.lease_until is None
        and rec.waiting_for == 0
    )
    for index, kid in enumerate(kids):
        child = store.peek(kid)
        assert (
            child.status,
            child.owner,
            child.parent_id,
            child.child_stage,
            child.child_index,
        ) == ("QUEUING", "alice", parent, 0, index)
        assert raw(store, kid, "lane")[0] == "XDemo/alice"
    assert raw(store, parent, "lane")[0] != "XDemo/alice"
    # the children are claimed; the waiting parent is not (it is not queued)
    claimed = [store.claim(NODE, now_ms(), LEASE_MS) for _ in range(4)]
    assert sorted(c.id for c in claimed if c is not None) == sorted(kids) and claimed[3] is None
    # a parent that no longer runs on the node stores nothing
    assert (
        store.suspend(kids[0], "another-node", 0, True, [new_record()], progress_json(1, 0), "x")
        is False
    )


def test_children_past_a_queue_limit_are_not_stored(any_store):
    """docs/protocol.md §15: children count against max_queued, the queue's and their owner's;
    past either, suspend stores nothing and says which limit."""
    store = any_store
    parent = running_parent(store)
    assert store.create(new_record(owner="bob"), 0)  # 1 queued already
    four = [new_record() for _ in range(4)]
    full = store.suspend(
        parent, NODE, 0, True, four, progress_json(4, 0), "x", [QueueLimit("XDemo", 4, None, 0)]
    )
    assert full == QueueFull("XDemo", 4, own=False)
    full = store.suspend(
        parent, NODE, 0, True, four, progress_json(4, 0), "x", [QueueLimit("XDemo", 10, "XDemo", 3)]
    )
    assert full == QueueFull("XDemo", 3, own=True)  # alice's own lane
    assert raw(store, parent, "status", "node") == ("RUNNING", NODE)
    with store.engine.connect() as conn:
        assert (
            conn.execute(select(jobs_table.c.id).where(jobs_table.c.parent_id == parent)).all()
            == []
        )
    # a limit of another service, and limits that hold, let them in
    status = store.suspend(
        parent,
        NODE,
        0,
        True,
        four,
        progress_json(4, 0),
        "x",
        [QueueLimit("XTour", 1, None, 1), QueueLimit("XDemo", 5, None, 4)],
    )
    assert status == "RUNNING"


def test_resume_only_after_every_child_finished(any_store):
    store = any_store
    parent = running_parent(store)
    kids = fan_out(store, parent, 3)
    assert store.resume(NODE, now_ms(), LEASE_MS) is None
    for kid in kids:
        claim_exactly(store, kid)
    succeed(store, kids[0])
    assert store.finish(kids[1], "FAILED", now_ms(), fault=STOP_FAULT)
    assert store.resume(NODE, now_ms(), LEASE_MS) is None  # one still runs
    succeed(store, kids[2])
    resumed = store.resume("other-node", now_ms(), LEASE_MS)
    assert resumed is not None and resumed.id == parent and resumed.node == "other-node"
    assert resumed.status == "RUNNING"
    assert store.resume(NODE, now_ms(), LEASE_MS) is None  # taken once
    outcomes = store.children_of(parent)
    assert [(c.id, c.status, c.index) for c in outcomes] == [
        (kids[0], "SUCCEEDED", 0),
        (kids[1], "FAILED", 1),
        (kids[2], "SUCCEEDED", 2),
    ]


def test_work_waiting_tells_a_slot_what_it_may_find(any_store):
    """(A worker slot tries the claim and the resume, each a write, only where this read
    says something is there, and wakes another idle slot where it says more is: the
    queued jobs are counted up to two.)"""
    store = any_store
    assert store.work_waiting() == (0, False)
    parent = running_parent(store)
    assert store.work_waiting() == (0, False)  # the parent runs: nothing queued
    kids = fan_out(store, parent, 3)
    assert store.work_waiting() == (2, True)  # its children queued, the parent waits
    claim_exactly(store, kids[0])
    assert store.work_waiting() == (2, True)  # (two or more)
    claim_exactly(store, kids[1])
    assert store.work_waiting() == (1, True)
    claim_exactly(store, kids[2])
    assert store.work_waiting() == (0, True)
    for kid in kids:
        succeed(store, kid)
    assert store.work_waiting() == (0, True)  # waits to be resumed
    assert store.resume(NODE, now_ms(), LEASE_MS).id == parent
    assert store.work_waiting() == (0, False)


def test_a_stopped_waiting_parent_resumes_stopping(any_store):
    store = any_store
    parent = running_parent(store)
    kids = fan_out(store, parent, 2)
    assert store.request_stop(parent)
    for kid in kids:
        claim_exactly(store, kid)
        succeed(store, kid)
    resumed = store.resume(NODE, now_ms(), LEASE_MS)
    assert resumed.id == parent and resumed.status == "STOPPING"


def test_refresh_waiting_progress_counts_the_children(any_store):
    store = any_store
    parent = running_parent(store)
    kids = fan_out(store, parent, 4, fail_fast=True)

    def make(successful, failed, remaining):
        return progress_json(remaining, successful, failed)

    assert store.refresh_waiting_progress(parent, make) is False
    assert bulk(store, parent) == {
        "$type": "BulkProgress",
        "remaining": 4,
        "successful": 0,
        "failed": 0,
    }
    claim_exactly(store, kids[0])
    succeed(store, kids[0])
    assert store.refresh_waiting_progress(parent, make) is False
    assert bulk(store, parent)["successful"] == 1 and bulk(store, parent)["remaining"] == 3
    claim_exactly(store, kids[1])
    assert store.finish(kids[1], "FAILED", now_ms(), fault=STOP_FAULT)
    assert store.refresh_waiting_progress(parent, make) is True  # fail fast: stop the others
    assert bulk(store, parent) == {
        "$type": "BulkProgress",
        "remaining": 2,
        "successful": 1,
        "failed": 1,
    }
    assert store.refresh_waiting_progress(kids[2], make) is None  # not a waiting parent


def test_stop_children_fails_the_queued_and_stops_the_running(any_store):
    store = any_store
    parent = running_parent(store)
    kids = fan_out(store, parent, 4)
    claim_exactly(store, kids[0])
    claim_exactly(store, kids[1])
    succeed(store, kids[0])
    assert store.request_stop(parent)
    changed = store.stop_children(parent, now_ms(), STOP_FAULT)
    assert sorted(changed) == sorted(kids[1:])
    assert [store.peek(k).status for k in kids] == ["SUCCEEDED", "STOPPING", "FAILED", "FAILED"]
    assert json.loads(store.get(kids[2]).fault)["faultInfo"]["$type"] == "RequestStoppedFault"
    assert store.claim(NODE, now_ms(), LEASE_MS) is None  # nothing left queued


def test_stop_children_reaches_grandchildren(any_store):
    store = any_store
    parent = running_parent(store)
    middle = fan_out(store, parent, 1)[0]
    claim_exactly(store, middle)
    grandchildren = fan_out(store, middle, 2)
    claim_exactly(store, grandchildren[0])
    changed = store.stop_children(parent, now_ms(), STOP_FAULT)
    assert sorted(changed) == sorted([middle] + grandchildren)
    assert [store.peek(j).status for j in [middle] + grandchildren] == [
        "STOPPING",
        "STOPPING",
        "FAILED",
    ]


def test_erasing_the_parent_erases_its_children(any_store):
    store = any_store
    parent = running_parent(store)
    kids = fan_out(store, parent, 3)
    for kid in kids:
        claim_exactly(store, kid)
        succeed(store, kid)
    assert store.resume(NODE, now_ms(), LEASE_MS).id == parent
    succeed(store, parent)
    assert store.delete_children(parent) == []  # none holds a worker
    assert store.erase(parent, ("SUCCEEDED",))
    assert all(store.peek(k) is None for k in kids + [parent])
    assert store.events(kids[0]) is None
    assert store.list_jobs(parent=parent)[0] == []


def test_delete_children_marks_the_running_ones_deleted(any_store):
    store = any_store
    parent = running_parent(store)
    kids = fan_out(store, parent, 3)
    claim_exactly(store, kids[0])
    assert store.delete_children(parent) == [kids[0]]
    assert [store.peek(k).status for k in kids] == ["DELETED", "QUEUING", "QUEUING"]
    assert store.erase(parent, ("RUNNING", "STOPPING"))
    assert all(store.peek(k) is None for k in kids)


def test_the_cleaner_never_erases_a_child_on_its_own(any_store):
    store = any_store
    parent = running_parent(store)
    kids = fan_out(store, parent, 2)
    long_ago = now_ms() - 10 * 86_400_000
    for kid in kids:
        claim_exactly(store, kid)
        assert store.finish(kid, "SUCCEEDED", long_ago, result=result_json(stored_response()))
    # the children expired long ago, their parent still runs: nothing is erased
    assert store.erase_expired(now_ms(), 1000, 1000, 100) == 0
    assert all(store.peek(k) is not None for k in kids)
    assert store.resume(NODE, now_ms(), LEASE_MS).id == parent
    assert store.finish(parent, "SUCCEEDED", now_ms(), result=result_json(stored_response()))
    assert store.erase_expired(now_ms(), 1000, 1000, 100) == 0  # the parent has not expired
    assert all(store.peek(k) is not None for k in kids)
    # once the parent expires, it goes, with its children
    assert store.erase_expired(now_ms() + 5000, 1000, 1000, 100) == 1
    assert all(store.peek(k) is None for k in kids + [parent])


def test_list_jobs_and_events_name_the_parent(any_store):
    store = any_store
    parent = running_parent(store)
    kids = fan_out(store, parent, 2)
    other = new_record()
    assert store.create(other, 0)
    page, more = store.list_jobs(parent=parent)
    assert sorted(r.id for _, r in page) == sorted(kids) and not more
    assert all(r.parent_id == parent for _, r in page)
    parent_of, rows = store.events(kids[1])
    assert parent_of == parent and rows[0]["message"] == f"queued: child 2 of 2 of job {parent}"
    assert store.events(parent)[0] is None
    assert [r["message"] for r in store.events(parent)[1]][-1] == "waiting for 2 child jobs"


def test_a_child_job_may_use_its_workers_share_of_the_cores(monkeypatch):
    """job.cores: all of the node's (0) for a job that is no child; for a child, the
    node's cores divided among its workers (its siblings run on the others), at least 1."""
    from xruntime.engine import child_jobs
    from xruntime.store import JobRecord

    monkeypatch.setattr(child_jobs.os, "cpu_count", lambda: 8)
    job = JobRecord("a", "XDima", "createDistanceMatrix", "DistanceMatrixResponse", "RUNNING")
    child = JobRecord(
        "b", "XDima", "createDistanceMatrix", "DistanceMatrixResponse", "RUNNING", parent_id="a"
    )
    assert child_jobs.cores_of(job, 2) == 0
    assert child_jobs.cores_of(child, 2) == 4
    assert child_jobs.cores_of(child, 3) == 2
    assert child_jobs.cores_of(child, 16) == 1
