"""Accounts (docs/protocol.md §10) without HTTP: the [auth] and [users] tables, credentials,
fair claiming and per-user queue limits in the store, and isolation in JobManager."""

import base64
import os
import threading
import time
from functools import partial

import pytest

from tests.fixtures.released_schema import released_database
from xruntime.operations.accounts import (
    ANONYMOUS,
    Caller,
    NotAuthenticated,
    authenticate,
    token_sha256,
)
from xruntime.protocol.faults import QueueOverflowFault, QuotaExceededFault, UnknownJobFault
from xruntime.settings import config
from xruntime.store import JobStore, now_ms
from xruntime.store.claims import claim_statement
from xruntime.store.statements import Prepared

from .conftest import PG_ENV, fresh_postgres_store, sqlite_url
from .helpers import LEASE_MS, NODE, new_record

ALICE, BOB = "alice-token-0123456789", "bob-token-9876543210"
SERVICES = ["XDemo", "XTour", "XDima", "XRuntime"]


def accounts(extra="", required=True):
    return config.parse(
        f"""
[auth]
required = {"true" if required else "false"}

[users.alice]
token_sha256 = "{token_sha256(ALICE)}"
max_running = 1
max_queued = 3

[users.bob]
token_sha256 = "{token_sha256(BOB)}"

[users.root]
token_sha256 = "{token_sha256("root-token-abcdefghij")}"
admin = true
"""
        + extra,
        known_services=SERVICES,
    )


def basic(name, token):
    return "Basic " + base64.b64encode(f"{name}:{token}".encode()).decode()


# --------------------------------------------------------------------------- the file


def test_users_and_per_service_values_are_read():
    settings = accounts("""
[users.alice.services.XTour]
max_running = 2
""")
    assert settings.auth.required and settings.auth.public_wsdl
    alice = settings.users["alice"]
    assert (alice.admin, alice.quota.max_running, alice.quota.max_queued) == (False, 1, 3)
    assert settings.quota_of("alice", "XTour") == config.Quota(max_running=2, max_queued=3)
    assert settings.quota_of("alice", "XDemo") == config.Quota(max_running=1, max_queued=3)
    assert settings.quota_of("nobody", "XDemo") == config.Quota()
    assert settings.users["root"].admin
    assert settings.running_limits() == (("alice", "XTour", 2), ("alice", None, 1))


def test_no_limits_means_a_plain_queue():
    assert config.parse("").running_limits() == ()
    assert accounts().running_limits() == (("alice", None, 1),)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[users.a]\nadmin = true\n", "line 1: [users.a]: token_sha256 is missing"),
        (
            '[users.a]\ntoken_sha256 = "abc"\n',
            "line 2: [users.a] token_sha256: expected the 64 hex digits",
        ),
        (
            f'[users.xtok]\ntoken_sha256 = "{"a" * 64}"\n',
            "line 1: [users.xtok]: 'xtok' is the name",
        ),
        (f'[users."a b"]\ntoken_sha256 = "{"a" * 64}"\n', "is no user name"),
        (
            f'[users.a]\ntoken_sha256 = "{"a" * 64}"\nmax_running = -1\n',
            "line 3: [users.a] max_running: must be between 0 and 100000",
        ),
        (
            f'[users.a]\ntoken_sha256 = "{"a" * 64}"\nmax_runing = 1\n',
            "line 3: [users.a] max_runing: unknown key",
        ),
        (
            f'[users.a]\ntoken_sha256 = "{"a" * 64}"\n[users.b]\ntoken_sha256 = "{"A" * 64}"\n',
            "line 4: [users.b] token_sha256: the same token as [users.a]",
        ),
        (
            f'[users.a]\ntoken_sha256 = "{"a" * 64}"\n[users.a.services.XNope]\nmax_running = 1\n',
            "line 3: [users.a.services.XNope]: no service named 'XNope'",
        ),
        (
            f'[users.a]\ntoken_sha256 = "{"a" * 64}"\n[users.a.services.XDemo]\nadmin = true\n',
            "line 4: [users.a.services.XDemo] admin: unknown key",
        ),
        ('[auth]\nrequired = "yes"\n', "line 2: [auth] required: expected true or false"),
        ("[auth]\nrequire = true\n", "line 2: [auth] require: unknown key"),
    ],
)
def test_invalid_accounts_are_refused_with_their_line(text, message):
    with pytest.raises(config.ConfigError) as caught:
        config.parse(text, known_services=SERVICES)
    assert any(message in error for error in caught.value.errors), caught.value.errors


# --------------------------------------------------------------------------- credentials


def test_basic_bearer_and_xtok_name_the_user():
    settings = accounts()
    assert authenticate(basic("alice", ALICE), settings) == Caller("alice", False)
    assert authenticate(basic("xtok", ALICE), settings) == Caller("alice", False)
    assert authenticate("Bearer " + BOB, settings) == Caller("bob", False)
    assert authenticate("bearer   " + BOB + " ", settings) == Caller("bob", False)
    assert authenticate(basic("root", "root-token-abcdefghij"), settings) == Caller("root", True)


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Basic",
        "Bearer",
        "Bearer wrong-token",
        "Digest abc",
        "Basic !!!notbase64",
        basic("alice", BOB),  # bob's token under alice's name
        basic("alice", ""),
        basic("nobody", ALICE),
        basic("alice", ALICE + "x"),
        "Basic " + base64.b64encode(b"alice" + ALICE.encode()).decode(),  # no colon
    ],
)
def test_missing_or_wrong_credentials_are_refused(header):
    with pytest.raises(NotAuthenticated) as caught:
        authenticate(header, accounts())
    assert ALICE not in str(caught.value) and BOB not in str(caught.value)


def test_with_auth_off_everyone_is_anonymous_and_sees_everything():
    settings = accounts(required=False)
    assert authenticate(None, settings) is ANONYMOUS
    assert authenticate("Bearer wrong", settings) is ANONYMOUS
    assert ANONYMOUS.sees("alice") and ANONYMOUS.sees("")
    assert not Caller("bob").sees("alice") and Caller("root", True).sees("alice")


# --------------------------------------------------------------------------- fair claims


def queue(store, owner, count, service="XDemo"):
    made = []
    for _ in range(count):
        rec = new_record(owner=owner, service=service)
        assert store.create(rec, 0)
        made.append(rec.id)
    return made


def claim(store, limits, services=None):
    rec = store.claim(NODE, now_ms(), LEASE_MS, services, limits)
    return rec and (rec.owner, rec.id)


def test_a_user_over_max_running_waits_while_others_run(any_store):
    store, limits = any_store, (("alice", None, 1),)
    alice = queue(any_store, "alice", 5)
    bob = queue(any_store, "bob", 2)
    assert claim(store, limits) == ("alice", alice[0])
    assert claim(store, limits) == ("bob", bob[0])  # alice's 4 others wait
    assert claim(store, limits) == ("bob", bob[1])
    assert claim(store, limits) is None
    assert store.counts_by_status("alice") == {"RUNNING": 1, "QUEUING": 4}
    store.finish(alice[0], "SUCCEEDED", now_ms(), result="{}")
    assert claim(store, limits) == ("alice", alice[1])  # her next one, in order
    assert claim(store, limits) is None


def test_with_accounts_on_a_freed_worker_goes_to_the_lane_running_fewest(any_store):
    """Fair by default (docs/protocol.md §10): no max_running, but alice's flood queued
    first does not keep the others waiting: each claim takes the first job of the lane
    (a user's jobs of a service) that runs fewest now, the oldest of those; with
    accounts off (no fairness asked) the queue is first in, first out."""
    store = any_store

    def fair_claim(services=None):
        rec = store.claim(NODE, now_ms(), LEASE_MS, services, (), between_owners=True)
        return rec and (rec.owner, rec.id)

    alice = queue(store, "alice", 4)
    alice += queue(store, "alice", 2, service="XDima")
    bob = queue(store, "bob", 2)
    carol = queue(store, "carol", 1, service="XDima")
    assert fair_claim() == ("alice", alice[0])  # nothing runs: the oldest
    assert fair_claim() == ("alice", alice[4])  # her XDima lane runs none either
    assert fair_claim() == ("bob", bob[0])
    assert fair_claim() == ("carol", carol[0])  # not behind alice's 3 other jobs
    assert fair_claim() == ("alice", alice[1])  # each lane runs 1: the oldest
    assert fair_claim() == ("alice", alice[5])
    assert fair_claim() == ("bob", bob[1])
    assert fair_claim(["XDima"]) is None  # only the services served
    dave = queue(store, "dave", 1)
    # accounts off (no fairness asked): the plain order, dave's job waits behind alice's
    assert store.claim(NODE, now_ms(), LEASE_MS).id == alice[2]
    assert fair_claim() == ("dave", dave[0])  # alice's XDemo lane runs 3, dave's none
    assert fair_claim() == ("alice", alice[3])
    assert fair_claim() is None


def test_per_service_values_and_served_services(any_store):
    store = any_store
    limits = (("alice", "XTour", 2), ("alice", None, 1))
    tours = queue(store, "alice", 3, service="XTour")
    demos = queue(store, "alice", 2, service="XDemo")
    got = [claim(store, limits) for _ in range(4)]
    assert got == [("alice", tours[0]), ("alice", tours[1]), ("alice", demos[0]), None]
    store.finish(tours[0], "SUCCEEDED", now_ms(), result="{}")
    assert claim(store, limits, services=["XDemo"]) is None  # XDemo's one runs
    assert claim(store, limits, services=["XTour"]) == ("alice", tours[2])


def test_a_lane_whose_jobs_all_wait_for_a_retry_neither_hides_nor_doubles_the_next(any_store):
    store, limits = any_store, (("alice", None, 1), ("bob", None, 1))
    waiting = queue(store, "alice", 1)[0]
    assert claim(store, limits) == ("alice", waiting)
    assert store.retry(waiting, 60_000, "later")
    bob = queue(store, "bob", 2)
    assert claim(store, limits) == ("bob", bob[0])
    assert claim(store, limits) is None  # bob at his limit, alice not due


def test_a_stopping_or_deleted_job_still_holds_its_workers_share(any_store):
    store, limits = any_store, (("alice", None, 1),)
    first, second = queue(store, "alice", 2)
    claim(store, limits)
    assert store.request_stop(first)
    assert claim(store, limits) is None
    assert store.mark_deleted(first)
    assert claim(store, limits) is None
    assert store.erase(first, ("DELETED",))
    assert claim(store, limits) == ("alice", second)


def test_owner_max_queued(any_store):
    store = any_store
    for _ in range(3):
        assert store.create(new_record(owner="alice"), 0, owner_max_queued=3)
    assert not store.create(new_record(owner="alice"), 0, owner_max_queued=3)
    assert not store.create(new_record(owner="alice"), 100, "XDemo", owner_max_queued=3)
    assert store.create(new_record(owner="alice", service="XTour"), 0, owner_max_queued=3)
    assert store.create(new_record(owner="bob"), 100, owner_max_queued=3)
    assert store.count_queued("XDemo", "alice") == 3
    assert store.counts_by_status("alice") == {"QUEUING": 4}
    assert store.counts_by_status() == {"QUEUING": 5}


@pytest.mark.skipif(not os.environ.get(PG_ENV), reason=f"{PG_ENV} is not set")
def test_nodes_never_run_more_than_max_running_together():
    """Three nodes (each its own connections), two workers each, racing on PostgreSQL
    over alice's jobs (max_running = 2): a job is held until another one is (or for a
    second), then finished; so two run together, and never three."""
    url = os.environ[PG_ENV]
    stores = [fresh_postgres_store(url), JobStore(url), JobStore(url)]
    limits = (("alice", None, 2),)
    try:
        queue(stores[0], "alice", 60)
        held, most, errors, finished = set(), [0], [], [0]
        together = threading.Condition()
        deadline = time.monotonic() + 120

        def worker(store, name):
            try:
                while finished[0] < 60 and time.monotonic() < deadline:
                    rec = store.claim(name, now_ms(), LEASE_MS, None, limits)
                    if rec is None:
                        time.sleep(0.001)
                        continue
                    with together:  # held from after its claim to before its end
                        held.add(rec.id)
                        most[0] = max(most[0], len(held))
                        together.notify_all()
                        together.wait_for(lambda: len(held) > 1, timeout=1.0)
                    time.sleep(0.01)  # held on: a third claim the store let through shows
                    with together:
                        held.discard(rec.id)
                    assert store.finish(rec.id, "SUCCEEDED", now_ms(), result="{}")
                    with together:
                        finished[0] += 1
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [
            threading.Thread(target=worker, args=(s, f"node{i}"))
            for i, s in enumerate(stores)
            for _ in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert stores[0].counts_by_status("alice") == {"SUCCEEDED": 60}
        assert most[0] == 2, (
            "six workers on three nodes ran more (or fewer) of alice's jobs at once"
        )
    finally:
        for s in stores:
            s.close()


def claim_work(store, limits):
    """What one claim costs the database, undone after: PostgreSQL's pages read,
    SQLite's virtual machine instructions (in hundreds).  Answers (work, rows taken)."""
    p = Prepared(claim_statement(store.dialect, None, limits), store.engine.dialect)
    args = p.args({"node": NODE, "now_ms": now_ms(), "lease_until": now_ms() + LEASE_MS})
    conn = store.engine.raw_connection()
    try:
        cur = conn.cursor()
        if store.dialect == "postgresql":
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + p.sql, args)
            top = cur.fetchone()[0][0]["Plan"]
            work, taken = top["Shared Hit Blocks"] + top["Shared Read Blocks"], top["Actual Rows"]
        else:
            steps = []
            conn.driver_connection.set_progress_handler(lambda: steps.append(1) and 0, 100)
            cur.execute("BEGIN")
            taken = len(cur.execute(p.sql, args).fetchall())
            conn.driver_connection.set_progress_handler(None, 0)
            work = len(steps)
        conn.rollback()  # the claim ran: undo it
    finally:
        conn.close()
    return work, taken


def test_a_flooded_lane_does_not_slow_a_claim(any_store):
    """20 000 of alice's jobs queued behind her one running (max_running = 1), bob's one
    after them: his claim reads a few pages, not her lane, before the table is analysed
    (PostgreSQL takes it for small) and after (it knows her lane holds nearly every
    job; SQLite would build a Bloom filter over the table).  benchmarks/fairness.py
    times the same with 100 000."""
    store, limits = any_store, (("alice", None, 1),)
    queue(store, "alice", 1)
    assert claim(store, limits)[0] == "alice"
    insert = store._prepared["insert"]
    flood = [
        insert.args(
            dict(
                id=f"flood-{i}",
                service="XDemo",
                operation="simulate",
                fetch_type="SimulateResponse",
                status="QUEUING",
                request=b"{}",
                queued_at=now_ms(),
                attempts=0,
                queueing_timeout=None,
                computation_timeout=None,
                owner="alice",
                lane="XDemo/alice",
                callback_url=None,
                callback_period=None,
            )
        )
        for i in range(20_000)
    ]
    conn = store.engine.raw_connection()
    try:
        conn.cursor().executemany(insert.sql, flood)
        conn.commit()
    finally:
        conn.close()
    bob = queue(store, "bob", 1)[0]
    for analysed in (False, True):
        if analysed:
            with store.engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE jobs")
        work, taken = claim_work(store, limits)
        assert taken == 1
        assert work < 200, f"the claim cost {work} (analysed: {analysed})"
    assert claim(store, limits) == ("bob", bob)
    assert store.counts_by_status("alice") == {"RUNNING": 1, "QUEUING": 20_000}


def test_an_old_database_is_upgraded_and_its_jobs_are_anonymous(tmp_path):
    url = sqlite_url(tmp_path)
    released_database(url, [dict(id="old-job", status="QUEUING", request=b"{}", queued_at=1)])
    store = JobStore(url)
    try:
        assert store.peek("old-job").owner == ""
        assert claim(store, (("alice", None, 1),)) == ("", "old-job")  # its lane is right too
        JobStore(url).close()  # a second open: nothing to do
    finally:
        store.close()


# --------------------------------------------------------------------------- isolation


def watched(jobs, job_id, caller):
    """watchJob's answer and how long it took (s), held for at most 1 s (the
    maximumPollingPeriod of 300 is taken as the default progressUpdatePeriod, 1000)."""
    import time

    began = time.monotonic()
    answer = jobs.watch(job_id, None, 300, caller=caller)
    return answer.status, time.monotonic() - began


def test_another_users_job_is_an_id_never_used(jobs, settings, simulate_op):
    from xruntime_services.xdemo.types import SimulateRequest

    settings[0] = accounts()
    alice, bob, root = Caller("alice"), Caller("bob"), Caller("root", admin=True)
    job = jobs.start(simulate_op, SimulateRequest(steps=1), alice).id
    never = "5b0c1f8e-0000-4000-8000-000000000000"
    for caller in (bob,):
        for job_id in (job, never):
            status, took = watched(jobs, job_id, caller)
            assert status == "UNKNOWN" and took < 0.5  # answered at once, as unknown ids are
            assert jobs.delete(job_id, caller).status == "UNKNOWN"
            for act in (
                partial(jobs.stop, job_id, caller),
                partial(jobs.fetch, simulate_op, job_id, caller),
            ):
                with pytest.raises(UnknownJobFault) as caught:
                    act()
                assert caught.value.faultstring == f"there is no job with id {job_id}"
    assert jobs.store.peek(job).status == "QUEUING"
    assert watched(jobs, job, alice)[0] == "QUEUING"
    assert watched(jobs, job, root)[0] == "QUEUING"
    info = jobs.runtime_information([], caller=bob)
    assert {c.status: c.count for c in info.jobs}["QUEUING"] == 0
    info = jobs.runtime_information([], caller=alice)
    assert {c.status: c.count for c in info.jobs}["QUEUING"] == 1
    assert jobs.delete(job, root).status == "DELETED"


def test_max_queued_of_a_user_is_quota_exceeded_and_the_queues_own_is_overflow(
    jobs, settings, simulate_op
):
    from xruntime_services.xdemo.types import SimulateRequest

    settings[0] = accounts("\n[jobs]\nmax_queued = 5\n")
    alice, bob = Caller("alice"), Caller("bob")
    for _ in range(3):
        jobs.start(simulate_op, SimulateRequest(steps=1), alice)
    with pytest.raises(QuotaExceededFault):
        jobs.start(simulate_op, SimulateRequest(steps=1), alice)
    jobs.start(simulate_op, SimulateRequest(steps=1), bob)
    jobs.start(simulate_op, SimulateRequest(steps=1), bob)
    with pytest.raises(QueueOverflowFault):
        jobs.start(simulate_op, SimulateRequest(steps=1), bob)
    assert jobs.store.counts_by_status() == {"QUEUING": 5}


def test_another_users_job_is_not_even_read(any_store):
    """fetch reads a whole job (its result may be large); for another user's id the
    store answers nothing, as for an unknown id, without reading it."""
    rec = new_record(owner="alice")
    any_store.create(rec, 0)
    assert any_store.get(rec.id, "bob") is None
    assert any_store.get(rec.id, "alice").owner == "alice"
    assert any_store.get(rec.id).owner == "alice"
