"""Requests that are not HTTP: each is answered at once and its connection
closed, however many come; the node keeps serving and no socket is left half open."""

import socket
import time

import pytest

from tests.processes import tcp_sockets
from tests.waiting import until

UNPARSEABLE = [
    b"GARBAGE\r\n\r\n",
    b"POST /services/rs/XRuntime/watchJob HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n",
    b"POST /services/rs/XRuntime/watchJob HTTP/1.1\r\nHost: x\r\nX-Note: a\x01b\r\n\r\n",
    b"POST /services/rs/XRuntime/watchJob http/1.1\r\nHost: x\r\n\r\n",
    b"POST /services/rs/XRuntime/watchJob HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32),  # a TLS hello
]


def exchange(port, raw, timeout=5.0):
    """Send ``raw``; answers what came back until the server closed the connection
    (within ``timeout``: the node's own header timeout, 10 s, would close it later)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(raw)
        deadline = time.monotonic() + timeout
        received = b""
        while time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                return received
            received += chunk
        raise AssertionError(f"the connection was not closed: {received[:200]!r}")


def half_open(port):
    """Connections of the server's port waiting for the server to close them (CLOSE_WAIT)."""
    return sum(1 for _, state, _, _ in tcp_sockets(port) if state == "08")


@pytest.mark.parametrize("raw", UNPARSEABLE)
def test_an_unparseable_request_is_answered_400_and_closed(server, raw):
    answer = exchange(server.port, raw)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"Traceback" not in answer


def test_hundreds_of_them_leave_nothing_open_and_the_node_serves(server):
    for _ in range(50):
        for raw in UNPARSEABLE:
            exchange(server.port, raw)
    # the last closes may still be on their way; a socket left half open would stay so
    # until the node's header timeout (10 s), so the wait ends well before that
    until(lambda: half_open(server.port) == 0, "no half-open socket left", timeout=5)
    assert server.call("XRuntime", "getRuntimeInformation", {})["version"]
