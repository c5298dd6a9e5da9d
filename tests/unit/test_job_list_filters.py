"""The job store's list filters that the OGC API's job list reads (``JobStore.
list_jobs``: operations, the time a job was first queued, its duration), and
``JobManager.job_page`` over them, on SQLite and (with XRUNTIME_TEST_DATABASE_URL)
PostgreSQL.  Every time is given, none read from a clock."""

import pytest

from xruntime.operations.accounts import ANONYMOUS, Caller
from xruntime.operations.jobs import JobManager
from xruntime.protocol.faults import InvalidValueFault

from .helpers import LEASE_MS, NODE, new_record

T0 = 1_800_000_000_000  # ms: the jobs' times count from here


def add(store, queued_at, service="XDemo", operation="simulate", owner=""):
    rec = new_record(queued_at=queued_at, service=service, owner=owner)
    rec.operation = operation
    assert store.create(rec, 0)
    return rec.id


def run(store, job_id, started_at, finished_at=None, status="SUCCEEDED"):
    """Claim the job (the only one queued) at ``started_at`` and end it at ``finished_at``."""
    rec = store.claim(NODE, started_at, LEASE_MS)
    assert rec is not None and rec.id == job_id
    if finished_at is not None:
        assert store.finish(
            job_id,
            status,
            finished_at,
            result="{}" if status == "SUCCEEDED" else None,
            fault="{}" if status == "FAILED" else None,
        )


@pytest.fixture
def jobs_in_every_shape(any_store):
    """Six jobs, oldest first: (id, what it is)."""
    s = any_store
    quick = add(s, T0)
    run(s, quick, T0 + 100, T0 + 600)  # 0.5 s
    slow = add(s, T0 + 1000)
    run(s, slow, T0 + 1000, T0 + 11_000)  # 10 s
    failed = add(s, T0 + 2000)
    run(s, failed, T0 + 2500, T0 + 4500, "FAILED")  # 2 s
    running = add(s, T0 + 3000)
    run(s, running, T0 + 3000)  # 5 s at T0 + 8000
    tour = add(s, T0 + 4000, "XTour", "planTours", owner="alice")
    queued = add(s, T0 + 5000, owner="alice")  # never started: no duration
    return s, dict(quick=quick, slow=slow, failed=failed, running=running, tour=tour, queued=queued)


def ids(page):
    return [rec.id for _, rec in page[0]]


def test_operations_filter_by_service_and_operation(jobs_in_every_shape):
    s, j = jobs_in_every_shape
    newest_first = [j[k] for k in ("queued", "tour", "running", "failed", "slow", "quick")]
    assert ids(s.list_jobs()) == newest_first
    assert ids(s.list_jobs(operations=[("XTour", "planTours")])) == [j["tour"]]
    assert ids(s.list_jobs(operations=[("XTour", "simulate")])) == []
    assert ids(s.list_jobs(operations=[("XDemo", "simulate"), ("XTour", "planTours")])) == (
        newest_first
    )
    assert ids(s.list_jobs(operations=[])) == []  # no process: no job


def test_queued_between_includes_both_ends_and_may_be_open(jobs_in_every_shape):
    s, j = jobs_in_every_shape
    assert ids(s.list_jobs(queued_between=(T0 + 1000, T0 + 3000))) == [
        j["running"],
        j["failed"],
        j["slow"],
    ]
    assert ids(s.list_jobs(queued_between=(T0 + 4000, None))) == [j["queued"], j["tour"]]
    assert ids(s.list_jobs(queued_between=(None, T0))) == [j["quick"]]
    assert ids(s.list_jobs(queued_between=(T0 + 1, T0 + 999))) == []
    assert ids(s.list_jobs(queued_between=(T0 + 2000, T0 + 2000))) == [j["failed"]]


def test_duration_counts_from_start_to_end_or_to_now(jobs_in_every_shape):
    s, j = jobs_in_every_shape
    now = T0 + 8000  # the running job has run 5 s

    def lasting(shortest, longest):
        return ids(s.list_jobs(duration_between=(shortest, longest), now=now))

    started = [j[k] for k in ("running", "failed", "slow", "quick")]  # the queued ones: none
    assert lasting(0, None) == started
    assert lasting(None, 2000) == [j["failed"], j["quick"]]  # both ends included
    assert lasting(2000, 5000) == [j["running"], j["failed"]]
    assert lasting(5001, None) == [j["slow"]]
    assert lasting(None, 499) == []
    assert ids(s.list_jobs(duration_between=(6000, None), now=T0 + 9000)) == [
        j["running"],
        j["slow"],
    ]


def test_filters_combine_with_statuses_owner_and_pages(jobs_in_every_shape):
    s, j = jobs_in_every_shape
    assert ids(
        s.list_jobs(["SUCCEEDED", "FAILED"], queued_between=(T0 + 500, None), now=T0 + 8000)
    ) == [j["failed"], j["slow"]]
    assert ids(s.list_jobs(owner="alice", operations=[("XDemo", "simulate")])) == [j["queued"]]
    first, more = s.list_jobs(limit=2, duration_between=(0, None), now=T0 + 8000)
    assert [rec.id for _, rec in first] == [j["running"], j["failed"]] and more
    rest, more = s.list_jobs(
        limit=2, before=first[-1][0], duration_between=(0, None), now=T0 + 8000
    )
    assert [rec.id for _, rec in rest] == [j["slow"], j["quick"]] and not more


def test_the_job_page_of_the_operation_layer(jobs_in_every_shape, notifier, settings):
    s, j = jobs_in_every_shape
    manager = JobManager(s, notifier, lambda: settings[0])
    page, cursor = manager.job_page(ANONYMOUS, 4, operations=[("XDemo", "simulate")])
    assert [r.id for r in page] == [j["queued"], j["running"], j["failed"], j["slow"]]
    page, cursor = manager.job_page(ANONYMOUS, 4, cursor, operations=[("XDemo", "simulate")])
    assert [r.id for r in page] == [j["quick"]] and cursor is None
    page, _ = manager.job_page(Caller("alice"), 10)  # hers only
    assert [r.id for r in page] == [j["queued"], j["tour"]]
    page, _ = manager.job_page(Caller("bob"), 10)
    assert page == []
    page, _ = manager.job_page(ANONYMOUS, 10, statuses=["RUNNING"], queued_between=(T0, None))
    assert [r.id for r in page] == [j["running"]]
    with pytest.raises(InvalidValueFault) as caught:
        manager.job_page(ANONYMOUS, 10, "not-a-cursor")
    assert caught.value.parameter == "cursor"
