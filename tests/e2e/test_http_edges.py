"""What one client can take of a node's HTTP processes (docs/protocol.md §15;
benchmarks/abuse.py, item 3), through raw sockets against a real node: header bytes
(431), the time to send the headers and the body (408, or closed), and the connections of
a process
(slow senders make room for a new caller). None of it needs a login.

The module's node has one HTTP process with small limits: 8 kB of headers, 1 s to send
them, 1 s to send a body, 2 s for an idle keep-alive connection, 32 connections."""

import http.client
import socket
import time

import pytest
import requests

from tests.harness import Server

MAX_HEADER_BYTES = 8192
MAX_CONNECTIONS = 32


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    srv = Server(
        str(tmp_path_factory.mktemp("edges")),
        server_keys={
            "processes": 1,
            "max_header_bytes": MAX_HEADER_BYTES,
            "header_timeout": "1s",
            "body_timeout": "1s",
            "keep_alive_timeout": "2s",
            "max_connections": MAX_CONNECTIONS,
        },
    ).start()
    yield srv
    srv.stop()


def connect(node) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=10)
    return sock


def answer_of(sock) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def still_serving(node):
    r = requests.post(node.url("XRuntime", "getRuntimeInformation"), json={}, timeout=10)
    assert r.status_code == 200 and r.json()["version"]


@pytest.mark.parametrize("size", [MAX_HEADER_BYTES * 2, 10 * 1024 * 1024])
def test_headers_past_the_limit_are_refused_with_431(node, size):
    """A 100 MB header line cost ~12 s of CPU before: past the limit, the request is
    answered 431 and closed, parsed no further."""
    sock = connect(node)
    try:
        head = b"POST /services/rs/XRuntime/getRuntimeInformation HTTP/1.1\r\nHost: x\r\nX-Big: "
        try:
            sock.sendall(head + b"a" * size + b"\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):  # closed before all of it was sent
            pass
        answer = answer_of(sock)
    except ConnectionResetError:
        answer = b"reset"
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 431 ") or answer == b"reset", answer[:200]
    still_serving(node)


def test_headers_just_under_the_limit_are_served(node):
    r = requests.post(
        node.url("XRuntime", "getRuntimeInformation"),
        json={},
        timeout=10,
        headers={"X-Padding": "a" * (MAX_HEADER_BYTES - 1024)},
    )
    assert r.status_code == 200


def test_a_large_body_in_the_same_read_as_its_headers_is_served(node):
    """A 3 000-location XDima request (170 kB) came in one read with its headers and
    was answered 431: only the bytes before the headers' end count as headers."""
    body = b"{}" + b" " * 400_000
    sock = connect(node)
    try:
        sock.sendall(
            b"POST /services/rs/XRuntime/getRuntimeInformation HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )
        answer = answer_of(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


def test_a_slow_sender_is_answered_408_and_closed(node):
    sock = connect(node)
    try:
        began = time.monotonic()
        sock.sendall(b"POST /services/rs/XRuntime/getRuntimeInformation HTTP/1.1\r\nHost: x\r\n")
        answer = answer_of(sock)
        waited = time.monotonic() - began
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert 0.8 < waited < 5, waited
    assert "its headers took longer than 1000 ms" in node.log()


def test_a_slow_body_is_answered_408_and_closed(node):
    """A body sent a byte at a time held its connection until max_request_bytes came:
    past body_timeout from the end of the headers it is answered 408 and closed, and the
    request never reaches its operation."""
    jobs_before = requests.post(node.url("XRuntime", "listJobs"), json={}, timeout=10).json()
    sock = connect(node)
    try:
        sock.sendall(
            b"POST /services/rs/XDemo/startSimulate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        began = time.monotonic()
        answer = b""
        sock.settimeout(0.3)
        while not answer:  # a byte every 0.3 s: the body never ends within 1 s
            try:
                answer = sock.recv(65536)
            except TimeoutError:
                sock.sendall(b" ")
                assert time.monotonic() - began < 10, "the slow body was never refused"
        sock.settimeout(10)
        answer += answer_of(sock)
        waited = time.monotonic() - began
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"body came too slowly" in answer
    assert 0.8 < waited < 5, waited
    assert "its request's body took longer than 1000 ms" in node.log()
    jobs_after = requests.post(node.url("XRuntime", "listJobs"), json={}, timeout=10).json()
    assert jobs_after == jobs_before


def test_a_body_sent_in_pieces_within_the_timeout_is_served(node):
    sock = connect(node)
    try:
        body = b"{}"
        sock.sendall(
            b"POST /services/rs/XRuntime/getRuntimeInformation HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        time.sleep(0.2)  # the body comes in a later read than the headers
        sock.sendall(body)
        answer = answer_of(sock)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


def test_pipelined_requests_are_answered_in_order(node):
    """Requests sent behind one in progress, on one connection, wait in the connection's
    queue (``connection_guard._Pipeline``) and are answered in the order sent."""
    request = (
        b"POST /services/rs/XRuntime/%s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 2\r\n%s\r\n{}"
    )
    sock = connect(node)
    try:
        sock.sendall(  # in one write: the second and third come while the first is served
            request % (b"getRuntimeInformation", b"")
            + request % (b"listJobs", b"")
            + request % (b"getRuntimeInformation", b"Connection: close\r\n")
        )
        answer = answer_of(sock)
    finally:
        sock.close()
    assert answer.count(b"HTTP/1.1 200 ") == 3, answer[:600]
    first, second, third = answer.split(b"HTTP/1.1 200 ")[1:]
    assert b'"version"' in first and b'"version"' not in second and b'"version"' in third


def test_an_idle_keep_alive_connection_is_closed_after_keep_alive_timeout(node):
    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=10)
    try:
        conn.request(
            "POST",
            "/services/rs/XRuntime/getRuntimeInformation",
            body=b"{}",
            headers={"Content-Type": "application/json"},
        )
        answer = conn.getresponse()
        assert answer.status == 200 and answer.read()
        began = time.monotonic()
        assert conn.sock.recv(1) == b""  # kept open while idle, then closed
        idle = time.monotonic() - began
    finally:
        conn.close()
    assert 1.8 < idle < 6, idle


def test_a_connection_that_sends_nothing_is_closed(node):
    sock = connect(node)
    try:
        assert answer_of(sock) == b""
    finally:
        sock.close()


def test_slow_senders_make_room_for_a_new_caller(node):
    """benchmarks/abuse.py, item 3b: 1 100 sockets with an unfinished header locked
    everyone out. Past max_connections, a new connection closes the one that has waited
    longest for its headers, so a new caller is served at once, and the node says so in
    its log."""
    slow = []
    try:
        for _ in range(MAX_CONNECTIONS + 8):
            sock = connect(node)
            sock.sendall(b"POST /services/rs/XRuntime/getRuntimeInformation HTTP/1.1\r\n")
            slow.append(sock)
        began = time.monotonic()
        still_serving(node)
        assert time.monotonic() - began < 0.9  # before any header timeout could help
        closed = 0
        for sock in slow:
            sock.settimeout(0.01)
            try:
                closed += sock.recv(1) == b""
            except TimeoutError:
                pass
        assert closed >= 8, closed
        assert "closed one that sent no complete request" in node.log()
    finally:
        for sock in slow:
            sock.close()
