"""The status page over real HTTP (requests, no browser): the page, the redirect, the
Server-Sent Events stream (a snapshot at once, the next within a second of a change,
coalesced, one read shared by every open stream), admin-only with accounts on, the
node's uptime, and a node with open streams stopping promptly on SIGTERM."""

import json
import os
import queue
import re
import signal
import socket
import threading
import time

import pytest
import requests

from tests.e2e.test_accounts import accounts_toml, creds
from tests.e2e.test_config_reload import apply
from tests.harness import Server
from tests.waiting import PATIENCE, until

SOON = 1.0  # s: a change shows on the stream this soon
PERIOD = 0.5  # s: status_stream.PERIOD, the least time between two snapshots


class EventStream:
    """``/status/events`` read in a thread: each event's data as a dict, with the time it
    came, and None at the stream's end."""

    def __init__(self, base, auth=None):
        self.response = requests.get(
            f"{base}/status/events", stream=True, auth=auth, timeout=(5, 60)
        )
        assert self.response.status_code == 200, (self.response.status_code, self.response.text)
        assert self.response.headers["Content-Type"].startswith("text/event-stream")
        self.events = queue.Queue()
        self.ended = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        # each HTTP chunk as it comes (iter_lines would wait for 512 bytes)
        buffer = b""
        try:
            for chunk in self.response.raw.read_chunked(decode_content=True):
                buffer += chunk
                *events, buffer = buffer.split(b"\n\n")
                for event in events:
                    for line in event.decode("utf-8").splitlines():
                        if line.startswith("data: "):
                            self.events.put((time.monotonic(), json.loads(line[len("data: ") :])))
        except Exception:  # closed by close(), or cut off
            pass
        self.ended.set()
        self.events.put((time.monotonic(), None))

    def next(self, timeout=PATIENCE):
        """The next snapshot; fails when none comes within ``timeout`` s."""
        try:
            return self.events.get(timeout=timeout)[1]
        except queue.Empty:
            raise AssertionError(f"no event within {timeout} s") from None

    def until(self, predicate, timeout=PATIENCE):
        """Snapshots until one satisfies ``predicate``: (that one, how many came)."""
        deadline, count = time.monotonic() + timeout, 0
        while True:
            snap = self.next(max(0.01, deadline - time.monotonic()))
            assert snap is not None, "the stream ended"
            count += 1
            if predicate(snap):
                return snap, count

    def close(self):
        """Hang up (the reading thread is woken by the socket's shutdown; closing the
        response alone would wait for the reader's lock until the next heartbeat)."""
        connection = self.response.raw.connection
        if connection is not None and connection.sock is not None:
            connection.sock.shutdown(socket.SHUT_RDWR)
        self.response.close()


def running_ids(snap):
    return {job["id"] for job in snap["running"]}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """One node with one HTTP process, so that every stream is served by the same feed."""
    srv = Server(str(tmp_path_factory.mktemp("status")), server_keys={"processes": 1}).start()
    yield srv
    srv.stop()


def test_the_page_is_html_and_the_root_leads_to_it(node):
    page = requests.get(f"{node.base}/status", timeout=10)
    assert page.status_code == 200 and page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert '<meta name="viewport"' in page.text and 'EventSource("status/events")' in page.text
    assert "innerHTML" not in page.text  # data go in as text, never markup
    root = requests.get(f"{node.base}/", allow_redirects=False, timeout=10)
    assert root.status_code in (302, 303, 307)
    followed = requests.get(f"{node.base}/", timeout=10)
    assert followed.url == f"{node.base}/status" and followed.status_code == 200
    assert requests.post(f"{node.base}/status", timeout=10).status_code == 405
    one = requests.get(f"{node.base}/status.json", timeout=10).json()
    assert one["workers"]["total"] == node.workers and "QUEUING" in one["jobs"]


def test_a_snapshot_at_once_and_another_within_a_second_of_a_change(node):
    began = time.monotonic()
    stream = EventStream(node.base)
    try:
        first = stream.next()
        assert time.monotonic() - began < SOON + 1, "the first snapshot must come at once"
        assert first["node"] and first["workers"]["total"] == node.workers
        job = node.start_job(durationMs=3000, steps=6)
        started = time.monotonic()
        shown, _ = stream.until(
            lambda s: job["id"] in running_ids(s) or s["queued"] > first["queued"]
        )
        assert time.monotonic() - started < SOON + PERIOD, "a new job must show within a second"
        running, _ = stream.until(
            lambda s: any(
                j["id"] == job["id"] and (j["bar"] or {}).get("fraction") for j in s["running"]
            )
        )
        entry = next(j for j in running["running"] if j["id"] == job["id"])
        assert (entry["service"], entry["operation"], entry["status"]) == (
            "XDemo",
            "simulate",
            "RUNNING",
        )
        assert entry["bar"]["text"].endswith("/6") and running["workers"]["busy"] >= 1
        # (a snapshot is three reads: one may straddle the job's end, and the change
        # that arrived meanwhile brings the next, consistent one)
        stream.until(
            lambda s: (
                job["id"] not in running_ids(s)
                and s["jobs"]["SUCCEEDED"] >= 1
                and s["workers"]["busy"] == 0
            ),
            timeout=15,
        )
    finally:
        stream.close()


def test_many_changes_are_coalesced_into_a_few_snapshots(node):
    """60 short jobs make some 180 job changes (queued, running, finished) within a few
    seconds; the stream sends a snapshot per period at most, not one per change."""
    stream = EventStream(node.base)
    try:
        before = stream.next()["jobs"]["SUCCEEDED"]
        began = time.monotonic()
        for _ in range(60):
            node.start_job(durationMs=0, steps=1)
        last, count = stream.until(lambda s: s["jobs"]["SUCCEEDED"] >= before + 60, timeout=60)
        took = time.monotonic() - began
        assert count <= took / PERIOD + 3, f"{count} snapshots in {took:.1f} s"
        assert count < 60
    finally:
        stream.close()


def test_open_streams_share_one_read(node):
    """20 pages open at once: each snapshot is read once for all of them (the same read
    time in every stream), not once per page."""
    streams = [EventStream(node.base) for _ in range(20)]
    try:
        for s in streams:
            s.next()
        job = node.start_job(durationMs=1500, steps=5)
        seen = []
        for s in streams:
            s.until(lambda snap: job["id"] in running_ids(snap))
            done, _ = s.until(lambda snap: job["id"] not in running_ids(snap))
            seen.append(done["at"])
        assert len(set(seen)) == 1, "every page must be sent the same snapshot"
    finally:
        for s in streams:
            s.close()


PG_URL = os.environ.get("XRUNTIME_TEST_DATABASE_URL")


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_job_queued_behind_busy_workers_shows_in_the_queue(tmp_path, database):
    """The only change a queued job makes is "a job was queued" (no job id goes out):
    the page learns of it too, on either database's change feed, from another HTTP
    process than the one that took the start."""
    url = None
    if database == "postgresql":
        if not PG_URL:
            pytest.skip("XRUNTIME_TEST_DATABASE_URL is not set")
        from sqlalchemy import MetaData, create_engine

        engine = create_engine(PG_URL)
        tables = MetaData()
        tables.reflect(engine)
        tables.drop_all(engine)
        engine.dispose()
        url = PG_URL
    srv = Server(
        str(tmp_path / "node"), database_url=url, workers=1, server_keys={"processes": 2}
    ).start()
    try:
        busy = srv.start_job(durationMs=8000, steps=1)  # no progress until it ends
        srv.wait_status(busy["id"], "RUNNING")
        streams = [EventStream(srv.base) for _ in range(4)]  # as the kernel spreads them
        for s in streams:
            s.until(lambda snap: snap["workers"]["busy"] == 1 and snap["queued"] == 0)
        srv.start_job(durationMs=0, steps=1)
        started = time.monotonic()
        for s in streams:
            s.until(lambda snap: snap["queued"] == 1)
        assert time.monotonic() - started < SOON + PERIOD
        for s in streams:
            s.close()
    finally:
        srv.stop()


def test_uptime_is_the_nodes_even_after_an_http_process_was_replaced(tmp_path):
    srv = Server(str(tmp_path / "node"), server_keys={"processes": 1}).start()
    try:
        # the node ages 2 s first, so that the replacement's own uptime would be less
        time.sleep(2)
        pids = until(
            lambda: re.findall(r"HTTP process 0 is up \(pid (\d+)\)", srv.log()),
            "the log names HTTP process 0's pid",
        )
        os.kill(int(pids[-1]), signal.SIGKILL)
        until(
            lambda: srv.log().count("HTTP process 0 is up") >= 2,
            "an HTTP process replaced the killed one",
        )
        snap = requests.get(f"{srv.base}/status.json", timeout=10).json()
        assert snap["uptimeMs"] >= 2000
        info = srv.call("XRuntime", "getRuntimeInformation", {})
        assert info["uptime"] >= 2000
    finally:
        srv.stop()


def test_a_node_with_open_streams_stops_promptly(tmp_path):
    srv = Server(str(tmp_path / "node"), server_keys={"processes": 2}).start()
    streams = [EventStream(srv.base) for _ in range(4)]
    for s in streams:
        s.next()
    began = time.monotonic()
    assert srv.stop(signal.SIGTERM) == 0
    assert time.monotonic() - began < 5, "an open status page must not hold up the shutdown"
    for s in streams:
        assert s.ended.wait(PATIENCE), "the stream must end with the node"


def test_with_accounts_on_only_an_admin_sees_the_status_and_a_demoted_admins_stream_ends(tmp_path):
    users = {"alice": {}, "root": {"admin": True}}
    srv = Server(str(tmp_path / "node"), extra=accounts_toml(users), auth=creds("root")).start()
    try:
        for path in ("/", "/status", "/status/events", "/status.json"):
            url = srv.base + path
            anonymous = requests.get(url, allow_redirects=False, timeout=10)
            assert anonymous.status_code == 401, path
            assert anonymous.headers["WWW-Authenticate"] == 'Basic realm="xruntime"'
            wrong = requests.get(
                url, auth=("root", "not-the-token"), allow_redirects=False, timeout=10
            )
            assert wrong.status_code == 401, path
            assert (
                requests.get(
                    url, auth=creds("alice"), allow_redirects=False, timeout=10
                ).status_code
                == 403
            ), path
        assert requests.get(f"{srv.base}/status", auth=creds("root"), timeout=10).status_code == 200
        assert requests.get(
            f"{srv.base}/", auth=creds("root"), allow_redirects=False, timeout=10
        ).status_code in (302, 303, 307)
        job = srv.start_job(durationMs=2000, steps=4)  # root's own job
        stream = EventStream(srv.base, auth=creds("root"))
        try:
            snap, _ = stream.until(lambda s: job["id"] in running_ids(s))
            assert next(j for j in snap["running"] if j["id"] == job["id"])["user"] == "root"
            # the administrator takes root's admin away: the open page is told nothing more
            apply(srv, accounts_toml({"alice": {}, "root": {}}))
            srv.start_job(durationMs=100, steps=1)  # a change: the next event
            assert stream.ended.wait(PATIENCE), "the stream must end once its admin is demoted"
            assert "its credentials no longer admit it" in srv.log()
            assert (
                requests.get(
                    f"{srv.base}/status/events", auth=creds("root"), timeout=10
                ).status_code
                == 403
            )
        finally:
            stream.close()
    finally:
        srv.stop()
