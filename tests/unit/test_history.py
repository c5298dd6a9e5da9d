"""Retries, each job's history and listing (docs/protocol.md §11, §12) without HTTP: the store
and the operation layer, on SQLite and (with XRUNTIME_TEST_DATABASE_URL) PostgreSQL."""

import threading
import time

import pytest
from sqlalchemy import text

from tests.fixtures.released_schema import released_database
from xruntime.operations.accounts import Caller
from xruntime.protocol.faults import (
    AccessDeniedFault,
    InternalErrorFault,
    InvalidValueFault,
    ProcessingFault,
    RequestTimedOutFault,
    UnknownJobFault,
)
from xruntime.protocol.types import ListJobsRequest
from xruntime.settings import config
from xruntime.store import JobStore, now_ms
from xruntime_services.xdemo.types import SimulateRequest

from .conftest import sqlite_url
from .helpers import (
    LEASE_MS,
    NODE,
    BlockingJobs,
    claim_exactly,
    fault_json,
    new_record,
    result_json,
    stored_response,
)

#: Who reads the history and lists in these tests, unless one names another caller.
ADMIN = Caller("", admin=True)


@pytest.fixture
def any_jobs(any_store, notifier, settings):
    """JobManager on SQLite, and on PostgreSQL when it is configured."""
    manager = BlockingJobs(any_store, notifier, lambda: settings[0])
    yield manager
    manager.close()


def history(jobs, job_id, caller=ADMIN):
    """[(status, attempt, message)] of the job's events."""
    return [(e.status, e.attempt, e.message) for e in jobs.events(job_id, caller).events]


def start(jobs, op, caller=ADMIN):
    return jobs.start(op, SimulateRequest(steps=1), caller).id


# --------------------------------------------------------------------------- every path


def test_a_job_that_succeeds_and_is_fetched(any_jobs, simulate_op):
    jobs = any_jobs
    job_id = start(jobs, simulate_op)
    claim_exactly(jobs.store, job_id)
    jobs.store.finish(job_id, "SUCCEEDED", now_ms(), result=result_json(stored_response()))
    jobs.fetch(simulate_op, job_id)
    jobs.fetch(simulate_op, job_id)  # a second fetch is no change
    assert history(jobs, job_id) == [
        ("QUEUING", 0, "queued"),
        ("RUNNING", 1, "running"),
        ("SUCCEEDED", 1, "succeeded"),
        ("SUCCEEDED", 1, "fetched"),
    ]
    events = jobs.events(job_id).events
    assert all(e.node == NODE for e in events[1:]) and events[0].node is None
    assert [e.time for e in events] == sorted(e.time for e in events)
    assert events[0].time.endswith("Z") and len(events[0].time) == len("2026-11-23T06:41:38.123Z")


def test_stop_then_a_fault(any_jobs, simulate_op):
    jobs = any_jobs
    job_id = start(jobs, simulate_op)
    claim_exactly(jobs.store, job_id)
    assert jobs.stop(job_id).status == "STOPPING"
    jobs.store.finish(
        job_id, "FAILED", now_ms(), fault=fault_json(ProcessingFault("no")), note="stopped"
    )
    assert history(jobs, job_id)[2:] == [
        ("STOPPING", 1, "stop asked"),
        ("FAILED", 1, "failed: ProcessingFault (stopped)"),
    ]


def test_computation_timeout_and_a_kill(any_jobs, simulate_op):
    jobs = any_jobs
    job_id = start(jobs, simulate_op)
    claim_exactly(jobs.store, job_id)
    assert jobs.store.request_stop(job_id, "stop asked: computation timeout")
    jobs.store.finish(
        job_id,
        "FAILED",
        now_ms(),
        fault=fault_json(RequestTimedOutFault("late")),
        note="aborted after timeout",
    )
    assert history(jobs, job_id)[2:] == [
        ("STOPPING", 1, "stop asked: computation timeout"),
        ("FAILED", 1, "failed: RequestTimedOutFault (aborted after timeout)"),
    ]


def test_queueing_timeout(any_jobs, simulate_op):
    jobs = any_jobs
    job_id = start(jobs, simulate_op)
    assert jobs.store.fail_timed_out_queued(
        now_ms() + 10_000, 1000, fault_json(RequestTimedOutFault("waited"))
    ) == [job_id]
    assert history(jobs, job_id)[1:] == [
        ("FAILED", 0, "failed: RequestTimedOutFault (queueing timeout)")
    ]


def test_delete_of_a_running_job_and_its_erasure(any_jobs, simulate_op):
    jobs = any_jobs
    job_id = start(jobs, simulate_op)
    claim_exactly(jobs.store, job_id)
    assert jobs.delete(job_id).status == "DELETED"
    assert history(jobs, job_id)[-1] == ("DELETED", 1, "deleted")
    assert jobs.store.erase(job_id, ("DELETED",))
    with pytest.raises(UnknownJobFault):
        jobs.events(job_id)
    assert event_rows(jobs.store) == 0  # erased with the job


def test_delete_of_a_queued_or_finished_job_erases_its_history(any_jobs, simulate_op):
    jobs = any_jobs
    queued = start(jobs, simulate_op)
    done = start(jobs, simulate_op)
    claim_exactly(jobs.store, queued)  # the older one first
    jobs.store.finish(queued, "SUCCEEDED", now_ms(), result=result_json(stored_response()))
    assert jobs.delete(queued).status == "DELETED" and jobs.delete(done).status == "DELETED"
    assert event_rows(jobs.store) == 0


def test_hand_back_and_node_death(any_jobs, simulate_op):
    jobs, store = any_jobs, any_jobs.store
    job_id = start(jobs, simulate_op)
    claim_exactly(store, job_id)
    assert store.hand_back(job_id, NODE)
    claim_exactly(store, job_id)
    assert [r.requeued for r in store.recover(NODE, now_ms(), 2, _died)] == [True]
    claim_exactly(store, job_id)
    assert [r.requeued for r in store.recover(NODE, now_ms(), 2, _died)] == [False]
    assert history(jobs, job_id)[1:] == [
        ("RUNNING", 1, "running"),
        ("QUEUING", 0, "handed back: its node shut down"),
        ("RUNNING", 1, "running"),
        ("QUEUING", 1, f"queued again: its node {NODE} died"),
        ("RUNNING", 2, "running"),
        ("FAILED", 2, f"failed: InternalErrorFault (its node {NODE} died; 2 runs lost)"),
    ]
    assert all(e.node == NODE for e in jobs.events(job_id).events[1:])


def _died(lost):
    return fault_json(InternalErrorFault(f"died {lost} times"))


def event_rows(store) -> int:
    with store.engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM job_events")).scalar()


def test_another_users_history_is_an_unknown_job(any_jobs, simulate_op):
    jobs = any_jobs
    job_id = start(jobs, simulate_op, Caller("alice"))
    assert history(jobs, job_id, Caller("alice"))[0][0] == "QUEUING"
    assert history(jobs, job_id, Caller("root", admin=True))[0][0] == "QUEUING"
    with pytest.raises(UnknownJobFault) as caught:
        jobs.events(job_id, Caller("bob"))
    assert caught.value.faultstring == f"there is no job with id {job_id}"


# --------------------------------------------------------------------------- retries


def test_a_retry_waits_queued_until_it_is_due_then_runs_again(any_store):
    store = any_store
    rec = new_record()
    store.create(rec, 0)
    claim_exactly(store, rec.id)
    asked = now_ms()
    assert store.retry(rec.id, 60_000, "retry 1 of 3 planned in 60.0 s: TransientFault: down")
    due = store.peek(rec.id).not_before
    # the delay counts from the database's clock in the retry's write, which this
    # process's reading of it may be off from: by a millisecond on SQLite (whole ms from
    # julianday), by half a round trip on PostgreSQL (store.clock); a second either way
    # still tells 60 s from any other delay
    assert asked + 59_000 <= due <= now_ms() + 61_000
    assert store.peek(rec.id).status == "QUEUING" and store.peek(rec.id).retries == 1
    assert store.claim(NODE, now_ms(), LEASE_MS) is None  # not before its time
    assert store.claim(NODE, now_ms(), LEASE_MS, None, (("", None, 5),)) is None  # nor fairly
    assert store.next_due(now_ms()) == due
    later = store.claim(NODE, due, LEASE_MS)
    assert (later.id, later.attempts, later.retries) == (rec.id, 2, 1)
    assert store.next_due(due) is None


def test_a_waiting_retry_does_not_block_the_jobs_behind_it(any_store):
    store = any_store
    first, second = new_record(owner="alice"), new_record(owner="alice")
    store.create(first, 0)
    store.create(second, 0)
    claim_exactly(store, first.id)
    store.retry(first.id, 60_000, "later")
    got = store.claim(NODE, now_ms(), LEASE_MS, None, (("alice", None, 1),))
    assert got.id == second.id  # the lane's first *due* job


def test_only_a_running_job_is_retried(any_store):
    store = any_store
    rec = new_record()
    store.create(rec, 0)
    claim_exactly(store, rec.id)
    store.request_stop(rec.id)
    assert not store.retry(rec.id, 0, "later")  # stopped: it is not run again


def test_node_deaths_and_retries_count_apart(any_store):
    """max_attempts bounds the runs lost with a node; retries are not among them."""
    store = any_store
    rec = new_record()
    store.create(rec, 0)
    for _ in range(3):  # three runs that each ended in a retry
        claim_exactly(store, rec.id, now=_when_due(store, rec.id))
        store.retry(rec.id, 0, "later")
    claim_exactly(store, rec.id, now=_when_due(store, rec.id))
    assert [r.requeued for r in store.recover(NODE, now_ms(), 2, _died)] == [True]  # 1 run lost
    claim_exactly(store, rec.id)
    assert [(r.requeued, r.attempts) for r in store.recover(NODE, now_ms(), 2, _died)] == [
        (False, 2)
    ]


def _when_due(store, job_id):
    """Now, or the job's due time where this process's clock has not reached it: a
    retry's due time is the database's clock (on PostgreSQL, a millisecond or so ahead
    of this process's reading of it)."""
    return max(now_ms(), store.peek(job_id).not_before or 0)


def test_retry_settings():
    settings = config.parse(
        '[jobs]\nmax_retries = 5\nretry_backoff = "10s"\nretry_max_delay = "1m"\n'
        "[services.XDemo]\nmax_retries = 0\n",
        known_services=["XDemo", "XTour"],
    )
    jobs = settings.jobs_for("XTour")
    assert (jobs.max_retries, jobs.retry_backoff_ms, jobs.retry_max_delay_ms) == (5, 10_000, 60_000)
    assert [jobs.retry_delay_ms(n) for n in (1, 2, 3, 4, 100)] == [
        10_000,
        20_000,
        40_000,
        60_000,
        60_000,
    ]
    assert settings.jobs_for("XDemo").max_retries == 0
    assert config.JobSettings().max_retries == 3
    with pytest.raises(config.ConfigError) as caught:
        config.parse('[jobs]\nmax_retries = -1\nretry_backoff = "soon"\n')
    assert [e.split(":")[0] for e in caught.value.errors] == ["line 2", "line 3"]


# --------------------------------------------------------------------------- listing


def listed(jobs, caller=ADMIN, **request):
    page = jobs.list_jobs(ListJobsRequest(**request), caller)
    return [j.id for j in page.jobs], page.nextCursor


def test_pages_newest_first_never_miss_or_repeat_a_job_while_jobs_are_added(any_jobs, simulate_op):
    jobs = any_jobs
    existing = [start(jobs, simulate_op) for _ in range(57)]
    added, stop = [], threading.Event()

    def add():
        while not stop.is_set():
            added.append(start(jobs, simulate_op))
            time.sleep(0.002)

    adder = threading.Thread(target=add)
    adder.start()
    try:
        seen, cursor = [], None
        first, cursor = listed(jobs, limit=10)
        seen += first
        while cursor is not None:
            page, cursor = listed(jobs, limit=10, cursor=cursor)
            seen += page
            time.sleep(0.005)
    finally:
        stop.set()
        adder.join()
    assert len(seen) == len(set(seen))  # no repeats
    assert [j for j in seen if j in set(existing)] == existing[::-1]  # none missing, newest first
    assert added  # jobs were added meanwhile


def test_filters_and_summaries(any_jobs, simulate_op):
    jobs, store = any_jobs, any_jobs.store
    a = start(jobs, simulate_op, Caller("alice"))
    b = start(jobs, simulate_op, Caller("bob"))
    claim_exactly(store, a)
    store.finish(a, "SUCCEEDED", now_ms(), result=result_json(stored_response()))
    jobs.fetch(simulate_op, a, Caller("alice"))
    assert listed(jobs) == ([b, a], None)
    assert listed(jobs, status=["SUCCEEDED"]) == ([a], None)
    assert listed(jobs, status=["QUEUING", "RUNNING"]) == ([b], None)
    assert listed(jobs, status=["UNKNOWN"]) == ([], None)
    assert listed(jobs, service="XTour") == ([], None)
    assert listed(jobs, user="bob") == ([b], None)
    assert listed(jobs, Caller("alice")) == ([a], None)  # her own only
    assert listed(jobs, Caller("alice"), user="alice") == ([a], None)
    with pytest.raises(AccessDeniedFault):
        listed(jobs, Caller("alice"), user="bob")
    [summary] = jobs.list_jobs(ListJobsRequest(user="alice"), Caller("root", admin=True)).jobs
    assert (
        summary.id,
        summary.service,
        summary.operation,
        summary.status,
        summary.user,
        summary.fetched,
        summary.attempts,
    ) == (a, "XDemo", "simulate", "SUCCEEDED", "alice", True, 1)
    assert summary.queuedAt <= summary.startedAt <= summary.finishedAt
    assert summary.finishedAt.endswith("Z")


@pytest.mark.parametrize(
    "request_, parameter",
    [
        (dict(limit=0), "limit"),
        (dict(limit=1001), "limit"),
        (dict(cursor="not-a-cursor"), "cursor"),
        (dict(cursor="YWZ0ZXI6MTI"), "cursor"),
    ],
)
def test_bad_limits_and_cursors(jobs, request_, parameter):
    with pytest.raises(InvalidValueFault) as caught:
        jobs.list_jobs(ListJobsRequest(**request_))
    assert caught.value.parameter == parameter


def test_a_database_of_the_previous_release_is_upgraded(tmp_path, simulate_op, notifier):
    """Its jobs stay, with no history before the upgrade, and every change after it is
    recorded."""
    url = sqlite_url(tmp_path)
    released_database(url, [dict(id="old-job", status="QUEUING", request=b"{}", queued_at=1)])
    store = JobStore(url)
    jobs = BlockingJobs(store, notifier, lambda: config.Settings())
    try:
        assert jobs.events("old-job").events == []
        assert listed(jobs) == (["old-job"], None)
        claim_exactly(store, "old-job")
        assert history(jobs, "old-job") == [("RUNNING", 1, "running")]
    finally:
        jobs.close()
        store.close()
