"""A real HTTP server that receives callbacks, for the tests and the benchmark.

It listens on 127.0.0.1 in a thread of the test's process, records every request it
gets (its headers, body and the time it arrived) and answers what the test set:
a status, after a delay.  ``stop()`` closes it and the connections it keeps alive (a
receiver that is down); a new ``Receiver(port=...)`` comes back on the same port.
``HostileReceiver`` answers as no receiver should: a byte at a time, or never.
"""

import json
import select
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict
    body: bytes
    at: float  # time.time() when it arrived

    @property
    def data(self) -> dict:
        return json.loads(self.body)


class Receiver:
    def __init__(self, port: int = 0, status: int = 204, delay: float = 0.0, headers=None):
        self.status, self.delay, self.extra_headers = status, delay, headers or {}
        self.received: list[Received] = []
        self.changed = threading.Condition()
        self.connections: set[socket.socket] = set()  # open now (kept alive between POSTs)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                got = Received(self.path, dict(self.headers.items()), body, time.time())
                if receiver.delay_for(got):
                    time.sleep(receiver.delay_for(got))
                status = receiver.status_for(got)
                self.send_response(status)
                for name, value in receiver.extra_headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()
                with receiver.changed:
                    receiver.received.append(got)
                    receiver.changed.notify_all()

            def setup(self):
                super().setup()
                with receiver.changed:
                    receiver.connections.add(self.connection)

            def finish(self):
                with receiver.changed:
                    receiver.connections.discard(self.connection)
                super().finish()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def delay_for(self, got: Received) -> float:
        return self.delay

    def status_for(self, got: Received) -> int:
        return self.status

    def wait_for(self, predicate, timeout: float = 30.0) -> list[Received]:
        """Wait until ``predicate(received)`` holds; answers what was received."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate(self.received):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"not received in {timeout} s: {self.received}")
                self.changed.wait(left)
            return list(self.received)

    def of_job(self, job_id: str) -> list[Received]:
        with self.changed:
            return [r for r in self.received if r.data.get("id") == job_id]

    def stop(self) -> None:
        """Down: no more connections, and those kept alive are closed."""
        self.server.shutdown()
        self.server.server_close()
        with self.changed:
            for conn in self.connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # closed already


class HostileReceiver:
    """A receiver that reads each POST and then trickles (``HTTP/1.1 200 OK`` and one
    byte every ``every`` s) or, with ``every`` None, never answers.  It notes each
    POST's ``webhook-id`` and, when one arrives, whether another connection with the
    same id is still open (``overlaps``: asked of the kernel, not of a thread's
    timing), and how many of its connections are open at once (``most_open``).  For the
    tests of callbacks that no receiver can hold (issue 32) and benchmarks/abuse.py."""

    def __init__(self, every=None):
        self.every = every
        self.stop = threading.Event()
        self.lock = threading.Condition()
        self.open: dict[socket.socket, str] = {}
        self.ids: list[str] = []
        self.closed: list[float] = []  # how long each connection lasted
        self.overlaps: list[str] = []
        self.most_open = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}/hook"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        began = time.monotonic()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head = data.split(b"\r\n\r\n")[0].decode().split("\r\n")
            headers = dict(line.split(": ", 1) for line in head[1:])
            webhook_id = headers.get("webhook-id", "")
            with self.lock:
                for other, other_id in self.open.items():
                    if other_id == webhook_id and _still_open(other):
                        self.overlaps.append(webhook_id)
                self.open[conn] = webhook_id
                self.ids.append(webhook_id)
                self.most_open = max(self.most_open, len(self.open))
                self.lock.notify_all()
            try:
                if self.every is not None:
                    conn.sendall(b"HTTP/1.1 200 OK\r\n")
                while not self.stop.is_set():
                    ready, _, _ = select_one(conn, self.every or 1.0)
                    if ready and conn.recv(65536) == b"":
                        break  # the sender let go
                    if not ready and self.every is not None:
                        conn.sendall(b"X")
            except OSError:
                pass  # cut
            finally:
                with self.lock:
                    del self.open[conn]
                    self.closed.append(time.monotonic() - began)
                    self.lock.notify_all()

    def wait(self, predicate, timeout=60):
        with self.lock:
            assert self.lock.wait_for(lambda: predicate(self), timeout), (
                f"not in {timeout} s: {len(self.ids)} POSTs, {len(self.open)} open"
            )

    def wait_requests(self, n, timeout=30):
        self.wait(lambda receiver: len(receiver.ids) >= n, timeout)

    def open_now(self):
        with self.lock:
            return len(self.open)

    def close(self):
        self.stop.set()
        self.server.close()


def select_one(conn, timeout):
    return select.select([conn], [], [], timeout)


def _still_open(conn):
    """Whether the other end of ``conn`` has not closed it (its FIN not received)."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True  # nothing to read, not closed
    except OSError:
        return False
