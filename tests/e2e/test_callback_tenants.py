"""One tenant cannot hold the others' callbacks (issue 32, items 1 and 2), through real
HTTP on real nodes with accounts on: alice's receivers are hostile (one trickles its
answer a byte at a time, one never answers), bob's is healthy.

- alice's trickling receiver never delays bob's delivery: at most a quarter of the
  node's senders are hers, so bob's event goes while her attempt still runs;
- an attempt ends at its deadline whatever the receiver trickles, and the attempts of
  one event never overlap (no two POSTs of one ``webhook-id`` at once);
- a progress flood of alice (jobs with a 1 s progress period, to a receiver that never
  answers) delays bob's ``job.finished`` by less than one attempt, and the outbox keeps
  at most one waiting progress event per job;
- a node stopped during a hung attempt stops within its bound and writes the attempt as
  a failed one, not left to its lease.

Every wait is for a condition; the bounds asserted are far from what a loaded machine
needs (bob's events arrive in well under a second; the bounds are 10 s and more)."""

import glob
import os
import sqlite3
import time

import standardwebhooks

from tests.receiver import HostileReceiver, Receiver
from xruntime.operations.accounts import new_token, token_sha256

TOKENS = {name: new_token() for name in ("alice", "bob")}
SECRETS = {
    "alice": "whsec_" + "YWxpY2Uta2V5LWFsaWNlLWtleS1hbGljZS1rZXktISE=",
    "bob": "whsec_" + "Ym9iLWtleS1ib2Ita2V5LWJvYi1rZXktYm9iLWtleSE=",
}


def config(**callbacks):
    text = "\n[auth]\nrequired = true\n"
    for name, token in TOKENS.items():
        text += (
            f'\n[users.{name}]\ntoken_sha256 = "{token_sha256(token)}"\n'
            f'callback_secret = "{SECRETS[name]}"\n'
        )
    text += '\n[callbacks]\nallowed = ["127.0.0.1"]\n'
    return text + "".join(f"{key} = {value}\n" for key, value in callbacks.items())


def node(fresh_server, workers=2, **callbacks):
    srv = fresh_server(extra=config(**callbacks), workers=workers, auth=("bob", TOKENS["bob"]))
    return srv.start()


def start(srv, user, url, **request):
    r = srv.session.post(
        srv.url("XDemo", "startSimulate"),
        json={"callback": {"url": url}, **request},
        auth=(user, TOKENS[user]),
    )
    assert r.status_code == 200, r.text
    return r.json()["id"]


def history(srv, user, job_id):
    r = srv.session.post(
        srv.url("XRuntime", "getJobEvents"), json={"id": job_id}, auth=(user, TOKENS[user])
    )
    return [e["message"] for e in r.json()["events"]]


def wait_for(condition, timeout=60, what="the condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not hold in {timeout} s"
        time.sleep(0.05)


def wait_history(srv, user, job_id, text, timeout=60):
    wait_for(
        lambda: any(text in m for m in history(srv, user, job_id)),
        timeout,
        f"{text!r} in the history of {job_id}",
    )
    return [m for m in history(srv, user, job_id) if text in m]


def finished(received):
    return [r for r in received if r.data["type"] == "job.finished"]


def test_alice_s_trickling_receiver_never_delays_bob(fresh_server):
    """concurrency 4: alice has one sender at a time, held by her trickling receiver for
    up to the 30 s deadline; bob's event goes meanwhile, signed with his secret."""
    trickler = HostileReceiver(every=2.0)
    healthy = Receiver()
    srv = node(fresh_server, concurrency=4, timeout='"30s"', retry_delay='"1s"')
    try:
        for _ in range(6):
            start(srv, "alice", trickler.url)
        trickler.wait(lambda t: len(t.open) >= 1)  # her first attempt is held
        began = time.monotonic()
        bob = start(srv, "bob", healthy.url)
        (got,) = healthy.wait_for(lambda rs: len(rs) >= 1, timeout=30)
        assert time.monotonic() - began < 15  # not behind alice's 30 s attempts
        assert trickler.open_now() == 1  # her attempt still runs, alone
        assert got.data["id"] == bob
        assert standardwebhooks.Webhook(SECRETS["bob"]).verify(got.body, got.headers)
        assert trickler.most_open == 1  # max(1, 4 // 4) of alice's at once
    finally:
        srv.stop()
        healthy.stop()
        trickler.close()


def test_an_attempt_ends_at_its_deadline_and_never_overlaps_the_next(fresh_server):
    """A receiver that answers a byte every 0.5 s (each read under the 2 s timeout) is cut
    at 2 s; the event is attempted again, never while an attempt of it is open."""
    trickler = HostileReceiver(every=0.5)
    srv = node(fresh_server, concurrency=4, timeout='"2s"', retry_delay='"200ms"')
    try:
        job_id = start(srv, "alice", trickler.url)
        trickler.wait(lambda t: len(t.ids) >= 3 and len(t.closed) >= 2)
        wait_history(srv, "alice", job_id, "timed out (attempt")
        assert max(trickler.closed[:2]) < 2 + 8  # cut at the deadline, not held
        assert len(set(trickler.ids)) == 1 and trickler.overlaps == []
        # its failed attempts are one row of the job's history, the latest
        attempts = [m for m in history(srv, "alice", job_id) if m.startswith("callback")]
        assert len(attempts) == 1, attempts
    finally:
        srv.stop()
        trickler.close()


def test_alice_s_progress_flood_delays_bob_by_less_than_one_attempt(fresh_server):
    """Four of alice's jobs with a 1 s progress period to a receiver that never answers
    (each attempt held for the whole 10 s deadline): the outbox keeps at most one waiting
    progress event per job, and bob's job.finished is not behind them."""
    silent = HostileReceiver(every=None)
    healthy = Receiver()
    srv = node(fresh_server, workers=5, concurrency=4, timeout='"10s"', retry_delay='"1s"')
    (database,) = glob.glob(os.path.join(srv.folder, "**", "xruntime.db"), recursive=True)
    outbox = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)
    try:
        alice = [
            start(
                srv,
                "alice",
                silent.url,
                durationMs=30_000,
                steps=60,
                callback={"url": silent.url, "progressPeriod": 1000},
            )
            for _ in range(4)
        ]
        silent.wait(lambda s: len(s.ids) >= 1)  # her first progress event is held
        most = 0
        deadline = time.monotonic() + 5  # five progress periods of each job
        while time.monotonic() < deadline:
            rows = outbox.execute(
                "SELECT job_id, count(*) FROM callback_outbox WHERE type = 'job.progress' "
                "AND node IS NULL GROUP BY job_id"
            ).fetchall()
            assert {job_id for job_id, _ in rows} <= set(alice)
            most = max([most] + [n for _, n in rows])
            time.sleep(0.2)
        assert most == 1  # one waiting progress event per job, not one per period
        (total,) = outbox.execute("SELECT count(*) FROM callback_outbox").fetchone()
        assert total <= 2 * len(alice)  # (one waiting and one in flight per job, at most)
        began = time.monotonic()
        bob = start(srv, "bob", healthy.url)
        got = healthy.wait_for(lambda rs: finished(rs), timeout=30)
        assert time.monotonic() - began < 10  # less than one of alice's attempts
        assert finished(got)[0].data["id"] == bob
        assert silent.most_open == 1
    finally:
        outbox.close()
        srv.stop()
        healthy.stop()
        silent.close()


def test_a_node_stopped_during_a_hung_attempt_stops_in_time_and_writes_it(fresh_server):
    silent = HostileReceiver(every=None)
    srv = node(fresh_server, timeout='"60s"', retry_delay='"30s"')
    try:
        job_id = start(srv, "alice", silent.url)
        silent.wait(lambda s: len(s.ids) >= 1)
        began = time.monotonic()
        srv.stop()
        took = time.monotonic() - began
        log = srv.log()
        assert "did not stop in time" not in log, log[-3000:]
        assert took < 15, took  # the main process's bound for its processes (15 s)
        silent.wait(lambda s: len(s.closed) >= 1, timeout=5)  # the attempt was cut
        srv.start()
        (row,) = wait_history(srv, "alice", job_id, "interrupted by the node's shutdown")
        assert "(attempt 1 of 12; next in 30 s)" in row, row
    finally:
        srv.stop()
        silent.close()
