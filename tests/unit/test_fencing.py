"""Fenced writes (docs/protocol.md §15): a run whose lease ran out, and whose
job another run took over, can change nothing of it, on SQLite and PostgreSQL.

The story of each test: node A takes the job (attempt 1) and stops renewing (cut off);
the job's lease runs out; recovery queues it again and node B (or A itself, in another
slot) takes it (attempt 2). Then A's delayed writes land."""

import pytest

from xruntime.store import JobRecord, Run, now_ms

from .helpers import new_record, progress_json

A, B = "node-a:50000", "node-b:50000"
LEASE_MS = 30_000


def attempts_fault(attempts):
    return '{"message": "lost", "faultInfo": {"$type": "InternalErrorFault"}}'


def taken_over(store, by=B):
    """A job A ran (attempt 1) and lost, now run by ``by`` (attempt 2): both runs."""
    rec = new_record()
    assert store.create(rec, 0)
    first = store.claim(A, now_ms(), LEASE_MS)
    assert first.id == rec.id and first.attempts == 1
    [lost] = store.recover(None, now_ms() + LEASE_MS + 1, 3, attempts_fault)
    assert lost.requeued
    second = store.claim(by, now_ms(), LEASE_MS)
    assert second.id == rec.id and second.attempts == 2
    return rec.id, Run(A, 1), Run(by, 2)


@pytest.mark.parametrize("by", [B, A])
def test_a_lost_run_cannot_finish_the_job(any_store, by):
    job_id, lost, holder = taken_over(any_store, by)
    assert not any_store.finish(job_id, "SUCCEEDED", now_ms(), result='{"from": "lost"}', run=lost)
    assert not any_store.finish(job_id, "FAILED", now_ms(), fault=attempts_fault(1), run=lost)
    assert any_store.peek(job_id).status == "RUNNING"
    assert any_store.finish(job_id, "SUCCEEDED", now_ms(), result='{"from": "holder"}', run=holder)
    assert any_store.get(job_id).result == '{"from": "holder"}'


def test_a_lost_run_cannot_finish_the_job_with_a_large_result(any_store):
    """A result over 64 kB goes into a row of its own in the finishing transaction:
    a lost run's leaves none, and the holder's is the one read back."""
    import json
    import random

    from xruntime.payload.form import pack

    rng = random.Random(9)
    large = {
        who: json.dumps({"d": [rng.randrange(2**31) for _ in range(60_000)]}, separators=(",", ":"))
        for who in ("lost", "holder")
    }
    job_id, lost, holder = taken_over(any_store)
    assert len(pack(large["lost"])) > 64 * 1024
    assert not any_store.finish(job_id, "SUCCEEDED", now_ms(), result=large["lost"], run=lost)
    assert any_store.peek(job_id).status == "RUNNING"
    assert any_store.finish(job_id, "SUCCEEDED", now_ms(), result=large["holder"], run=holder)
    assert any_store.get(job_id).result == large["holder"]


def test_a_lost_run_cannot_write_progress_retry_or_hand_back(any_store):
    job_id, lost, holder = taken_over(any_store)
    assert not any_store.set_progress(job_id, progress_json(1, 1), run=lost)
    assert not any_store.retry(job_id, 1000, "retry", run=lost)
    assert not any_store.hand_back(job_id, A, run=lost)
    rec = any_store.get(job_id)
    assert (rec.status, rec.node, rec.attempts, rec.progress) == ("RUNNING", B, 2, None)
    assert any_store.set_progress(job_id, progress_json(1, 1), run=holder)
    assert any_store.retry(job_id, 1000, "retry", run=holder)


def test_a_lost_run_cannot_start_children(any_store):
    job_id, lost, holder = taken_over(any_store, by=A)
    child = JobRecord(
        id="0c0c0c0c-0000-4000-8000-000000000001",
        service="XDemo",
        operation="startSimulate",
        fetch_type="SimulateResponse",
        status="QUEUING",
        request="{}",
        queued_at=now_ms(),
    )
    assert (
        any_store.suspend(job_id, A, 0, False, [child], progress_json(1, 0), "waiting", run=lost)
        is False
    )
    assert any_store.get(child.id) is None
    assert (
        any_store.suspend(job_id, A, 0, False, [child], progress_json(1, 0), "waiting", run=holder)
        == "RUNNING"
    )
    assert any_store.get(child.id).status == "QUEUING"


def test_the_run_holding_the_job_writes_as_before(any_store):
    rec = new_record()
    assert any_store.create(rec, 0)
    run = Run(A, any_store.claim(A, now_ms(), LEASE_MS).attempts)
    assert any_store.set_progress(rec.id, progress_json(1, 1), run=run)
    assert any_store.finish(rec.id, "SUCCEEDED", now_ms(), result="{}", run=run)
