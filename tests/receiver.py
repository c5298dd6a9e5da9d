"""A real HTTP server that receives callbacks, for the tests and the benchmark.

It listens on 127.0.0.1 in a thread of the test's process, records every request it
gets (its headers, body and the time it arrived) and answers what the test set:
a status, after a delay.  ``stop()`` closes it and the connections it keeps alive (a
receiver that is down); a new ``Receiver(port=...)`` comes back on the same port.
"""

import json
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
