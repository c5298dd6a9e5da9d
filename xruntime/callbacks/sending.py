"""How a callback is sent (docs/protocol.md §14): one POST to the addresses a check
answered (``targets.Target``), within one deadline for all its steps.

The connection goes to the very address checked, named by the URL's host in ``Host``
(and, over HTTPS, in the certificate it must present).  Redirects are not followed, and
at most ``ANSWER_BYTES`` of an answer are read: its status is the answer.  A connection
is kept open for the next attempts to the same address (``Connections``), never for
another address, even of the same host.
"""

import http.client
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable

from .. import __version__
from .targets import Target

#: Bytes of a receiver's answer read at most (its status is what counts).
ANSWER_BYTES = 4096


class Interrupted(OSError):
    """An attempt cut short because the node stops (``Connections.interrupt``)."""


class _Attempt:
    """One POST under way: its deadline, the sockets it uses (duplicates, which the
    watchdog may shut down from its own thread whatever became of the originals, e.g.
    wrapped in TLS), and why it was cut, if it was."""

    __slots__ = ("deadline", "sockets", "cut")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.sockets: list[socket.socket] = []
        self.cut: str | None = None  # "deadline" or "shutdown"

    def left(self) -> float:
        """s until the deadline; TimeoutError when it has passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        return left

    def shut(self) -> None:
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # not connected (any more)


class _Pinned(http.client.HTTPConnection):
    """An HTTP connection to one checked address, named by its host in ``Host``."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address
        self.watch: Callable[[socket.socket], None] = lambda sock: None

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)
        self.watch(self.sock)  # before anything waits for the receiver (a TLS handshake)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedTls(_Pinned):
    """HTTPS to one checked address; the certificate must name the URL's host."""

    context = ssl.create_default_context()

    def connect(self) -> None:
        super().connect()
        self.sock = self.context.wrap_socket(self.sock, server_hostname=self.host)


class Connections:
    """Keep-alive connections, each to one address checked at an attempt, kept idle for
    the next attempts that resolve to the same address (a new TCP connection per
    attempt cost the node and the receiver each more than the rest of the POST).  An
    attempt takes a connection only to an address its own check answered; one kept
    longer than ``IDLE_S``, or past ``MAX_IDLE`` kept in all, is closed.

    Each POST has one deadline for connect, send, the answer's headers and its body
    together (issue 32: a timeout on each read let a receiver that answers a byte
    every few seconds hold a sender for ever): each step waits at most until the
    deadline, and a watchdog thread shuts the attempt's socket down at the deadline,
    which ends whatever step waits then.  ``interrupt`` (the node stops) shuts every
    attempt under way down at once, and refuses the ones that begin after it."""

    #: s a connection is kept idle (below the 5 s of common servers' keep-alive).
    IDLE_S = 4.0
    #: Idle connections kept at most, to every target together.
    MAX_IDLE = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, str, int, str], list[tuple[float, _Pinned]]] = {}
        self._count = 0
        self._attempts: set[_Attempt] = set()  # under way
        self._watching = threading.Condition(self._lock)  # the watchdog waits on it
        self._watchdog: threading.Thread | None = None
        self._interrupted = False
        self._closed = False

    def post(self, target: Target, headers: dict[str, str], body: bytes, timeout_s: float) -> int:
        """POST ``body`` to ``target`` (its first address that connects) and answer the
        HTTP status, all within ``timeout_s``; OSError (TimeoutError past the deadline,
        ``Interrupted`` when the node stops) or ``http.client.HTTPException`` when no
        answer came."""
        attempt = self._begin(timeout_s)
        try:
            return self._post(attempt, target, headers, body)
        except BaseException as exc:
            if attempt.cut == "shutdown":
                raise Interrupted("interrupted by the node's shutdown") from exc
            if attempt.cut == "deadline" or isinstance(exc, TimeoutError):
                raise TimeoutError("timed out") from exc
            raise
        finally:
            self._end(attempt)

    def _post(self, attempt: _Attempt, target: Target, headers: dict[str, str], body: bytes) -> int:
        kind = _PinnedTls if target.scheme == "https" else _Pinned
        error: Exception = OSError("no address")
        for address in target.addresses:
            key = (target.scheme, target.host, target.port, address.split("%")[0])
            kept = self._take(key)
            if kept is not None:
                assert kept.sock is not None  # (kept connected)
                self._watch(attempt, kept.sock)
                try:
                    return self._send(attempt, key, kept, target, headers, body)
                except ConnectionError:  # the receiver closed it while it was idle
                    if attempt.cut is not None:
                        raise
            conn = kind(target.host, target.port, key[3], attempt.left())
            conn.watch = lambda sock: self._watch(attempt, sock)
            try:
                conn.connect()
            except OSError as exc:  # the next address, if any
                conn.close()
                if attempt.cut is not None or isinstance(exc, TimeoutError):
                    raise  # (no time is left for the next address)
                error = exc
                continue
            return self._send(attempt, key, conn, target, headers, body)
        raise error

    def _send(
        self,
        attempt: _Attempt,
        key: tuple[str, str, int, str],
        conn: "_Pinned",
        target: Target,
        headers: dict[str, str],
        body: bytes,
    ) -> int:
        try:
            assert conn.sock is not None  # (connected)
            conn.sock.settimeout(attempt.left())  # no step past the deadline
            conn.request(
                "POST",
                target.path,
                body,
                {
                    "Content-Type": "application/json",
                    "User-Agent": f"xruntime/{__version__}",
                    **headers,
                },
            )
            answer = conn.getresponse()
            answer.read(ANSWER_BYTES)  # never more: its status is the answer
            if attempt.cut is not None:  # its end was the cut: no whole answer in time
                raise TimeoutError("timed out")
        except BaseException:
            conn.close()
            raise
        if answer.isclosed() and conn.sock is not None:  # read to its end, not closing
            self._keep(key, conn)
        else:
            conn.close()
        return answer.status

    # ------------------------------------------------------------------ deadlines

    def _begin(self, timeout_s: float) -> _Attempt:
        attempt = _Attempt(time.monotonic() + timeout_s)
        with self._lock:
            if self._interrupted:
                raise Interrupted("interrupted by the node's shutdown")
            self._attempts.add(attempt)
            if self._watchdog is None:
                self._watchdog = threading.Thread(
                    target=self._watch_deadlines, name="callback-deadlines", daemon=True
                )
                self._watchdog.start()
            self._watching.notify()
        return attempt

    def _watch(self, attempt: _Attempt, sock: socket.socket) -> None:
        """Let the watchdog shut ``sock`` down at ``attempt``'s deadline (a duplicate of
        it: the original may be wrapped in TLS meanwhile)."""
        watched = socket.socket(fileno=os.dup(sock.fileno()))
        with self._lock:
            attempt.sockets.append(watched)
            cut = attempt.cut
        if cut is not None:  # cut while it connected
            attempt.shut()

    def _end(self, attempt: _Attempt) -> None:
        with self._lock:
            self._attempts.discard(attempt)
            watched, attempt.sockets = attempt.sockets, []
        for sock in watched:
            sock.close()

    def _watch_deadlines(self) -> None:
        """The watchdog: shut each attempt down at its deadline."""
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                late = [a for a in self._attempts if a.cut is None and a.deadline <= now]
                for attempt in late:
                    attempt.cut = "deadline"
                    attempt.shut()
                waiting = [a.deadline for a in self._attempts if a.cut is None]
                self._watching.wait(min(waiting) - now if waiting else None)

    def interrupt(self) -> None:
        """The node stops: cut every attempt under way, refuse those that begin."""
        with self._lock:
            self._interrupted = True
            for attempt in self._attempts:
                if attempt.cut is None:
                    attempt.cut = "shutdown"
                    attempt.shut()

    # ------------------------------------------------------------------ kept alive

    def _take(self, key: tuple[str, str, int, str]) -> "_Pinned | None":
        with self._lock:
            kept = self._idle.get(key)
            while kept:
                since, conn = kept.pop()
                self._count -= 1
                if time.monotonic() - since < self.IDLE_S:
                    return conn
                conn.close()
        return None

    def _keep(self, key: tuple[str, str, int, str], conn: "_Pinned") -> None:
        now = time.monotonic()
        with self._lock:
            for other, kept in list(self._idle.items()):  # close what idled too long
                while kept and now - kept[0][0] >= self.IDLE_S:
                    kept.pop(0)[1].close()
                    self._count -= 1
                if not kept:
                    del self._idle[other]
            if self._count >= self.MAX_IDLE or self._interrupted:
                conn.close()
                return
            self._idle.setdefault(key, []).append((now, conn))
            self._count += 1

    def close(self) -> None:
        """Cut what is under way (``interrupt``), close what is kept, end the watchdog."""
        self.interrupt()
        with self._lock:
            for kept in self._idle.values():
                for _, conn in kept:
                    conn.close()
            self._idle.clear()
            self._count = 0
            self._closed = True
            self._watching.notify()
