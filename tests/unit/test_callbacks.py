"""Callbacks without a node (docs/protocol.md §14): which targets may be called, the
signature as a Standard Webhooks receiver checks it (and as xruntime computed it by hand
before), and the outbox as the store keeps it on SQLite and PostgreSQL (written with the
change, taken by one node at a time)."""

import base64
import hashlib
import hmac
import json
import threading
import time
import uuid

import pytest
import standardwebhooks

from xruntime.callbacks import sending, signing, targets
from xruntime.callbacks.delivery import body_of, message_id
from xruntime.protocol.faults import InvalidValueFault
from xruntime.settings.config import CallbackSettings, Settings
from xruntime.settings.values import WEBHOOK_SECRET, callback_target
from xruntime.store import CallbackAttempt, JobRecord, Run, now_ms
from xruntime.store.clock import MAX_ROUND_TRIP_S

SECRET = "whsec_" + "a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleQ=="  # 32 bytes


def allowed(*entries):
    return tuple(callback_target(entry) for entry in entries)


def resolving(table):
    """A resolver answering ``table[host]`` (a list of addresses)."""
    return lambda host, port: table.get(host, [host])


# --------------------------------------------------------------------------- targets


@pytest.mark.parametrize(
    "url, rules",
    [
        ("https://hooks.example.org/xr/done", ("https://hooks.example.org/xr/",)),
        ("https://hooks.example.org/xr", ("https://hooks.example.org/xr",)),
        ("https://hooks.example.org/xr?job=1", ("https://hooks.example.org/xr",)),
        ("http://hooks.example.org:8080/any", ("hooks.example.org",)),
        ("https://a.b.example.org/", (".example.org",)),
        ("http://10.1.2.3/hook", ("10.1.2.0/24",)),
        ("http://127.0.0.1:9/hook", ("http://127.0.0.1:9/",)),
        ("http://[::1]:9/hook", ("::1",)),
    ],
)
def test_a_listed_target_is_called_at_the_addresses_checked(url, rules):
    table = {"hooks.example.org": ["93.184.216.34"], "a.b.example.org": ["93.184.216.35"]}
    target = targets.target_of(url, allowed(*rules), resolving(table))
    assert target.addresses and target.host in url


@pytest.mark.parametrize(
    "url, rules, why",
    [
        ("https://hooks.example.org/x", (), "lists no target"),
        ("ftp://hooks.example.org/x", ("hooks.example.org",), "only http and https"),
        ("https://evil.org/x", ("hooks.example.org",), "not among the targets"),
        ("https://hooks.example.org.evil.org/", ("https://hooks.example.org/",), "not among"),
        ("https://hooks.example.org/xr-evil", ("https://hooks.example.org/xr",), "not among"),
        ("https://hooks.example.org:444/xr/", ("https://hooks.example.org/xr/",), "not among"),
        ("https://u:p@hooks.example.org/", ("hooks.example.org",), "credentials"),
        # a listed name that resolves to a private, loopback or link-local address
        ("http://inside.example.org/", ("inside.example.org",), "10.0.0.5"),
        ("http://localhost:9/", ("localhost",), "127.0.0.1"),
        ("http://metadata.example.org/", (".example.org",), "169.254.169.254"),
        ("http://mixed.example.org/", ("mixed.example.org",), "192.168.1.1"),
    ],
)
def test_a_target_not_listed_or_resolving_inside_is_refused(url, rules, why):
    table = {
        "hooks.example.org": ["93.184.216.34"],
        "inside.example.org": ["10.0.0.5"],
        "localhost": ["127.0.0.1"],
        "metadata.example.org": ["169.254.169.254"],
        "mixed.example.org": ["93.184.216.34", "192.168.1.1"],
    }
    with pytest.raises(targets.TargetRefused, match=why):
        targets.target_of(url, allowed(*rules), resolving(table))


def test_a_private_address_is_called_when_a_network_listed_holds_it():
    rules = allowed("inside.example.org", "10.0.0.0/8")
    target = targets.target_of(
        "http://inside.example.org/", rules, resolving({"inside.example.org": ["10.0.0.5"]})
    )
    assert target.addresses == ("10.0.0.5",)


def test_the_start_names_the_parameter_and_the_key_to_set():
    off = Settings()
    with pytest.raises(InvalidValueFault) as caught:
        targets.check_callback("http://127.0.0.1:9/", None, off, "")
    assert caught.value.parameter == "callback.url"
    assert "[callbacks] allowed" in caught.value.hint
    no_secret = Settings(callbacks=CallbackSettings(allowed=allowed("127.0.0.1")))
    with pytest.raises(InvalidValueFault) as caught:
        targets.check_callback("http://127.0.0.1:9/", None, no_secret, "")
    assert caught.value.parameter == "callback" and "[callbacks] secret" in caught.value.message
    with pytest.raises(InvalidValueFault) as caught:
        targets.check_callback("http://127.0.0.1:9/", 999, no_secret, "")
    assert caught.value.parameter == "callback.progressPeriod"


# --------------------------------------------------------------------------- signing


def test_the_signature_is_what_a_standard_webhooks_receiver_verifies():
    body = b'{"type":"job.finished","id":"x","status":"SUCCEEDED","elapsedTime":5}'
    timestamp = int(time.time())
    headers = {
        "webhook-id": "x-1",
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signing.signature(SECRET, "x-1", timestamp, body),
    }
    assert standardwebhooks.Webhook(SECRET).verify(body, headers)["id"] == "x"
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        standardwebhooks.Webhook(SECRET).verify(body.replace(b"5", b"6"), headers)


def _signature_before(secret, message_id, timestamp, body):
    """The signature as xruntime computed it before ``standardwebhooks`` signed for it
    (engine/webhooks.py until issue 32): Standard Webhooks' scheme, by hand."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


@pytest.mark.parametrize("size", [24, 25, 26, 32, 33, 64])  # the key's bytes the settings take
def test_standardwebhooks_signs_as_xruntime_did(size):
    """The same ``webhook-signature`` as before, byte for byte: any secret the settings
    accept (padded base64 of 24 to 64 bytes), bodies with non-ASCII characters, any id and
    timestamp."""
    key = bytes((n * 37 + size) % 256 for n in range(size))
    secret = "whsec_" + base64.b64encode(key).decode("ascii")
    assert WEBHOOK_SECRET.check(secret) == secret  # one the settings accept
    for body in (
        b"",
        b'{"type":"job.finished"}',
        '{"x":"été ✓ 😀"}'.encode(),
        bytes(range(32, 127)),
    ):
        for timestamp in (0, 1, 1_700_000_000, 4_102_444_800):
            for message in ("x-1", f"{uuid.uuid4()}-42", "é"):
                assert signing.signature(secret, message, timestamp, body) == _signature_before(
                    secret, message, timestamp, body
                )


# --------------------------------------------------------------------------- sending


def test_callbacks_to_one_address_share_a_connection_and_outlive_its_close():
    from tests.processes import tcp_sockets
    from tests.receiver import Receiver

    receiver = Receiver()
    connections = sending.Connections()
    target = targets.target_of(receiver.url, allowed("127.0.0.1"))
    try:
        for n in range(5):
            assert connections.post(target, {"webhook-id": f"x-{n}"}, b"{}", 5) == 204
        established = [s for s in tcp_sockets(receiver.port) if s[1] == "01"]
        assert len(established) == 1  # the receiver accepted one connection for the five
        receiver.stop()  # closes the kept connection: the next attempt opens another
        receiver = Receiver(port=receiver.port)
        assert connections.post(target, {"webhook-id": "x-5"}, b"{}", 5) == 204
        (got,) = receiver.wait_for(lambda received: received)  # (it records after answering)
        assert got.headers["webhook-id"] == "x-5"
    finally:
        connections.close()
        receiver.stop()


# --------------------------------------------------------------------------- the outbox


@pytest.fixture
def store(any_store):
    """The store on SQLite, and on PostgreSQL when XRUNTIME_TEST_DATABASE_URL is set."""
    return any_store


def running_job(store, callback_url="http://127.0.0.1:9/h", period=None, owner=""):
    """A job of ``owner`` with a callback, claimed: (its id, its run)."""
    job_id = str(uuid.uuid4())
    record = JobRecord(
        id=job_id,
        service="XDemo",
        operation="simulate",
        fetch_type="SimulateResponse",
        status="QUEUING",
        request="{}",
        queued_at=now_ms(),
        owner=owner,
        callback_url=callback_url,
        callback_period=period,
    )
    assert store.create(record, 0)
    claimed = store.claim("n1", now_ms(), 30_000)
    assert claimed.id == job_id
    return job_id, Run("n1", claimed.attempts)


def progress(n):
    return json.dumps({"$type": "BulkProgress", "remaining": n, "successful": 0, "failed": 0})


def test_a_job_s_end_writes_its_event_with_it_and_drops_progress_not_taken(store):
    job_id, run = running_job(store, period=1000)
    assert store.set_progress(job_id, progress(3), run)
    assert store.set_progress(job_id, progress(2), run)  # within the period: no event
    assert store.pending_callbacks(job_id) == 1
    assert store.finish(job_id, "SUCCEEDED", now_ms(), result="{}", progress=progress(0), run=run)
    ((event, _lease),) = store.claim_callbacks("n1", due_now(store), 20_000, 10)
    assert (event.type, event.status, event.job_id) == ("job.finished", "SUCCEEDED", job_id)
    assert json.loads(body_of(event))["progress"]["remaining"] == 0
    silent, _ = running_job(store, callback_url=None)
    assert store.finish(silent, "FAILED", now_ms(), fault='{"faultInfo": {}}', run=run)
    assert store.pending_callbacks(silent) == 0


def due_now(store):
    """A time every event written before now is due by: on PostgreSQL ``now_ms()`` is this
    process's estimate of the database's clock, which may trail the trigger's own reading
    of it by up to half a round trip (the delivery loop waits until an event is due by
    the estimate: only a claim at once, as here, may find it not due)."""
    return now_ms() + int(MAX_ROUND_TRIP_S * 1000)


def test_a_failed_recovery_writes_the_event_too(store):
    job_id, _ = running_job(store)
    store.recover("n1", now_ms(), 1, lambda lost: '{"faultInfo": {"$type": "InternalErrorFault"}}')
    ((event, _),) = store.claim_callbacks("n2", due_now(store), 20_000, 10)
    assert (event.job_id, event.status) == (job_id, "FAILED")


def test_an_event_is_taken_by_one_node_and_its_attempts_are_in_the_history(store):
    job_id, run = running_job(store)
    store.finish(job_id, "SUCCEEDED", now_ms(), result="{}", run=run)
    taken = []

    at = due_now(store)

    def take(node):
        taken.extend(store.claim_callbacks(node, at, 20_000, 10))

    threads = [threading.Thread(target=take, args=(f"n{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ((event, lease),) = taken  # four nodes at once: one took it
    assert store.callbacks_attempted(
        "elsewhere", [CallbackAttempt(event, lease, "not mine", None)]
    ) == [False]
    holder = _holder(store, event.seq)
    retry_at = now_ms() + 60_000  # far enough that a slow machine's claim is before it
    failed = CallbackAttempt(event, lease, "callback: HTTP 500", retry_at)
    assert store.callbacks_attempted(holder, [failed]) == [True]
    assert store.claim_callbacks("n9", retry_at - 1, 20_000, 10) == []  # not due yet
    ((again, lease),) = store.claim_callbacks("n9", retry_at, 20_000, 10)
    assert again.attempts == 1 and message_id(again) == message_id(event)
    assert store.callbacks_attempted(
        "n9", [CallbackAttempt(again, lease, "callback: HTTP 204", None)]
    )
    assert store.pending_callbacks() == 0
    messages = [e["message"] for e in store.events(job_id)[1]]
    assert messages[-2:] == ["callback: HTTP 500", "callback: HTTP 204"]


def _holder(store, seq):
    from sqlalchemy import select

    from xruntime.store.schema import callback_outbox

    with store._read() as conn:
        return conn.execute(
            select(callback_outbox.c.node).where(callback_outbox.c.seq == seq)
        ).scalar()


def test_a_restarted_node_takes_back_what_it_was_delivering(store):
    job_id, run = running_job(store)
    store.finish(job_id, "SUCCEEDED", now_ms(), result="{}", run=run)
    assert len(store.claim_callbacks("n1", due_now(store), 600_000, 10)) == 1
    assert store.claim_callbacks("n2", now_ms(), 20_000, 10) == []
    assert store.release_callbacks("n1", now_ms()) == 1
    assert len(store.claim_callbacks("n2", due_now(store), 20_000, 10)) == 1


def test_many_attempts_end_in_one_write(store):
    ended = []
    for _ in range(3):
        job_id, run = running_job(store)
        store.finish(job_id, "SUCCEEDED", now_ms(), result="{}", run=run)
    taken = store.claim_callbacks("n1", due_now(store), 20_000, 10)
    assert len(taken) == 3
    ended = [
        CallbackAttempt(taken[0][0], taken[0][1], "callback: HTTP 204", None),
        CallbackAttempt(taken[1][0], taken[1][1], "callback: HTTP 500", now_ms() + 60_000),
        CallbackAttempt(taken[2][0], taken[2][1] + 1, "callback: a lease not its", None),
    ]
    assert store.callbacks_attempted("n1", ended) == [True, True, False]
    assert store.pending_callbacks() == 2  # the one retried later, the one not ended
    for attempt in ended:
        assert store.events(attempt.event.job_id)[1][-1]["message"] == attempt.message
