"""The status page's feed (``status_stream.StatusFeed``) on a real Notifier, without HTTP:
changes told from other threads are coalesced into a few snapshots, each read once for
every open stream, nothing is read while no page is open, and closing ends the streams."""

import asyncio
import json
import threading
import time

from xruntime.admin.status_stream import _END, StatusEvents, StatusFeed
from xruntime.engine.notifier import Notifier

PERIOD = 0.2


class Counting:
    """A snapshot source that counts its reads; ``state`` is what the store would hold."""

    def __init__(self):
        self.reads = 0
        self.state = "before"

    def __call__(self):
        self.reads += 1
        return {"read": self.reads, "state": self.state}


def new_feed(source=None):
    """A feed on a real Notifier (and the Counting source it reads)."""
    notifier, source = Notifier(), source or Counting()
    return notifier, source, StatusFeed(source, notifier, period=PERIOD)


def run(coro):
    return asyncio.run(coro)


async def in_pool(fn):
    """``fn`` in a thread, as the change feed's thread calls the notifier."""
    await asyncio.get_running_loop().run_in_executor(None, fn)


async def settle():
    """Lets every task that can go on run until it waits (the loop's turns, not a time)."""
    for _ in range(100):
        await asyncio.sleep(0)


async def next_snapshot(stream, timeout=30.0):
    event = await stream.next(timeout)
    assert event is not None and event is not _END, "no snapshot came"
    return json.loads(event)


def test_a_burst_of_changes_gives_a_few_snapshots_and_the_last_state():
    async def scenario():
        notifier, source, feed = new_feed()
        stream = feed.subscribe()
        assert (await next_snapshot(stream))["state"] == "before"  # at once, read now

        def burst():  # 200 changes over about a second
            for i in range(200):
                source.state = f"change {i}"
                notifier.notify_local(f"job-{i}")
                time.sleep(0.005)

        seen = []

        async def read_until_the_last():
            while not seen or seen[-1]["state"] != "change 199":
                seen.append(await next_snapshot(stream))

        began = time.monotonic()
        await asyncio.gather(in_pool(burst), read_until_the_last())
        took = time.monotonic() - began
        assert len(seen) >= 3, "the burst's changes must show while it lasts"
        assert source.reads <= took / PERIOD + 2, f"{source.reads} reads in {took:.2f} s"
        assert await stream.next(0.6) is None, "nothing changed: no snapshot"
        feed.unsubscribe(stream)

    run(scenario())


def test_every_open_stream_gets_the_same_read():
    async def scenario():
        notifier, source, feed = new_feed()
        streams = [feed.subscribe() for _ in range(50)]
        firsts = [await next_snapshot(s) for s in streams]
        assert {f["read"] for f in firsts} == {1}
        source.state = "after"
        await in_pool(lambda: notifier.notify_local("job"))
        seconds = [await next_snapshot(s) for s in streams]
        assert {(s["read"], s["state"]) for s in seconds} == {(2, "after")}
        assert source.reads == 2
        for s in streams:
            feed.unsubscribe(s)

    run(scenario())


def test_nothing_is_read_while_no_page_is_open():
    async def scenario():
        notifier, source, feed = new_feed()
        stream = feed.subscribe()
        await next_snapshot(stream)
        feed.unsubscribe(stream)
        for i in range(20):
            notifier.notify_local(f"job-{i}")
        await asyncio.sleep(3 * PERIOD)  # (a read for them would have come by now)
        assert source.reads == 1
        source.state = "later"
        again = feed.subscribe()  # a page opened later reads afresh
        assert (await next_snapshot(again))["state"] == "later"
        feed.unsubscribe(again)

    run(scenario())


def test_closing_the_notifier_ends_every_stream_at_once():
    async def scenario():
        notifier, _, feed = new_feed()
        streams = [feed.subscribe() for _ in range(5)]
        for s in streams:
            await next_snapshot(s)
        waiting = [asyncio.ensure_future(s.next(60)) for s in streams]
        await settle()
        assert not any(w.done() for w in waiting), "every stream waits for its next"
        began = time.monotonic()
        threading.Thread(target=notifier.close).start()  # from another thread
        assert await asyncio.gather(*waiting) == [_END] * 5
        assert time.monotonic() - began < 1.0
        assert await feed.subscribe().next(60) is _END  # and no new one waits

    run(scenario())


def test_a_store_that_cannot_be_read_gives_an_error_snapshot():
    async def scenario():
        def broken():
            raise OSError("database is away")

        _, _, feed = new_feed(broken)
        stream = feed.subscribe()
        snap = await next_snapshot(stream)
        assert "cannot be read" in snap["error"] and "database is away" not in snap["error"]
        feed.unsubscribe(stream)

    run(scenario())


def test_a_page_closed_ends_its_stream():
    """The client going away (``http.disconnect``) ends the stream at once: uvicorn
    drops what is sent to a closed connection without a word, so a stream that did not
    watch for it would stay subscribed for ever."""

    async def scenario():
        _, _, feed = new_feed()
        sent, gone = [], asyncio.Event()

        async def receive():
            if not sent:
                return {"type": "http.request", "body": b"", "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": "/status/events", "headers": []}
        serving = asyncio.ensure_future(
            StatusEvents(feed).serve(scope, receive, send, lambda: True)
        )
        for _ in range(3000):  # (30 s)
            if any(b"data: " in m.get("body", b"") for m in sent):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("no event was sent within 30 s")
        assert len(feed._streams) == 1
        gone.set()
        await asyncio.wait_for(serving, 30.0)
        assert not feed._streams

    run(scenario())
