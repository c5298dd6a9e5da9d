"""Callbacks that no receiver can hold, and an outbox that stays bounded (issue 32,
items 1 and 2), without a node: an attempt's one deadline against a receiver that
trickles its answer, a shutdown cutting an attempt and writing it, the caps per owner
and per target, and the outbox on SQLite and PostgreSQL (one waiting progress event
per job, owners round robin, one event of a job at a time, failed attempts in one
history row, the outbox in the owner's stored bytes, older databases upgraded)."""

import json
import threading
import time

import pytest

from tests.receiver import HostileReceiver
from tests.unit.test_callbacks import SECRET, allowed, due_now, progress, running_job
from xruntime.callbacks import sending, targets
from xruntime.callbacks.delivery import (
    CallbackDelivery,
    _Caps,
    lease_ms_of,
    message_id,
    share_of,
    target_key,
)
from xruntime.settings.config import CallbackSettings, Settings
from xruntime.store import CallbackAttempt, now_ms, open_store
from xruntime.store.schema import OUTBOX_ROW_BYTES


def test_an_attempt_has_one_deadline_whatever_the_receiver_trickles():
    receiver = HostileReceiver(every=0.2)
    connections = sending.Connections()
    try:
        target = targets.target_of(receiver.url, allowed("127.0.0.1"))
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            connections.post(target, {"webhook-id": "x-1"}, b"{}", 1.0)
        took = time.monotonic() - began
        # a byte every 0.2 s kept each read under a 1 s timeout: it held the sender for ever
        assert 0.9 <= took < 10, took
    finally:
        connections.close()
        receiver.close()


def test_interrupt_cuts_an_attempt_under_way_and_refuses_the_next():
    receiver = HostileReceiver(every=None)
    connections = sending.Connections()
    errors = []

    def attempt():
        try:
            connections.post(target, {"webhook-id": "x-1"}, b"{}", 60)
        except Exception as exc:
            errors.append(exc)

    try:
        target = targets.target_of(receiver.url, allowed("127.0.0.1"))
        thread = threading.Thread(target=attempt)
        thread.start()
        receiver.wait_requests(1)
        connections.interrupt()
        thread.join(10)
        assert not thread.is_alive()
        (error,) = errors
        assert isinstance(error, sending.Interrupted)
        assert str(error) == "interrupted by the node's shutdown"
        with pytest.raises(sending.Interrupted):
            connections.post(target, {"webhook-id": "x-2"}, b"{}", 60)
    finally:
        connections.close()
        receiver.close()


# --------------------------------------------------------------------------- caps


def event_of(seq, owner, url, job_seq=None):
    from xruntime.store import CallbackEvent

    return CallbackEvent(
        seq, f"job-{seq}", job_seq or seq, owner, url, "job.finished", "SUCCEEDED", 0, None, 0, 0
    )


def test_caps_per_owner_and_per_target_count_what_runs_here():
    assert [share_of(n) for n in (1, 3, 4, 16, 100)] == [1, 1, 1, 4, 25]
    assert lease_ms_of(10_000) > 10_000  # an attempt ends before its lease does
    assert target_key("https://Hooks.Example.org/x") == "hooks.example.org:443"
    assert target_key("http://a.example.org:8080/x?y") == "a.example.org:8080"
    running = {1: (event_of(1, "alice", "http://slow.example.org/a"), 0)}
    caps = _Caps(2, running)
    assert not caps.admit(event_of(1, "alice", "http://slow.example.org/a"))  # under way
    assert caps.admit(event_of(2, "alice", "http://slow.example.org/b"))
    assert not caps.admit(event_of(3, "alice", "http://other.example.org/"))  # alice: 2
    assert not caps.admit(event_of(4, "bob", "http://slow.example.org/"))  # target: 2
    assert caps.admit(event_of(5, "bob", "http://other.example.org/"))


# --------------------------------------------------------------------------- the outbox


@pytest.fixture
def store(any_store):
    """The store on SQLite, and on PostgreSQL when XRUNTIME_TEST_DATABASE_URL is set."""
    return any_store


def finished_job(store, owner="", url="http://127.0.0.1:9/h"):
    job_id, run = running_job(store, url, owner=owner)
    assert store.finish(job_id, "SUCCEEDED", now_ms(), result="{}", run=run)
    return job_id


def set_progress_later(store, job_id, n, run):
    """Progress ``n``, a millisecond past the last (the job's period is 1 ms)."""
    time.sleep(0.003)
    assert store.set_progress(job_id, progress(n), run)


def callback_rows(store, job_id):
    return [e["message"] for e in store.events(job_id)[1] if e["message"].startswith("callback")]


def test_a_newer_progress_event_takes_the_waiting_one_s_place(store):
    job_id, run = running_job(store, period=1)
    for n in range(5, 0, -1):
        set_progress_later(store, job_id, n, run)
    assert store.pending_callbacks(job_id) == 1  # not five
    ((event, lease),) = store.claim_callbacks("n1", due_now(store), 20_000, 10)
    assert json.loads(event.progress)["remaining"] == 1  # the newest
    retry_at = now_ms() + 60_000
    failed = CallbackAttempt(event, lease, "callback job.progress: HTTP 500 (attempt 1)", retry_at)
    assert store.callbacks_attempted("n1", [failed]) == [True]
    set_progress_later(store, job_id, 0, run)
    assert store.pending_callbacks(job_id) == 1
    # the newer one waits where the one it replaced waited: its retry is not brought forward
    assert store.claim_callbacks("n1", due_now(store), 20_000, 10) == []
    ((newer, lease),) = store.claim_callbacks("n1", retry_at, 20_000, 10)
    assert json.loads(newer.progress)["remaining"] == 0 and newer.attempts == 1
    assert message_id(newer) != message_id(event)  # a new event: a receiver does not drop it
    again = CallbackAttempt(newer, lease, "callback job.progress: HTTP 500 (attempt 2)", retry_at)
    assert store.callbacks_attempted("n1", [again]) == [True]
    # its failed attempts, the replaced event's included, are one row of the history
    assert callback_rows(store, job_id) == ["callback job.progress: HTTP 500 (attempt 2)"]


def test_a_job_s_events_go_one_at_a_time(store):
    job_id, run = running_job(store, period=1)
    set_progress_later(store, job_id, 3, run)
    ((first, lease),) = store.claim_callbacks("n1", due_now(store), 20_000, 10)
    set_progress_later(store, job_id, 2, run)  # while the first is being delivered
    set_progress_later(store, job_id, 1, run)
    assert store.pending_callbacks(job_id) == 2  # the one in flight, the newest
    assert store.claim_callbacks("n2", due_now(store), 20_000, 10) == []
    delivered = CallbackAttempt(first, lease, "callback: HTTP 204 (attempt 1)", None)
    assert store.callbacks_attempted("n1", [delivered]) == [True]
    ((second, _),) = store.claim_callbacks("n2", due_now(store), 20_000, 10)
    assert json.loads(second.progress)["remaining"] == 1


def test_a_claim_takes_owners_round_robin_and_leaves_what_admit_refuses(store):
    alice = [finished_job(store, "alice") for _ in range(6)]
    bob = finished_job(store, "bob")  # after all of alice's
    taken = store.claim_callbacks("n1", due_now(store), 20_000, 2)
    assert sorted(event.job_id for event, _ in taken) == sorted([alice[0], bob])
    carol = finished_job(store, "carol")
    taken = store.claim_callbacks(
        "n1", due_now(store), 20_000, 10, admit=lambda event: event.owner != "alice"
    )
    assert [event.job_id for event, _ in taken] == [carol]
    assert store.pending_callbacks() == 8


def test_failed_attempts_are_one_history_row_and_the_end_another(store):
    job_id = finished_job(store)
    at = due_now(store)
    for attempt in range(1, 4):
        ((event, lease),) = store.claim_callbacks("n1", at, 20_000, 10)
        assert event.attempts == attempt - 1
        at = now_ms() + 60_000
        failed = CallbackAttempt(event, lease, f"callback: HTTP 500 (attempt {attempt})", at)
        assert store.callbacks_attempted("n1", [failed]) == [True]
        assert callback_rows(store, job_id) == [f"callback: HTTP 500 (attempt {attempt})"]
    ((event, lease),) = store.claim_callbacks("n1", at, 20_000, 10)
    done = CallbackAttempt(event, lease, "callback: HTTP 204 (attempt 4)", None)
    assert store.callbacks_attempted("n1", [done]) == [True]
    assert callback_rows(store, job_id) == [
        "callback: HTTP 500 (attempt 3)",
        "callback: HTTP 204 (attempt 4)",
    ]


def test_the_outbox_counts_in_its_owner_s_stored_bytes(store):
    url = "http://127.0.0.1:9/" + "x" * 500
    finished_job(store, "alice", url)
    with_outbox = store.stored_bytes("alice")
    ((event, lease),) = store.claim_callbacks("n1", due_now(store), 20_000, 10)
    store.callbacks_attempted("n1", [CallbackAttempt(event, lease, "callback: HTTP 204", None)])
    assert with_outbox - store.stored_bytes("alice") == len(url) + OUTBOX_ROW_BYTES
    assert store.stored_bytes("bob") == 0


def test_an_older_outbox_gets_its_history_row_column(store):
    from sqlalchemy import inspect, text

    url = store.engine.url
    with store.engine.begin() as conn:
        if store.dialect == "sqlite":  # (its triggers name the column)
            conn.execute(text("DROP TRIGGER callback_progress"))
        conn.execute(text("DROP INDEX ix_callback_outbox_owner"))
        conn.execute(text("ALTER TABLE callback_outbox DROP COLUMN history_seq"))
        conn.execute(text("DROP TABLE alembic_version"))  # (made before schema versions)
    store.close()
    reopened = open_store(url.render_as_string(hide_password=False))
    try:
        columns = {c["name"] for c in inspect(reopened.engine).get_columns("callback_outbox")}
        indexes = {i["name"] for i in inspect(reopened.engine).get_indexes("callback_outbox")}
        assert "history_seq" in columns and "ix_callback_outbox_owner" in indexes
    finally:
        reopened.close()


# --------------------------------------------------------------------------- closing


def test_close_cuts_a_hung_attempt_and_writes_it_as_a_failed_one(tmp_path):
    receiver = HostileReceiver(every=None)
    store = open_store(f"sqlite:///{tmp_path}/store.db")
    settings = Settings(
        callbacks=CallbackSettings(
            allowed=allowed("127.0.0.1"), secret=SECRET, timeout_ms=60_000, retry_delay_ms=1000
        )
    )
    delivery = CallbackDelivery(store, lambda: settings, "n1")
    try:
        job_id = finished_job(store, url=receiver.url)
        delivery.start()
        receiver.wait_requests(1)
        began = time.monotonic()
        delivery.close()
        assert time.monotonic() - began < 5  # CLOSE_WAIT_S: the attempt was cut at once
        (row,) = callback_rows(store, job_id)
        assert "interrupted by the node's shutdown (attempt 1 of 12; next in 1 s)" in row, row
        assert store.pending_callbacks(job_id) == 1  # due again, not held by a lease
        ((event, _),) = store.claim_callbacks("n2", now_ms() + 60_000, 20_000, 10)
        assert event.attempts == 1
    finally:
        receiver.close()
        store.close()
