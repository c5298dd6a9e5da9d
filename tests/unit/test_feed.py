"""The SQLite change feed: job changes between the processes that use one file.

Each feed here stands for one process of a node; they run in this test's process, on
one real SQLite file, and talk over real Unix datagram sockets.
"""

import threading
import time

import pytest

import xruntime.store.feed as feed_module
from tests.waiting import PATIENCE, until
from xruntime.store import JobStore
from xruntime.store.changes import MISSED, QUEUE
from xruntime.store.feed import SocketFeed

from .conftest import sqlite_url


class Process:
    """What one process hears from its feed."""

    def __init__(self, store, origin):
        self.jobs, self.queued = [], 0
        self.heard = threading.Event()
        self.feed = SocketFeed(store, origin, self._job, self._queue)

    def _job(self, job_id):
        self.jobs.append(job_id)
        self.heard.set()

    def _queue(self):
        self.queued += 1
        self.heard.set()

    def wait(self, timeout=PATIENCE):
        assert self.heard.wait(timeout), "nothing arrived"
        self.heard.clear()


def members_known(*processes):
    """Until each of ``processes`` has every other one among the members it sends to (a
    later one reads them when it starts; the earlier ones when its hello reaches them)."""
    for p in processes:
        others = {q.feed.address for q in processes if q is not p}
        until(
            lambda p=p, others=others: others <= set(p.feed._members),
            f"{p.feed.origin} knows the others",
        )


@pytest.fixture
def processes(tmp_path):
    store = JobStore(sqlite_url(tmp_path))
    made = []

    def make(origin):
        p = Process(store, origin)
        p.feed.start()
        made.append(p)
        return p

    yield make
    for p in made:
        p.feed.close()
    store.close()


def test_a_change_reaches_every_other_process_at_once_and_not_its_own(processes):
    a, b, c = processes("n/main/1"), processes("n/http0/2"), processes("n/http1/3")
    members_known(a, b, c)
    started = time.monotonic()
    a.feed.publish("job-1")
    b.wait()
    c.wait()
    assert time.monotonic() - started < 0.5
    assert b.jobs == ["job-1"] and c.jobs == ["job-1"]
    # (a wait for something that does not come: had a sent to itself, it would have
    # heard by now, as b and c did within the time asserted above)
    time.sleep(0.1)
    assert a.jobs == [], "a process is not told of its own changes"


def test_new_work_is_told_as_queued(processes):
    a, b = processes("n/http0/1"), processes("n/main/2")
    members_known(a, b)
    a.feed.publish(QUEUE)
    b.wait()
    assert b.queued == 1 and b.jobs == []


def test_a_burst_arrives_whole(processes):
    a, b = processes("n/main/1"), processes("n/http0/2")
    members_known(a, b)
    ids = [f"job-{i}" for i in range(5000)]
    for job_id in ids:
        a.feed.publish(job_id)
    until(lambda: len(set(b.jobs)) >= len(ids), "all 5000 ids reached b")
    assert set(b.jobs) == set(ids)


def test_a_member_that_starts_later_is_told_at_once(processes, monkeypatch):
    # a reads the members only when told: its own re-read (every REFRESH_PERIOD) would
    # find b too, so it is put off for an hour
    monkeypatch.setattr(feed_module, "REFRESH_PERIOD", 3600.0)
    a = processes("n/main/1")
    b = processes("n/http0/2")  # it says hello: a reads the members again
    members_known(a, b)
    a.feed.publish("job-1")
    b.wait()
    assert b.jobs == ["job-1"]


def test_a_member_gone_is_left_out_and_the_others_still_hear(processes):
    a, b, c = processes("n/main/1"), processes("n/http0/2"), processes("n/http1/3")
    members_known(a, b, c)
    b.feed._inbox.close()  # as if the process were killed: its row stays
    a.feed.publish("job-1")
    c.wait()
    assert c.jobs == ["job-1"]
    a.feed.publish("job-2")
    c.wait()
    assert c.jobs == ["job-1", "job-2"]


def send_as(address: str, datagram: bytes, uid=None):
    """A datagram to a feed's socket, from this process or, as root, from another user's."""
    import os
    import socket
    import subprocess

    if uid is None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(datagram, address)
        return
    code = (
        "import socket,sys; s=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
        "s.sendto(bytes.fromhex(sys.argv[2]), sys.argv[1].replace('@', chr(0), 1))"
    )
    # (the system's Python: another user cannot read root's pyenv)
    subprocess.run(
        ["/usr/bin/python3", "-c", code, address.replace("\0", "@", 1), datagram.hex()],
        check=True,
        preexec_fn=lambda: os.setuid(uid),
        timeout=30,
        cwd="/",
    )


def test_malformed_datagrams_and_other_users_are_dropped_quietly(processes, caplog):
    """benchmarks/abuse.py, item 9: a malformed datagram logged a traceback, and any local user can
    reach the feed's abstract socket. Both are dropped, with one line at most."""
    import os

    a = processes("n/main/1")  # (its socket is bound: what is sent now waits there)
    with caplog.at_level("WARNING", logger="xruntime.store.feed"):
        send_as(a.feed.address, b"\xff\xfe not utf-8")
        send_as(a.feed.address, b"n/x/9\njob\x00with a NUL")
        if os.getuid() == 0 and os.path.exists("/usr/bin/python3"):
            send_as(a.feed.address, b"n/x/9\nsomeone-elses-job", uid=65534)
        send_as(a.feed.address, b"n/x/9\njob-ok")  # the control: heard
        a.wait()
    assert a.jobs == ["job-ok"]
    assert "Traceback" not in caplog.text and "could not be handled" not in caplog.text
    assert caplog.text.count("the change feed dropped") == 1  # one line a minute


def test_an_event_loop_receives_the_changes_itself(tmp_path):
    """An HTTP process's feed receives on its event loop, where its watches wait: a
    change reaches ``on_job`` in the loop's thread, and closing the feed stops it."""
    import asyncio

    store = JobStore(sqlite_url(tmp_path))
    sender = Process(store, "node/main")
    sender.feed.start()

    async def main():
        loop = asyncio.get_running_loop()
        heard = loop.create_future()
        threads = []

        def on_job(job_id):
            threads.append(threading.get_ident())
            if not heard.done():
                heard.set_result(job_id)

        receiver = SocketFeed(store, "node/http0", on_job, lambda: None)
        receiver.start(loop)
        try:
            assert not receiver._receiver.is_alive()  # no thread of its own
            for _ in range(int(PATIENCE / 0.01)):  # until the sender knows it
                if receiver.address in sender.feed._members:
                    break
                await asyncio.sleep(0.01)
            sender.feed.publish("job-1")
            assert await asyncio.wait_for(heard, PATIENCE) == "job-1"
            assert threads == [threading.get_ident()]  # the loop's own thread
        finally:
            receiver.close()
        assert receiver._loop is None  # no longer reading its socket

    try:
        asyncio.run(main())
    finally:
        sender.feed.close()
        store.close()


def datagrams_queued() -> int:
    """The datagrams Linux queues on a Unix socket (``net.unix.max_dgram_qlen``)."""
    with open("/proc/sys/net/unix/max_dgram_qlen") as f:
        return int(f.read())


def _blocked_then_reading(tmp_path, monkeypatch, count):
    """``count`` changes published, each in a datagram of its own, to a member whose
    event loop does not read its socket meanwhile (Linux queues ``datagrams_queued()``
    of them); answers every id it then hears once its loop reads again."""
    import asyncio

    monkeypatch.setattr(feed_module, "INLINE_GAP_S", 0.0)  # each change sent at once, alone
    store = JobStore(sqlite_url(tmp_path))
    sender = Process(store, "node/main")
    sender.feed.start()
    heard: list[str] = []

    async def main():
        receiver = SocketFeed(store, "node/http0", heard.append, lambda: None)
        receiver.start(asyncio.get_running_loop())
        try:
            until(lambda: receiver.address in sender.feed._members, "the sender knows it")
            for i in range(count):  # (the loop is held here: nothing is read)
                sender.feed.publish(f"job-{i}")
            until(lambda: not sender.feed._outbox, "the sender took every change")
            with sender.feed._sending:  # (and sent what it could)
                pass
            for _ in range(int(PATIENCE / 0.01)):  # now the loop reads
                if heard and (len(set(heard)) >= count or heard[-1] == MISSED):
                    break
                await asyncio.sleep(0.01)
        finally:
            receiver.close()

    try:
        asyncio.run(main())
    finally:
        sender.feed.close()
        store.close()
    return heard


def test_a_member_too_busy_to_read_hears_every_change_once_it_reads(tmp_path, monkeypatch):
    """Under load an HTTP process's loop can be busy for longer than its socket's queue
    lasts: the changes it could not take are sent again, not dropped (a watch of a job
    whose end was dropped would answer only at its maximum polling period)."""
    ids = [f"job-{i}" for i in range(datagrams_queued() + 50)]  # (50 more than it queues)
    heard = _blocked_then_reading(tmp_path, monkeypatch, len(ids))
    assert set(heard) == set(ids)


def test_a_member_busy_for_too_long_is_told_it_missed_changes(tmp_path, monkeypatch):
    """Past HELD_MAX ids held for one member it is told MISSED (its watches read their
    jobs again) instead of every id."""
    monkeypatch.setattr(feed_module, "HELD_MAX", 20)
    count = datagrams_queued() + 60  # (60 more than it queues: 40 past HELD_MAX)
    heard = _blocked_then_reading(tmp_path, monkeypatch, count)
    assert heard[-1] == MISSED
    assert len(heard) < count
