"""What one connection may take of an HTTP process, before any binding sees a request
(docs/protocol.md §15): header bytes, the time to send the headers and the body, and a
place among the process's connections.

uvicorn's httptools protocol bounds none of them (docs/architecture.md, "Decisions of
the implementation", says what that cost); ``guarded_protocol`` is that protocol with
the three bounds:

- more than ``[server] max_header_bytes`` before the headers end: HTTP 431, closed;
- no complete headers within ``[server] header_timeout`` of the connection's start (or
  of its previous answer): HTTP 408 when some were sent, else closed quietly (the
  keep-alive timeout's job, for a connection that never sent anything);
- a body not complete within ``[server] body_timeout`` of the end of its headers: HTTP
  408, closed (else a body sent a byte at a time holds its connection and its buffer);
- an idle keep-alive connection is closed after ``[server] keep_alive_timeout`` (read
  at each new connection, where uvicorn takes one figure at start);
- at ``[server] max_connections`` connections, a new one makes room by closing the
  one that has waited longest for its headers (a slow or silent sender); when every
  connection is serving a request (held watches included), the new one is answered
  503, so that the process keeps answering.

Each refusal is logged at most once per period.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import resource
from collections.abc import Callable
from itertools import chain
from typing import TYPE_CHECKING, Any, Literal

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..support.logs import OncePerPeriod
from .coalescing import Coalescing, Turn

if TYPE_CHECKING:
    from ..settings.config import Settings

log = logging.getLogger(__name__)
_logs: dict[str, OncePerPeriod] = {}


def _log(kind: str) -> OncePerPeriod:
    """One throttled log per kind of refusal, so that one kind never hides another."""
    if kind not in _logs:
        _logs[kind] = OncePerPeriod(log, 10.0)
    return _logs[kind]


class _Refused(Exception):
    """Raised in a parser callback to stop parsing a request that was refused (httptools
    hands it to uvicorn as a parser error, whose 400 ``send_400_response`` leaves out)."""


def _answer(status: str, text: str) -> bytes:
    body = text.encode("utf-8")
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode("ascii") + body


def _file_room() -> int:
    """Connections this process can hold before it runs out of file descriptors
    (keeping some for the database, pipes and the feed)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, soft - 128) if soft != resource.RLIM_INFINITY else 1 << 30


class _Event(asyncio.Event):
    """asyncio's ``Event``, whose queue of waiters is made when one first waits.  uvicorn
    makes two for each connection (its flow control's and the request's), and a held
    watch waits on neither: an empty ``deque`` is a 600-byte block, 1.2 kB a watch."""

    def __init__(self) -> None:  # (not Event's: it makes the deque)
        self._value = False
        self._waiters = ()  # type: ignore[assignment]  # (iterated by set, no more)

    async def wait(self) -> Literal[True]:
        if not self._value and not self._waiters:
            self._waiters = collections.deque()
        return await super().wait()


class _Pipeline(list[Any]):
    """uvicorn's queue of a connection's pipelined requests (``appendleft``, ``pop``,
    truth) as a list: an empty list holds no block, an empty ``deque`` 600 bytes, on
    every connection, for requests pipelined behind one in progress, which hardly any
    client sends."""

    __slots__ = ()

    def appendleft(self, item: Any) -> None:
        self.insert(0, item)


def guarded_protocol(settings: Callable[[], Settings]) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol bounded by ``settings()`` (read at each use, so
    that a reload applies to the next connection)."""

    room = _file_room()

    # The connections waiting for a request's headers, the one waiting longest first
    # (a dict keeps the order its keys came in): making room costs one look, not a
    # pass over every connection at each new one (10 000 held watches made that the
    # node's main cost while they connected).
    awaiting: dict[GuardedProtocol, None] = {}
    turns: list[Turn] = []  # the turn of the loop serving (one; a test's loops in turn)

    def turn_of(loop: asyncio.AbstractEventLoop) -> Turn:
        if not turns or turns[0].loop is not loop:
            turns[:] = [Turn(loop)]
        return turns[0]

    class GuardedProtocol(HttpToolsProtocol):
        # In slots: four more names in uvicorn's instance dict (27 of its own) would
        # take it past the 30 a dict can share with its class's other instances, and
        # make each connection's dict 1.3 kB larger (13 MB for 10 000 held watches).
        __slots__ = (
            "_awaiting_headers",
            "_body_timer",
            "_in_body",
            "_header_bytes",
            "_header_timer",
            "_waiting_since",
        )

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.pipeline = _Pipeline()  # type: ignore[assignment]  # (its three uses)
            self.timeout_keep_alive = settings().keep_alive_timeout_ms / 1000  # type: ignore[assignment]  # call_later takes a float
            self._awaiting_headers, self._header_bytes = False, 0
            self._header_timer, self._waiting_since = None, 0.0
            self._in_body = False
            self._body_timer: asyncio.TimerHandle | None = None

        # narrower than BaseProtocol's BaseTransport, as uvicorn's own (which ignores it too)
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            limit = min(settings().max_connections, room)
            super().connection_made(transport)
            writable = self.flow._is_writable_event = _Event()  # (as FlowControl's own)
            writable.set()
            # an answer's start and body in one write (uvicorn's own make two)
            self.transport = Coalescing(transport, turn_of(self.loop))  # type: ignore[assignment]
            if len(self.connections) > limit:
                if awaiting:  # the one that has waited longest for its headers
                    oldest = next(iter(awaiting))
                    _log("evicted").warning(
                        "%d connections: closed one that sent no complete request "
                        "for %.1f s (max_connections %d)",
                        len(self.connections) - 1,
                        self.loop.time() - oldest._waiting_since,
                        limit,
                    )
                    oldest._close(b"")
                else:
                    _log("full").warning(
                        "%d connections, every one serving a request: a new one was "
                        "answered 503 (max_connections %d)",
                        len(self.connections) - 1,
                        limit,
                    )
                    self._close(
                        _answer(
                            "503 Service Unavailable",
                            "this server process has as many connections as it takes; try again\n",
                        )
                    )
                    return
            self._await_headers()
            self._start_header_timer()

        def _await_headers(self):
            """Between requests: the next one's headers are counted and timed from its
            first byte (an idle keep-alive connection is uvicorn's keep-alive timeout's)."""
            self._header_bytes = 0
            self._begin_waiting()
            self._cancel_header_timer()

        def _begin_waiting(self):
            self._awaiting_headers = True
            self._waiting_since = self.loop.time()
            awaiting.pop(self, None)
            awaiting[self] = None  # (last: it has waited least)

        def _end_waiting(self):
            self._awaiting_headers = False
            awaiting.pop(self, None)

        def _start_header_timer(self):
            self._header_timer = self.loop.call_later(
                settings().header_timeout_ms / 1000, self._headers_too_slow
            )

        def _cancel_header_timer(self):
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self):
            self._header_timer = None
            if not self._awaiting_headers or self.transport.is_closing():
                return
            if self._header_bytes:
                _log("slow headers").warning(
                    "closed a connection from %s: its headers took longer than %d ms",
                    (self.client or ("?",))[0],
                    settings().header_timeout_ms,
                )
                self._close(
                    _answer("408 Request Timeout", "the request's headers came too slowly\n")
                )
            else:
                self._close(b"")

        def _cancel_body_timer(self):
            self._in_body = False
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _body_too_slow(self):
            self._body_timer = None
            if not self._in_body or self.transport.is_closing():
                return
            _log("slow body").warning(
                "closed a connection from %s: its request's body took longer than %d ms",
                (self.client or ("?",))[0],
                settings().body_timeout_ms,
            )
            cycle = self.cycle
            started = cycle is not None and cycle.response_started
            self._close(
                b""  # an answer begun cannot be replaced; closing tells the client
                if started
                else _answer("408 Request Timeout", "the request's body came too slowly\n")
            )

        def _close(self, answer: bytes):
            self._end_waiting()
            self._cancel_header_timer()
            self._cancel_body_timer()
            if answer:
                self.transport.write(answer)
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._awaiting_headers:
                if self._header_timer is None:
                    self._start_header_timer()
                limit = settings().max_header_bytes
                room = limit + 65536 - self._header_bytes  # past it by more than one read:
                self._header_bytes += len(data)
                if len(data) > room:  # not parsed past it, unless the headers end before
                    super().data_received(data[: max(room, 0)])  # (a body in the same read)
                    if self._awaiting_headers and not self.transport.is_closing():
                        self._too_large(limit)
                    if self.transport.is_closing():
                        return
                    data = data[max(room, 0) :]
            super().data_received(data)
            if self._in_body and self._body_timer is None and not self.transport.is_closing():
                # the headers came in this read and the body is not all here: it is timed
                # (a request without a body, or with all of it in this read, never is)
                self._body_timer = self.loop.call_later(
                    settings().body_timeout_ms / 1000, self._body_too_slow
                )

        def send_400_response(self, msg: str) -> None:
            if not self.transport.is_closing():  # not after a refusal of ours
                super().send_400_response(msg)

        def _too_large(self, limit: int) -> None:
            _log("header bytes").warning(
                "closed a connection from %s: more than %d bytes of request line and headers "
                "(max_header_bytes)",
                (self.client or ("?",))[0],
                limit,
            )
            self._close(
                _answer(
                    "431 Request Header Fields Too Large",
                    f"the request line and headers hold more than {limit} bytes\n",
                )
            )

        def on_message_begin(self):
            super().on_message_begin()
            if not self._awaiting_headers:  # a pipelined request: its wait begins
                self._header_bytes = 0
                self._begin_waiting()

        def on_headers_complete(self):
            self._end_waiting()
            self._cancel_header_timer()
            limit = settings().max_header_bytes
            headers = self.headers  # (name, value) pairs: their bytes, and 4 a line
            size = len(self.url) + sum(map(len, chain.from_iterable(headers))) + 4 * len(headers)
            if size > limit:
                self._too_large(limit)
                raise _Refused  # the parser stops here: the request never starts
            before = self.cycle
            super().on_headers_complete()
            if self.cycle is not before:  # a new request: nothing waits on its event yet
                self.cycle.message_event = _Event()
            self._in_body = True

        def on_message_complete(self):
            self._cancel_body_timer()
            super().on_message_complete()

        def on_response_complete(self):
            super().on_response_complete()
            if not self.transport.is_closing():
                self._await_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            self._end_waiting()
            self._cancel_header_timer()
            self._cancel_body_timer()
            super().connection_lost(exc)

    return GuardedProtocol
