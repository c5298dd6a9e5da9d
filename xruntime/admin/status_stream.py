"""The status page's live feed: Server-Sent Events woken by job changes, never a timer.

Each HTTP process has one ``StatusFeed``.  While at least one page is open on it, the
process's Notifier tells it of every job change (and of every job queued); the first
change after a quiet spell makes it read a snapshot (``node_status.snapshot``) and
send it to every open stream.  Changes arriving meanwhile are coalesced: the next read
comes ``PERIOD`` s after the last one ended at the soonest (or as long as that read took,
if longer: at most half of one thread goes to a slow store), so a job reporting its
progress 200 times a second, or 1 000 open pages, still cost at most a few reads a
second per process.  Nothing is read while nothing changes; a comment line every
``HEARTBEAT`` s keeps proxies from closing an idle stream.  A stream ends when its
client goes away (``http.disconnect``), when the process shuts down (Notifier
``on_close``), so an open page never holds up a node's shutdown, and at its next event
or heartbeat once its credentials no longer admit it.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from ..store import StoreUnavailable
from ..support.blocking import blocking
from ..support.logs import OncePerPeriod
from ..web.asgi import Page, answer, refuse_method
from ..web.asgi_types import Receive, Scope, Send

if TYPE_CHECKING:
    from ..engine.notifier import Notifier
    from .node_status import Snapshot

log = logging.getLogger(__name__)
_trouble_log = OncePerPeriod(log, 60.0)

#: s between two snapshots at the soonest, however many changes arrive.
PERIOD = 0.5
#: s between two comment lines on a stream with nothing new.
HEARTBEAT = 15.0
#: s before a snapshot that failed (store unreachable) is tried again.
RETRY_AFTER = 5.0
#: ms the browser waits before it opens a stream again (after a restart, say).
RECONNECT_MS = 3000


class _End(enum.Enum):
    """What ``Subscription.next`` answers when its stream is to end (one member: a
    sentinel the type checker can tell from a snapshot's text)."""

    END = enum.auto()


_END = _End.END


class StatusFeed:
    """The snapshots of one HTTP process, read once and shared by all its streams.
    ``compute()`` (blocking) answers a snapshot dict."""

    def __init__(
        self, compute: Callable[[], Snapshot], notifier: Notifier, period: float = PERIOD
    ) -> None:
        self._compute = compute
        self.period = period
        self.closed = False
        self.latest: str | None = None  # the JSON text of the newest snapshot
        self.version = 0  # counts the snapshots read
        self._streams: set[Subscription] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dirty: asyncio.Event | None = None  # something changed since the last read
        self._runner: asyncio.Task[None] | None = None
        self._lock = threading.Lock()
        self._scheduled = False
        notifier.listen(self._changed, self.close)

    # ------------------------------------------------------------------ streams

    def subscribe(self) -> Subscription:
        """A new stream; its first ``next`` answers the current snapshot (read now, if
        no stream was open)."""
        self._loop = asyncio.get_running_loop()
        stream = Subscription(self)
        self._streams.add(stream)
        if self._runner is None:  # nothing was kept up to date
            self.latest = None
            self._dirty = asyncio.Event()
            self._dirty.set()
            self._runner = self._loop.create_task(self._run(self._dirty))
        return stream

    def unsubscribe(self, stream: Subscription) -> None:
        self._streams.discard(stream)
        if not self._streams and self._runner is not None:
            self._runner.cancel()  # (a read under way finishes unseen)
            self._runner = None

    async def _run(self, dirty: asyncio.Event) -> None:
        """Read a snapshot whenever ``dirty`` (this runner's ``_dirty``) is set, and wake
        every stream with it."""
        loop = asyncio.get_running_loop()
        while not self.closed:
            await dirty.wait()
            dirty.clear()
            began = loop.time()
            try:
                text = json.dumps(await blocking(self._compute), separators=(",", ":"))
            except Exception as exc:  # say so on the page, try again later
                if isinstance(exc, StoreUnavailable):
                    _trouble_log.warning("status page: no snapshot: %s", exc)
                else:  # a bug: logged whole, never shown
                    _trouble_log.exception("status page: no snapshot")
                text = json.dumps({"error": "the job store cannot be read now; retrying"})
                loop.call_later(RETRY_AFTER, dirty.set)
            self.latest, self.version = text, self.version + 1
            for stream in list(self._streams):
                stream.wake()
            await asyncio.sleep(max(self.period, loop.time() - began))

    # ------------------------------------------------------------------ from any thread

    def _changed(self, _job_id: str) -> None:
        """A job changed (or was queued): read again soon.  One hop to the loop per burst."""
        loop = self._loop
        if loop is None or not self._streams:
            return  # no page open here: the next one reads afresh anyway
        with self._lock:
            if self._scheduled:
                return
            self._scheduled = True
        _call_soon(loop, self._mark_dirty)

    def _mark_dirty(self) -> None:
        with self._lock:
            self._scheduled = False
        if self._dirty is not None:
            self._dirty.set()

    def close(self) -> None:
        """The process is shutting down: every stream ends now."""
        self.closed = True
        if self._loop is not None:
            _call_soon(self._loop, self._end_all)

    def _end_all(self) -> None:
        for stream in list(self._streams):
            stream.wake()
        if self._dirty is not None:
            self._dirty.set()


class Subscription:
    """One open stream's place in the feed: which snapshot it has sent."""

    def __init__(self, feed: StatusFeed) -> None:
        self.feed = feed
        self.sent = 0
        self.ended = False
        self._waiter: asyncio.Future[bool] | None = None

    async def next(self, timeout: float) -> str | Literal[_End.END] | None:
        """The newest snapshot not sent yet; None when ``timeout`` s pass without one;
        ``_END`` when the stream is to end."""
        while True:
            if self.ended or self.feed.closed:
                return _END
            if self.feed.latest is not None and self.feed.version > self.sent:
                self.sent = self.feed.version
                return self.feed.latest
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            timer = loop.call_later(timeout, _resolve, waiter, False)
            try:
                if not await waiter:
                    return None
            finally:
                timer.cancel()
                self._waiter = None

    def wake(self) -> None:
        if self._waiter is not None:
            _resolve(self._waiter, True)

    def end(self) -> None:
        self.ended = True
        self.wake()


class StatusEvents(Page):
    """``/status/events``: the snapshots as Server-Sent Events, the current one at once."""

    def __init__(self, feed: StatusFeed) -> None:
        self.feed = feed

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, admitted: Callable[[], bool]
    ) -> None:
        if await refuse_method(scope, send):
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache, no-store"),
                    (b"x-accel-buffering", b"no"),  # nginx: pass each event on at once
                ],
            }
        )
        if scope["method"] == "HEAD":
            await send({"type": "http.response.body", "body": b""})
            return
        await _body(send, f"retry: {RECONNECT_MS}\n\n")
        stream = self.feed.subscribe()
        watcher = asyncio.ensure_future(_until_disconnect(receive, stream))
        try:
            while True:
                event = await stream.next(HEARTBEAT)
                if event is _END:
                    break
                if not admitted():  # revoked meanwhile (a reload of the file)
                    log.info(
                        "status stream from %s ended: its credentials no longer admit it",
                        (scope.get("client") or ("an unknown address",))[0],
                    )
                    break
                await _body(send, ": still here\n\n" if event is None else f"data: {event}\n\n")
            if not stream.ended:  # (a client gone is sent nothing more)
                await send({"type": "http.response.body", "body": b""})
        finally:
            watcher.cancel()
            self.feed.unsubscribe(stream)


class StatusJson(Page):
    """``/status.json``: one snapshot, read now."""

    def __init__(self, compute: Callable[[], Snapshot]) -> None:
        self.compute = compute

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, admitted: Callable[[], bool]
    ) -> None:
        if await refuse_method(scope, send):
            return
        try:
            snapshot = await blocking(self.compute)
        except StoreUnavailable:
            await answer(
                scope,
                send,
                503,
                "application/json",
                json.dumps({"error": "the job store cannot be read now; try again"}).encode(),
                [(b"retry-after", b"5")],
            )
            return
        await answer(
            scope, send, 200, "application/json", json.dumps(snapshot, indent=1).encode() + b"\n"
        )


async def _body(send: Send, text: str) -> None:
    await send({"type": "http.response.body", "body": text.encode("utf-8"), "more_body": True})


async def _until_disconnect(receive: Receive, stream: Subscription) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    stream.end()


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    try:
        loop.call_soon_threadsafe(callback)
    except RuntimeError:  # the loop is closed: the process is ending anyway
        pass
