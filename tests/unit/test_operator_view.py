"""What the operator's view reads: the store's counts per service and busy workers,
and the reading of a progress for a bar (``xruntime.progress_view``)."""

from xruntime.protocol.progress_view import view_of
from xruntime.store import now_ms

from .helpers import LEASE_MS, NODE, claim_exactly, new_record, progress_json


def test_counts_by_service_and_status(any_store):
    for service, count in (("XDemo", 3), ("XDima", 2)):
        for _ in range(count):
            assert any_store.create(new_record(service=service), 0)
    claimed = any_store.claim(NODE, now_ms(), LEASE_MS)
    assert claimed.service == "XDemo"
    assert any_store.counts_by_service() == {
        ("XDemo", "QUEUING"): 2,
        ("XDemo", "RUNNING"): 1,
        ("XDima", "QUEUING"): 2,
    }


def test_busy_workers_counts_the_jobs_a_node_holds(any_store):
    records = [new_record() for _ in range(4)]
    for rec in records:
        assert any_store.create(rec, 0)
    assert any_store.busy_workers(NODE) == 0
    first = claim_exactly(any_store, records[0].id)
    second = any_store.claim(NODE, now_ms(), LEASE_MS)
    any_store.claim("another-node", now_ms(), LEASE_MS)
    assert any_store.busy_workers(NODE) == 2
    assert any_store.request_stop(first.id)  # winding down: still busy
    assert any_store.busy_workers(NODE) == 2
    assert any_store.mark_deleted(second.id)  # deleted, not let go yet
    assert any_store.busy_workers(NODE) == 2
    assert any_store.finish(first.id, "FAILED", now_ms(), fault="{}", from_states=("STOPPING",))
    assert any_store.busy_workers(NODE) == 1
    assert any_store.busy_workers("another-node") == 1


def test_a_parent_waiting_for_its_children_holds_no_worker(any_store):
    parent = new_record()
    assert any_store.create(parent, 0)
    claim_exactly(any_store, parent.id)
    assert any_store.busy_workers(NODE) == 1
    children = [new_record() for _ in range(3)]
    assert (
        any_store.suspend(
            parent.id, NODE, 0, True, children, progress_json(3, 0), "waiting for 3 child jobs"
        )
        == "RUNNING"
    )
    assert any_store.busy_workers(NODE) == 0


def test_bulk_progress_reads_as_done_out_of_total():
    view = view_of({"$type": "BulkProgress", "successful": 30, "failed": 7, "remaining": 63})
    assert (view.done, view.total, view.fraction) == (37, 100, 0.37)
    assert view.text == "37/100 (7 failed)"
    assert (
        view_of({"$type": "BulkProgress", "successful": 5, "failed": 0, "remaining": 0}).text
        == "5/5"
    )


def test_a_percentage_field_reads_as_its_fraction():
    view = view_of(
        {
            "$type": "DistanceMatrixProgress",
            "status": "CALCULATING_MATRIX",
            "calculationProgress": 42,
        }
    )
    assert view.fraction == 0.42
    assert view.text == "42 %, status CALCULATING_MATRIX"


def test_progress_without_an_end_has_text_and_no_fraction():
    view = view_of({"$type": "TourPlanProgress", "iterations": 120, "bestCost": 9000})
    assert view.fraction is None
    assert view.text == "iterations 120, bestCost 9000"
    assert view_of(None) is None
    assert view_of({"$type": "BulkProgress"}) is None
