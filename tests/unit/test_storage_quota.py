"""What a user may keep stored (docs/protocol.md §15): the store's measure of a user's stored
bytes (SQLite and PostgreSQL), ``max_stored_bytes`` in the file, and the start refused
past it (``storage_quota``)."""

import json
import os

import pytest

from tests.fixtures.released_schema import released_database
from xruntime import cli
from xruntime.operations.accounts import Caller, token_sha256
from xruntime.operations.storage_quota import StoredBytesQuota
from xruntime.payload.form import COMPRESS_ABOVE, pack
from xruntime.protocol.faults import QuotaExceededFault
from xruntime.settings import config
from xruntime.store import JobStore, Room, now_ms
from xruntime.store.result_files import ResultFile

from .conftest import sqlite_url
from .helpers import LEASE_MS, NODE, new_record

SERVICES = ["XDemo", "XTour", "XDima", "XRuntime"]


def stored(*texts) -> int:
    return sum(len(pack(t)) for t in texts)


# --------------------------------------------------------------------------- the store


def test_a_users_stored_bytes_are_every_payload_of_their_jobs_not_yet_erased(any_store):
    store = any_store
    assert store.stored_bytes("alice") == 0
    request = json.dumps({"steps": 3, "note": "r" * 50})
    first = new_record(owner="alice")
    other_service = new_record(owner="alice", service="XTour")
    bobs = new_record(owner="bob")
    for rec in (first, other_service, bobs):
        rec.request = request
        assert store.create(rec, 0)
    assert store.stored_bytes("alice") == 2 * stored(request)  # all services together
    assert store.stored_bytes("bob") == stored(request)

    claimed = store.claim(NODE, now_ms(), LEASE_MS)
    assert claimed.id == first.id
    progress = json.dumps({"message": "half way"})
    assert store.set_progress(first.id, progress)
    assert store.stored_bytes("alice") == 2 * stored(request) + stored(progress)
    result = json.dumps({"values": list(range(3000))})  # compressed as stored
    assert len(result) > COMPRESS_ABOVE and len(pack(result)) < len(result)
    assert store.finish(first.id, "SUCCEEDED", now_ms(), result=result)
    assert store.stored_bytes("alice") == 2 * stored(request) + stored(progress, result)
    assert store.stored_bytes("bob") == stored(request)  # another user's are apart

    assert store.erase(first.id, ("SUCCEEDED",))
    assert store.stored_bytes("alice") == stored(request)
    assert store.stored_bytes("nobody") == 0


def test_an_unfinished_jobs_result_bound_counts_until_it_ends(any_store):
    store = any_store
    job = new_record(owner="alice")
    job.result_bound = 5_000_000
    assert store.create(job, 0)
    with_request = store.stored_bytes("alice")
    assert with_request == stored(job.request) + 5_000_000  # queued: it may still store that
    assert store.claim(NODE, now_ms(), LEASE_MS).id == job.id
    assert store.stored_bytes("alice") == with_request  # running: the same
    assert store.finish(job.id, "SUCCEEDED", now_ms(), result='{"small":1}')
    assert store.stored_bytes("alice") == stored(job.request, '{"small":1}')  # what it stored
    assert store.stored_bytes("bob") == 0


def test_a_start_is_inserted_only_while_its_bound_fits_the_owners_limit(any_store):
    store = any_store
    job = new_record(owner="alice")
    job.result_bound = 1000
    assert store.create(job, 0, max_stored=1000)  # nothing stored yet, and its bound: within
    figure = store.stored_bytes("alice")
    assert figure == stored(job.request) + 1000
    second = new_record(owner="alice")
    second.result_bound = 1000
    assert not store.create(second, 10, max_stored=figure + 999)  # its bound passes it
    assert store.get(second.id) is None and store.stored_bytes("alice") == figure  # nothing stored
    assert store.create(second, 10, max_stored=figure + 1000)  # within
    bobs = new_record(owner="bob")
    bobs.result_bound = 1000
    assert store.create(bobs, 10, max_stored=1000)  # another owner's figure is apart


@pytest.mark.parametrize("size", [100, 300_000])  # in the job's row; in a row of its own
def test_a_result_is_stored_only_within_its_owners_room(any_store, size):
    store = any_store
    job = new_record(owner="alice")
    job.result_bound = 1000
    assert store.create(job, 0)
    other = new_record(owner="alice")  # another job of hers, queued: its bound counts
    other.result_bound = 5000
    assert store.create(other, 0)
    before = store.stored_bytes("alice")
    run = store.claim(NODE, now_ms(), LEASE_MS)
    assert run.id == job.id
    result = json.dumps({"text": os.urandom(size // 2).hex()})
    taking = len(pack(result))
    fits = before - 1000 + taking  # her figure once it is stored
    too_small = Room("alice", 1000, fits - 1)
    assert not store.finish(job.id, "SUCCEEDED", now_ms(), result=result, room=too_small)
    assert store.get(job.id).status == "RUNNING"  # refused: nothing changed
    assert store.stored_bytes("alice") == before
    assert store.finish(
        job.id, "SUCCEEDED", now_ms(), result=result, room=Room("alice", 1000, fits)
    )
    done = store.get(job.id)
    assert done.status == "SUCCEEDED" and json.loads(done.result) == json.loads(result)
    assert store.stored_bytes("alice") == fits


def test_a_result_file_is_stored_only_within_its_owners_room(tmp_path):
    store = JobStore(sqlite_url(tmp_path))
    try:
        job = new_record(owner="alice")
        job.result_bound = 10
        assert store.create(job, 0)
        assert store.claim(NODE, now_ms(), LEASE_MS).id == job.id
        stored_form = pack(json.dumps({"text": "x" * 2_000_000}))
        path = tmp_path / "spilled"
        path.write_bytes(stored_form)
        fits = store.stored_bytes("alice") - 10 + len(stored_form)
        file = ResultFile(str(path), len(stored_form))
        room = Room("alice", 10, fits - 1)
        assert not store.finish(job.id, "SUCCEEDED", now_ms(), result=file, room=room)
        assert path.exists()  # still the caller's, where it was
        assert store.get(job.id).status == "RUNNING"
        room = Room("alice", 10, fits)
        assert store.finish(job.id, "SUCCEEDED", now_ms(), result=file, room=room)
        assert not path.exists()  # taken in
        assert store.stored_bytes("alice") == fits
    finally:
        store.close()


def test_an_old_database_is_measured_too(tmp_path):
    url = sqlite_url(tmp_path)
    released_database(
        url,
        [
            dict(
                id="old-job",
                status="SUCCEEDED",
                request=b'{"a":1}',
                result=b'{"b":22}',
                queued_at=1,
            )
        ],
    )
    store = JobStore(url)
    try:
        assert store.stored_bytes("") == len(b'{"a":1}') + len(b'{"b":22}')
        assert store.create(new_record(), 0)  # its request: "{}"
        assert store.stored_bytes("") == 17
        JobStore(url).close()  # opened again: nothing to add
    finally:
        store.close()


# --------------------------------------------------------------------------- the file


def parse(text):
    return config.parse(text, known_services=SERVICES)


def test_max_stored_bytes_defaults_to_4_gib_for_every_user_and_a_user_may_have_their_own():
    assert config.Settings().stored_bytes_limit("") == 4 * 1024**3
    settings = parse(f"""
[jobs]
max_stored_bytes = 1000

[users.alice]
token_sha256 = "{token_sha256("alice-token-0123456789")}"
max_stored_bytes = 0

[users.bob]
token_sha256 = "{token_sha256("bob-token-9876543210")}"
max_stored_bytes = 50
""")
    assert settings.stored_bytes_limit("") == 1000  # the anonymous user: [jobs]
    assert settings.stored_bytes_limit("carol") == 1000  # a user without their own value
    assert settings.stored_bytes_limit("alice") == 0  # no limit
    assert settings.stored_bytes_limit("bob") == 50


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("[jobs]\nmax_stored_bytes = -1\n", 2, "[jobs] max_stored_bytes: must be at least 0"),
        ('[jobs]\nmax_stored_bytes = "4GB"\n', 2, "[jobs] max_stored_bytes: expected an integer"),
        (
            "[services.XDemo]\nmax_stored_bytes = 10\n",
            2,
            "[services.XDemo] max_stored_bytes: not per service: "
            "it bounds what a user stores across all services",
        ),
        (
            f'[users.alice]\ntoken_sha256 = "{"a" * 64}"\n'
            "[users.alice.services.XDemo]\nmax_stored_bytes = 10\n",
            4,
            "[users.alice.services.XDemo] max_stored_bytes: not per service",
        ),
        (
            f'[users.alice]\ntoken_sha256 = "{"a" * 64}"\nmax_stored_bytes = true\n',
            3,
            "[users.alice] max_stored_bytes: expected an integer",
        ),
    ],
)
def test_check_config_refuses_a_wrong_max_stored_bytes(tmp_path, capsys, text, line, message):
    path = tmp_path / "xserver.toml"
    path.write_text(text)
    assert cli.main(["check-config", str(path)]) != 0
    out = capsys.readouterr().out
    assert f"line {line}: {message}" in out


def test_check_config_accepts_max_stored_bytes(tmp_path, capsys):
    path = tmp_path / "xserver.toml"
    path.write_text(
        f'[jobs]\nmax_stored_bytes = 0\n[users.alice]\ntoken_sha256 = "{"a" * 64}"\n'
        "max_stored_bytes = 1048576\n"
    )
    assert cli.main(["check-config", str(path)]) == 0
    assert "OK" in capsys.readouterr().out


# --------------------------------------------------------------------------- the start


def accounts(limit_line):
    return parse(f"""
[auth]
required = true

[jobs]
max_stored_bytes = 10000

[users.alice]
token_sha256 = "{token_sha256("alice-token-0123456789")}"
{limit_line}

[users.bob]
token_sha256 = "{token_sha256("bob-token-9876543210")}"
""")


def test_a_start_that_could_pass_the_bound_is_quota_exceeded_and_stores_nothing(
    jobs, settings, simulate_op
):
    from xruntime_services.xdemo.types import SimulateRequest

    alice, bob = Caller("alice"), Caller("bob")
    bound = simulate_op.result_bound(SimulateRequest(steps=1))
    assert bound == 4096  # XDemo's: the payload asked for (none) and 4 KiB
    first = jobs.start(simulate_op, SimulateRequest(steps=1), alice).id
    size = jobs.store.stored_bytes("alice")  # its request, and its result's bound meanwhile
    assert size > bound
    settings[0] = accounts(f"max_stored_bytes = {2 * size}")
    second = jobs.start(simulate_op, SimulateRequest(steps=1), alice).id  # 2 jobs: at the bound
    assert jobs.store.stored_bytes("alice") == 2 * size
    with pytest.raises(QuotaExceededFault) as caught:  # a third could pass it
        jobs.start(simulate_op, SimulateRequest(steps=1), alice)
    message = caught.value.faultstring
    assert f"your jobs take {2 * size} bytes stored or to be stored" in message
    assert f"may take {bound} more: past max_stored_bytes of {2 * size}" in message
    assert "delete" in caught.value.hint and "retention" in caught.value.hint
    assert jobs.store.counts_by_status("alice") == {"QUEUING": 2}  # nothing stored
    jobs.start(simulate_op, SimulateRequest(steps=1), bob)  # bob: [jobs]' 10000
    jobs.delete(second, alice)
    third = jobs.start(simulate_op, SimulateRequest(steps=1), alice).id  # below again
    assert jobs.store.counts_by_status("alice") == {"QUEUING": 2}
    # a request whose result could be larger than the whole bound: refused at once
    with pytest.raises(QuotaExceededFault):
        jobs.start(simulate_op, SimulateRequest(steps=1, resultSize=2 * size), alice)
    assert {first, third} == {j.id for j in [jobs.store.get(first), jobs.store.get(third)] if j}


def test_no_bound_with_0(jobs, settings, simulate_op):
    from xruntime_services.xdemo.types import SimulateRequest

    settings[0] = accounts("max_stored_bytes = 0")
    jobs.manager.stored_quota.store = None  # never measured: a measure would fail
    for _ in range(3):
        jobs.start(simulate_op, SimulateRequest(steps=1), Caller("alice"))


class CountingStore:
    def __init__(self, value):
        self.value, self.measured = value, 0

    def stored_bytes(self, owner):
        self.measured += 1
        return self.value


def test_every_start_is_measured_with_its_own_bound():
    store = CountingStore(400)
    quota = StoredBytesQuota(store)
    quota.check("alice", 1000, 100)
    quota.check("alice", 1000, 600)  # 400 + 600: at the bound, not past it
    assert store.measured == 2  # no figure is reused: jobs stored meanwhile count
    with pytest.raises(QuotaExceededFault):
        quota.check("alice", 1000, 601)
    store.value = 1000
    with pytest.raises(QuotaExceededFault):
        quota.check("alice", 1000, 1)
    quota.check("alice", 1000, 0)  # (a bound of 0 adds nothing)
    quota.check("bob", 0, 10**12)
    assert store.measured == 5  # 0: no bound, nothing measured


def test_sqlite_keeps_each_owners_figure_equal_to_the_sum_of_their_rows(store):
    """SQLite reads an owner's figure from a running total its triggers keep
    (``store.owner_bytes``); through every kind of change it equals the sum over the
    owner's rows, which PostgreSQL reads (and which this test computes alike)."""
    from xruntime.store import CallbackAttempt
    from xruntime.store.schema import RESULT_ROW_ABOVE

    owners = ("alice", "bob", "")

    def agree():
        for owner in owners:
            assert store.stored_bytes(owner) == store._count("stored_bytes", owner=owner), owner

    jobs = []
    for owner in owners:
        for bound in (0, 70_000):
            rec = new_record(owner=owner, result_bound=bound, callback_url="http://127.0.0.1:9/x")
            rec.request = json.dumps({"note": owner * 40 or "n"})
            assert store.create(rec, 0)
            jobs.append(rec)
            agree()
    assert store.stored_bytes("alice") > 70_000  # a bound counts while unfinished
    big = json.dumps(os.urandom(RESULT_ROW_ABOVE).hex())  # (incompressible) a row of its own
    for index in range(len(jobs)):
        claimed = store.claim(NODE, now_ms(), LEASE_MS)
        assert store.set_progress(claimed.id, json.dumps({"message": "p" * 30}))
        agree()
        result = big if index % 2 else '{"small":1}'
        assert store.finish(claimed.id, "SUCCEEDED", now_ms(), result=result)
        agree()
    assert store.pending_callbacks() > 0  # their ends wait in the outbox
    taken = store.claim_callbacks(NODE, now_ms(), LEASE_MS, 100)
    assert store.callbacks_attempted(
        NODE, [CallbackAttempt(event, lease, "delivered", None) for event, lease in taken[:3]]
    )
    agree()
    store.mark_fetched(jobs[0].id, now_ms())
    assert store.erase(jobs[1].id, ("SUCCEEDED",))  # its large result goes with it
    agree()
    running = new_record(owner="bob", result_bound=5_000)
    assert store.create(running, 0)
    assert store.claim(NODE, now_ms(), LEASE_MS).id == running.id
    assert store.mark_deleted(running.id)  # deleted while running: its bound still counts
    agree()
    assert store.erase(running.id, ("DELETED",))
    for rec in [jobs[0]] + jobs[2:]:
        assert store.erase(rec.id, ("SUCCEEDED",))
    agree()
    taken = store.claim_callbacks(NODE, now_ms() + LEASE_MS + 1, LEASE_MS, 100)
    assert store.callbacks_attempted(
        NODE, [CallbackAttempt(event, lease, "delivered", None) for event, lease in taken]
    )
    for owner in owners:  # nothing left of theirs
        assert store.stored_bytes(owner) == 0, owner
