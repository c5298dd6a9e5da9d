"""The job store's guarded transitions, under concurrent callers, on SQLite and PostgreSQL.

Every store method that changes a job is one transaction guarded on the job's state;
of two actors racing on a job exactly one wins.  The PostgreSQL variant runs when
``XRUNTIME_TEST_DATABASE_URL`` names a database (its ``jobs`` table is dropped and
created again for each test), e.g.::

    XRUNTIME_TEST_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test
"""

import json
import sqlite3
import threading
from collections import Counter
from functools import partial

from xruntime.engine.notifier import Notifier
from xruntime.protocol import codec
from xruntime.protocol.faults import InternalErrorFault, JobStateFault, UnknownJobFault
from xruntime.settings.config import Settings
from xruntime.store import now_ms

from .helpers import (
    LEASE_MS,
    NODE,
    BlockingJobs,
    claim_exactly,
    fault_json,
    new_record,
    progress_json,
)


def race(*actions):
    """Run the actions at the same moment, one thread each; answers their results
    (or the exception each raised) in the same order."""
    barrier = threading.Barrier(len(actions))
    results = [None] * len(actions)

    def run(i, action):
        barrier.wait()
        try:
            results[i] = action()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            results[i] = exc

    threads = [
        threading.Thread(target=run, args=(i, a), daemon=True) for i, a in enumerate(actions)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "a racing store call hangs"
    return results


def running_job(store, progress=None):
    rec = new_record()
    assert store.create(rec, 0)
    claim_exactly(store, rec.id)
    if progress is not None:
        assert store.set_progress(rec.id, progress)
    return rec.id


def rounds(store):
    return 25 if store.dialect == "sqlite" else 40


# --------------------------------------------------------------------------- stop / delete / finish


def test_stop_delete_finish_race_has_one_winner(any_store):
    store = any_store
    result = json.dumps({"stepsDone": 1, "payload": ""})
    fault = fault_json(InternalErrorFault("crashed"))
    winners_seen = Counter()
    for _ in range(rounds(store)):
        job_id = running_job(store, progress_json(1, 1))
        now = now_ms()
        kinds = ["stop", "stop", "delete", "delete", "succeed", "succeed", "fail", "fail"]
        actions = {
            "stop": partial(store.request_stop, job_id),
            "delete": partial(store.mark_deleted, job_id),
            "succeed": partial(store.finish, job_id, "SUCCEEDED", now, result=result),
            "fail": partial(store.finish, job_id, "FAILED", now, fault=fault),
        }
        outcomes = race(*(actions[k] for k in kinds))
        for outcome in outcomes:
            assert isinstance(outcome, bool), f"a store call failed under the race: {outcome!r}"
        won = Counter(k for k, ok in zip(kinds, outcomes, strict=True) if ok)
        ending = won["delete"] + won["succeed"] + won["fail"]
        assert ending == 1, f"exactly one ending transition must win, got {dict(won)}"
        assert won["stop"] <= 1, "RUNNING → STOPPING happens at most once"
        rec = store.get(job_id)
        if won["succeed"]:
            assert rec.status == "SUCCEEDED"
            assert rec.result == result and rec.fault is None
            assert rec.finished_at == now and rec.lease_until is None
        elif won["fail"]:
            assert rec.status == "FAILED"
            assert rec.fault == fault and rec.result is None
            assert rec.finished_at == now and rec.lease_until is None
        else:
            assert rec.status == "DELETED"
            assert rec.result is None and rec.fault is None and rec.finished_at is None
        assert rec.progress == progress_json(1, 1), "the last progress is kept"
        winners_seen.update(k for k in ("delete", "succeed", "fail") if won[k])
    assert sum(winners_seen.values()) == rounds(store)


def test_two_finishes_never_both_win(any_store):
    store = any_store
    for _ in range(rounds(store)):
        job_id = running_job(store)
        # (each racer stamps its finish when it runs; job_id bound now, as a default)
        outcomes = race(
            lambda job_id=job_id: store.finish(job_id, "SUCCEEDED", now_ms(), result="{}"),
            lambda job_id=job_id: store.finish(job_id, "FAILED", now_ms(), fault="{}"),
            lambda job_id=job_id: store.finish(job_id, "SUCCEEDED", now_ms(), result="{}"),
            lambda job_id=job_id: store.finish(job_id, "FAILED", now_ms(), fault="{}"),
        )
        assert outcomes.count(True) == 1
        rec = store.get(job_id)
        assert rec.status in ("SUCCEEDED", "FAILED")
        assert (rec.result is None) == (rec.status == "FAILED")
        assert (rec.fault is None) == (rec.status == "SUCCEEDED")


def test_guards_refuse_transitions_out_of_the_wrong_state(any_store):
    store = any_store
    rec = new_record()
    assert store.create(rec, 0)
    assert not store.request_stop(rec.id), "a QUEUING job cannot be stopped"
    assert not store.mark_deleted(rec.id), "a QUEUING job is erased, not marked DELETED"
    assert not store.set_progress(rec.id, progress_json(1, 0))
    assert not store.finish(rec.id, "SUCCEEDED", now_ms(), result="{}")
    assert store.peek(rec.id).status == "QUEUING"
    claim_exactly(store, rec.id)
    assert store.finish(rec.id, "SUCCEEDED", now_ms(), result="{}")
    assert not store.request_stop(rec.id)
    assert not store.mark_deleted(rec.id)
    assert not store.set_progress(rec.id, progress_json(1, 0))
    assert not store.finish(rec.id, "FAILED", now_ms(), fault="{}")
    assert not store.erase(rec.id, ("QUEUING", "RUNNING"))
    assert store.peek(rec.id).status == "SUCCEEDED"
    assert store.erase(rec.id, ("SUCCEEDED",))
    assert store.get(rec.id) is None
    assert not store.erase(rec.id, ("SUCCEEDED",))


def test_manager_stop_and_delete_racing_the_worker_finish(any_store):
    """stopJob, deleteJob and the job's own end at once: every answer is one the state
    table allows, and the delete always takes effect (erased, or DELETED)."""
    store = any_store
    jobs = BlockingJobs(store, Notifier(), lambda: Settings())
    for _ in range(rounds(store)):
        job_id = running_job(store)
        stop_a, stop_b, delete, finished = race(
            partial(jobs.stop, job_id),
            partial(jobs.stop, job_id),
            partial(jobs.delete, job_id),
            lambda job_id=job_id: store.finish(job_id, "SUCCEEDED", now_ms(), result="{}"),
        )
        assert not isinstance(delete, Exception), delete
        assert delete.status == "DELETED"
        for stopped in (stop_a, stop_b):
            if isinstance(stopped, JobStateFault):
                assert stopped.status == "DELETED" and stopped.jobId == job_id
            elif isinstance(stopped, UnknownJobFault):
                assert stopped.jobId == job_id
            else:
                assert not isinstance(stopped, Exception), stopped
                assert stopped.status in ("STOPPING", "SUCCEEDED")
        rec = store.get(job_id)
        if finished:
            assert rec is None, "a finished job that is deleted is erased"
        else:
            assert rec is not None and rec.status == "DELETED"
        assert jobs.watch(job_id).status in ("UNKNOWN", "DELETED")


def test_delete_of_a_queued_job_racing_a_claim(any_store):
    """Either the worker gets the job (and the delete marks it DELETED) or the delete
    erases it (and no worker ever gets it); never both, never neither."""
    store = any_store
    jobs = BlockingJobs(store, Notifier(), lambda: Settings())
    for _ in range(rounds(store)):
        rec = new_record()
        assert store.create(rec, 0)
        claimed, deleted = race(
            lambda: store.claim(NODE, now_ms(), LEASE_MS), partial(jobs.delete, rec.id)
        )
        assert not isinstance(claimed, Exception), claimed
        assert deleted.status == "DELETED"
        left = store.get(rec.id)
        if claimed is not None:
            assert claimed.id == rec.id
            assert left is not None and left.status == "DELETED"
            store.erase(rec.id, ("DELETED",))
        else:
            assert left is None


# --------------------------------------------------------------------------- claims


def test_concurrent_claims_never_share_a_job(any_store):
    store = any_store
    ids = []
    for _ in range(200):
        rec = new_record()
        assert store.create(rec, 0)
        ids.append(rec.id)
    claimed = {f"node-{n}": [] for n in range(4)}
    errors = []

    def claimer(node):
        try:
            while True:
                rec = store.claim(node, now_ms(), LEASE_MS)
                if rec is None:
                    return
                assert rec.status == "RUNNING" and rec.node == node and rec.attempts == 1
                claimed[node].append(rec.id)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    race(*(lambda n=n: claimer(n) for n in claimed))
    assert errors == []
    every = [job_id for got in claimed.values() for job_id in got]
    assert len(every) == len(set(every)), "a job was claimed twice"
    assert sorted(every) == sorted(ids), "every job is claimed exactly once"
    assert store.counts_by_status() == {"RUNNING": 200}
    for node, got in claimed.items():
        for job_id in got:
            assert store.peek(job_id).node == node


def test_claim_takes_the_oldest_first(any_store):
    store = any_store
    ids = [new_record() for _ in range(5)]
    for rec in ids:
        assert store.create(rec, 0)
    got = [store.claim(NODE, now_ms(), LEASE_MS).id for _ in ids]
    assert got == [rec.id for rec in ids]
    assert store.claim(NODE, now_ms(), LEASE_MS) is None


def test_claim_only_for_the_given_services(any_store):
    store = any_store
    other = new_record(service="XOther")
    mine = new_record(service="XDemo")
    assert store.create(other, 0) and store.create(mine, 0)
    assert store.claim(NODE, now_ms(), LEASE_MS, services=["XDemo"]).id == mine.id
    assert store.claim(NODE, now_ms(), LEASE_MS, services=["XDemo"]) is None
    assert store.peek(other.id).status == "QUEUING"


def test_claim_sets_node_start_and_lease(any_store):
    store = any_store
    rec = new_record()
    rec.queued_at = 900_000
    assert store.create(rec, 0)
    got = store.claim("n1", 1_000_000, 5000)
    assert (got.status, got.node, got.started_at, got.lease_until, got.attempts) == (
        "RUNNING",
        "n1",
        1_000_000,
        1_005_000,
        1,
    )
    assert store.peek(rec.id).lease_until == 1_005_000


def test_a_claim_never_starts_a_job_before_it_was_queued(any_store):
    """Each process reads the database's clock as its own estimate: a claim whose time
    reads a few ms before the start's still starts the job at its queueing, never
    before (OGC API – Processes' ``started`` is never before ``created``)."""
    store = any_store
    rec = new_record()
    rec.queued_at = 1_000_000
    assert store.create(rec, 0)
    got = store.claim("n1", 999_994, 5000)
    assert (got.started_at, got.queued_at) == (1_000_000, 1_000_000)
    assert store.peek(rec.id).started_at == 1_000_000


# --------------------------------------------------------------------------- max_queued


def test_create_refuses_past_max_queued(any_store):
    store = any_store
    made = [new_record() for _ in range(3)]
    for rec in made:
        assert store.create(rec, 3)
    extra = new_record()
    assert not store.create(extra, 3), "a fourth queued job is one past max_queued"
    assert store.get(extra.id) is None
    # Only QUEUING jobs count: once one runs, there is room again.
    claim_exactly(store, made[0].id)
    assert store.create(extra, 3)
    assert store.counts_by_status() == {"RUNNING": 1, "QUEUING": 3}
    assert not store.create(new_record(), 3)


def test_max_queued_zero_means_no_limit(any_store):
    store = any_store
    for _ in range(5):
        assert store.create(new_record(), 0)
    assert store.counts_by_status() == {"QUEUING": 5}


def test_concurrent_creates_never_pass_max_queued(any_store):
    store = any_store
    limit = 10
    for _ in range(3 if store.dialect == "sqlite" else 5):
        outcomes = race(*(lambda: store.create(new_record(), limit) for _ in range(3 * limit)))
        for outcome in outcomes:
            assert isinstance(outcome, bool), outcome
        queued = store.counts_by_status().get("QUEUING", 0)
        assert queued <= limit, f"{queued} jobs queued with max_queued = {limit}"
        assert outcomes.count(True) == limit
        # empty the queue for the next round
        while store.claim(NODE, now_ms(), LEASE_MS) is not None:
            pass


# --------------------------------------------------------------------------- retention

HOUR, MINUTE = 3600_000, 60_000
UNFETCHED, FETCHED = 48 * HOUR, 15 * MINUTE


def finished_job(store, finished_at, fetched_at=None, status="SUCCEEDED", service="XDemo"):
    rec = new_record(queued_at=finished_at - 1000, service=service)
    assert store.create(rec, 0)
    claim_exactly(store, rec.id, now=finished_at - 500)
    outcome = {"result": "{}"} if status == "SUCCEEDED" else {"fault": "{}"}
    assert store.finish(rec.id, status, finished_at, **outcome)
    if fetched_at is not None:
        store.mark_fetched(rec.id, fetched_at)
    return rec.id


def test_erase_expired_respects_fetched_and_unfetched_retention(any_store):
    store = any_store
    now = now_ms()
    old_unfetched = finished_job(store, now - UNFETCHED - 1000)
    old_unfetched_failed = finished_job(store, now - UNFETCHED - 1000, status="FAILED")
    young_unfetched = finished_job(store, now - UNFETCHED + MINUTE)
    # finished long ago but fetched recently: the fetched retention counts from the fetch
    old_recently_fetched = finished_job(store, now - UNFETCHED - HOUR, fetched_at=now - 10 * MINUTE)
    fetched_long_ago = finished_job(store, now - HOUR, fetched_at=now - FETCHED - 1000)
    fetched_just_now = finished_job(store, now - HOUR, fetched_at=now - MINUTE)
    # active and deleted jobs are never erased by retention, however old
    ancient = now - 30 * 24 * HOUR
    running = new_record(queued_at=ancient)
    deleted = new_record(queued_at=ancient)
    assert store.create(running, 0) and store.create(deleted, 0)
    claim_exactly(store, running.id, now=ancient)
    claim_exactly(store, deleted.id, now=ancient)
    assert store.mark_deleted(deleted.id)
    queued = new_record(queued_at=ancient)
    assert store.create(queued, 0)

    assert store.erase_expired(now, UNFETCHED, FETCHED, 1000) == 3
    gone = {old_unfetched, old_unfetched_failed, fetched_long_ago}
    kept = {
        young_unfetched,
        old_recently_fetched,
        fetched_just_now,
        queued.id,
        running.id,
        deleted.id,
    }
    for job_id in gone:
        assert store.get(job_id) is None
    for job_id in kept:
        assert store.get(job_id) is not None
    assert store.erase_expired(now, UNFETCHED, FETCHED, 1000) == 0


def test_erase_expired_uses_the_settings_of_each_run(any_store):
    store = any_store
    now = now_ms()
    job = finished_job(store, now - 2 * HOUR)
    fetched = finished_job(store, now - 2 * HOUR, fetched_at=now - 10 * MINUTE)
    assert store.erase_expired(now, UNFETCHED, FETCHED, 100) == 0
    # the administrator shortens both retentions: the stored jobs expire now
    assert store.erase_expired(now, HOUR, 5 * MINUTE, 100) == 2
    assert store.get(job) is None and store.get(fetched) is None


def test_erase_expired_zero_retention_keeps_for_ever(any_store):
    store = any_store
    now = now_ms()
    unfetched = finished_job(store, now - 365 * 24 * HOUR)
    fetched = finished_job(store, now - 365 * 24 * HOUR, fetched_at=now - 300 * 24 * HOUR)
    assert store.erase_expired(now, 0, 0, 100) == 0
    assert store.erase_expired(now, 0, FETCHED, 100) == 1
    assert store.get(fetched) is None and store.get(unfetched) is not None
    assert store.erase_expired(now, UNFETCHED, 0, 100) == 1
    assert store.get(unfetched) is None


def test_erase_expired_batch_limit(any_store):
    store = any_store
    now = now_ms()
    expired = [finished_job(store, now - UNFETCHED - 1000 - i) for i in range(5)]
    young = finished_job(store, now - MINUTE)
    assert [store.erase_expired(now, UNFETCHED, FETCHED, 2) for _ in range(4)] == [2, 2, 1, 0]
    assert all(store.get(job_id) is None for job_id in expired)
    assert store.get(young) is not None


def test_erase_expired_by_service(any_store):
    store = any_store
    now = now_ms()
    demo = finished_job(store, now - UNFETCHED - 1000, service="XDemo")
    other = finished_job(store, now - UNFETCHED - 1000, service="XOther")
    assert store.erase_expired(now, UNFETCHED, FETCHED, 100, exclude=["XDemo"]) == 1
    assert store.get(other) is None and store.get(demo) is not None
    assert store.erase_expired(now, UNFETCHED, FETCHED, 100, services=["XOther"]) == 0
    assert store.erase_expired(now, UNFETCHED, FETCHED, 100, services=["XDemo"]) == 1


def test_mark_fetched_keeps_the_first_stamp(any_store):
    store = any_store
    job_id = finished_job(store, now_ms() - 1000)
    store.mark_fetched(job_id, 111)
    store.mark_fetched(job_id, 222)
    assert store.get(job_id).first_fetched_at == 111


# --------------------------------------------------------------------------- restarts


def attempts_fault(attempts):
    return fault_json(InternalErrorFault(f"the job's node died under it {attempts} times"))


def test_recover_requeues_the_running_jobs_of_a_dead_node(any_store):
    store = any_store
    dead, alive = "dead-node", "alive-node"
    mine = []
    for _ in range(3):
        rec = new_record()
        assert store.create(rec, 0)
        claim_exactly(store, rec.id, node=dead)
        mine.append(rec.id)
    assert store.set_progress(mine[0], progress_json(1, 1))
    assert store.request_stop(mine[1])
    theirs = new_record()
    assert store.create(theirs, 0)
    claim_exactly(store, theirs.id, node=alive)
    gone = new_record()
    assert store.create(gone, 0)
    claim_exactly(store, gone.id, node=dead)
    assert store.mark_deleted(gone.id)

    found = store.recover(dead, now_ms(), 3, attempts_fault)
    assert sorted((r.id, r.requeued, r.attempts) for r in found) == sorted(
        (job_id, True, 1) for job_id in mine
    )
    for job_id in mine:
        rec = store.get(job_id)
        assert rec.status == "QUEUING"
        assert rec.node is None and rec.started_at is None and rec.lease_until is None
        assert rec.progress is None, "a re-run starts from the start"
        assert rec.attempts == 1
    assert store.get(gone.id) is None, "a deleted job of a dead node is erased"
    rec = store.get(theirs.id)
    assert rec.status == "RUNNING" and rec.node == alive
    assert store.recover(dead, now_ms(), 3, attempts_fault) == []


def test_recover_fails_a_job_after_max_attempts(any_store):
    store = any_store
    rec = new_record()
    assert store.create(rec, 0)
    asked = []

    def fault_for(attempts):
        asked.append(attempts)
        return attempts_fault(attempts)

    for attempt in (1, 2):
        claim_exactly(store, rec.id, node=f"node-{attempt}")
        [found] = store.recover(f"node-{attempt}", now_ms(), 3, fault_for)
        assert (found.id, found.requeued, found.attempts) == (rec.id, True, attempt)
        assert store.peek(rec.id).status == "QUEUING"
    claim_exactly(store, rec.id, node="node-3")
    when = now_ms()
    [found] = store.recover("node-3", when, 3, fault_for)
    assert (found.id, found.requeued, found.attempts) == (rec.id, False, 3)
    assert asked == [3]
    stored = store.get(rec.id)
    assert stored.status == "FAILED"
    assert stored.finished_at == when and stored.lease_until is None
    fault = codec.decode_fault(json.loads(stored.fault))
    assert type(fault) is InternalErrorFault
    assert "3 times" in fault.message


def test_recover_by_lease_takes_only_expired_leases(any_store):
    store = any_store
    expired, current = new_record(), new_record()
    assert store.create(expired, 0) and store.create(current, 0)
    store.claim("n1", 1_000, 1_000)  # lease until 2_000
    store.claim("n2", now_ms(), 60_000)
    found = store.recover(None, now_ms(), 3, attempts_fault)
    assert [(r.id, r.requeued) for r in found] == [(expired.id, True)]
    assert store.peek(expired.id).status == "QUEUING"
    assert store.peek(current.id).status == "RUNNING"


def test_concurrent_lease_recovery_recovers_each_job_once(any_store):
    store = any_store
    ids = []
    for _ in range(40):
        rec = new_record()
        assert store.create(rec, 0)
        store.claim("dead", 1_000, 1_000)
        ids.append(rec.id)
    results = race(*(lambda: store.recover(None, now_ms(), 3, attempts_fault) for _ in range(4)))
    for r in results:
        assert isinstance(r, list), r
    every = [found.id for r in results for found in r]
    assert sorted(every) == sorted(ids), "each lost job is recovered exactly once"
    assert store.counts_by_status() == {"QUEUING": 40}


def test_hand_back_does_not_count_the_attempt(any_store):
    store = any_store
    rec = new_record()
    assert store.create(rec, 0)
    for _ in range(5):
        got = claim_exactly(store, rec.id)
        assert got.attempts == 1
        assert store.set_progress(rec.id, progress_json(1, 1))
        assert store.hand_back(rec.id, NODE)
        back = store.get(rec.id)
        assert back.status == "QUEUING"
        assert back.attempts == 0
        assert back.node is None and back.started_at is None and back.lease_until is None
        assert back.progress is None
        assert back.request == "{}", "the job goes back untouched"
    claim_exactly(store, rec.id)
    [found] = store.recover(NODE, now_ms(), 2, attempts_fault)
    assert found.requeued, "handing back 5 times does not use up max_attempts"


def test_hand_back_of_a_stopping_job(any_store):
    store = any_store
    job_id = running_job(store)
    assert store.request_stop(job_id)
    assert store.hand_back(job_id, NODE)
    assert store.peek(job_id).status == "QUEUING"


def test_hand_back_only_by_the_node_holding_the_job(any_store):
    store = any_store
    job_id = running_job(store)
    assert not store.hand_back(job_id, "another-node")
    assert store.peek(job_id).status == "RUNNING"


def test_hand_back_of_a_deleted_job_erases_it(any_store):
    store = any_store
    job_id = running_job(store)
    assert store.mark_deleted(job_id)
    assert not store.hand_back(job_id, NODE)
    assert store.get(job_id) is None


def test_hand_back_of_a_finished_job_changes_nothing(any_store):
    store = any_store
    job_id = running_job(store)
    assert store.finish(job_id, "SUCCEEDED", now_ms(), result="{}")
    assert not store.hand_back(job_id, NODE)
    assert store.peek(job_id).status == "SUCCEEDED"


def test_renew_leases_of_a_node(any_store):
    store = any_store
    a, b, orphan = running_job(store), running_job(store), running_job(store)
    assert store.mark_deleted(b)
    before = store.peek(orphan).lease_until
    rows = store.renew_leases(NODE, 9_999_999_999_999, [a, b])
    assert sorted(rows) == sorted([(a, "RUNNING"), (b, "DELETED")])
    assert store.peek(a).lease_until == 9_999_999_999_999
    # a job of the node that no slot holds is not renewed: its lease runs out
    assert store.peek(orphan).lease_until == before
    assert store.renew_leases("nobody", 1, [a, b]) == []
    assert store.renew_leases(NODE, 1, []) == []


def test_writes_of_several_statements_wait_for_another_process_holding_the_lock(store, tmp_path):
    """On SQLite, lease renewal, recovery and hand-back begin with BEGIN IMMEDIATE; while
    another process holds the write lock they wait for it, as every other write does,
    instead of failing at once with "database is locked" (found by benchmarks/fuzz.py:
    under load the supervisor's housekeeping failed)."""
    job_id = running_job(store)
    other = sqlite3.connect(str(tmp_path / "db"), isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, other.execute, ("COMMIT",))
    release.start()
    try:
        assert store.renew_leases(NODE, 9_999_999_999_999, [job_id]) == [(job_id, "RUNNING")]
        assert store.hand_back(job_id, NODE)
    finally:
        release.join()
        other.close()


def test_fail_timed_out_queued(any_store):
    store = any_store
    now = now_ms()
    own_short = new_record(queued_at=now - 2000, queueing_timeout=1000)
    own_long = new_record(queued_at=now - 2000, queueing_timeout=10_000)
    default = new_record(queued_at=now - 6000)
    fresh = new_record(queued_at=now - 100)
    for rec in (own_short, own_long, default, fresh):
        assert store.create(rec, 0)
    fault = fault_json(InternalErrorFault("queued too long"))
    assert sorted(store.fail_timed_out_queued(now, 5000, fault)) == sorted(
        [own_short.id, default.id]
    )
    for rec in (own_short, default):
        stored = store.get(rec.id)
        assert stored.status == "FAILED" and stored.fault == fault and stored.finished_at == now
    assert store.peek(own_long.id).status == "QUEUING"
    assert store.peek(fresh.id).status == "QUEUING"
    assert store.fail_timed_out_queued(now, 0, fault) == []


def test_fail_timed_out_queued_never_lengthens_the_configured_timeout(any_store):
    """A request may shorten its queueing timeout, never lengthen it past the configured
    one (docs/protocol.md §5): asking for more, or for 0 ("none"), leaves the configured one."""
    store = any_store
    now = now_ms()
    longer = new_record(queued_at=now - 6000, queueing_timeout=60_000)
    zero = new_record(queued_at=now - 6000, queueing_timeout=0)
    shorter = new_record(queued_at=now - 2000, queueing_timeout=1000)
    for rec in (longer, zero, shorter):
        assert store.create(rec, 0)
    failed = store.fail_timed_out_queued(now, 5000, fault_json(InternalErrorFault("late")))
    assert sorted(failed) == sorted([longer.id, zero.id, shorter.id])
    for rec in (longer, zero, shorter):
        assert store.peek(rec.id).status == "FAILED"


def test_large_payloads_round_trip(any_store):
    store = any_store
    job_id = running_job(store)
    big = json.dumps({"payload": "x" * 100_000})
    assert store.finish(job_id, "SUCCEEDED", now_ms(), result=big)
    assert store.get(job_id).result == big
    assert store.peek(job_id).result is None, "peek does not read the result"
