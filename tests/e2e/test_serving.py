"""Serving: several HTTP processes per node, held watches woken across them, SIGTERM.

The node's HTTP processes accept on one socket; which one serves a connection is
found from /proc (the process holding the accepted socket), so a test can hold
watches in one process and change the job through another.
"""

import asyncio
import http.client
import json
import os
import resource
import signal
import time

import pytest

from tests.harness import Server, descendants
from tests.processes import tcp_sockets

PG_URL = os.environ.get("XRUNTIME_TEST_DATABASE_URL")


def serving_pid(server: Server, client_port: int):
    """The pid of the node's process that holds the connection from ``client_port``."""
    inode = next(
        (inode for remote, _, _, inode in tcp_sockets(server.port) if remote == client_port), None
    )
    for pid in descendants(server.proc.pid):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    return pid
        except OSError:
            continue
    return None


class Connection:
    """One keep-alive connection, and the HTTP process that accepted it."""

    def __init__(self, server: Server):
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        self.call("XRuntime", "getRuntimeInformation", {"withJobCounts": False})  # accepted now
        self.pid = serving_pid(server, self.conn.sock.getsockname()[1])

    def send(self, service, operation, body):
        self.conn.request(
            "POST",
            f"/services/rs/{service}/{operation}",
            json.dumps(body),
            {"Content-Type": "application/json"},
        )

    def answer(self, expect=200):
        response = self.conn.getresponse()
        body = response.read()
        assert response.status == expect, body
        return json.loads(body)

    def call(self, service, operation, body):
        self.send(service, operation, body)
        return self.answer()


def connections_in_two_processes(server: Server, tries: int = 200):
    """Connections until two HTTP processes are seen: {pid: [Connection, ...]}."""
    by_pid = {}
    for _ in range(tries):
        c = Connection(server)
        assert c.pid is not None
        by_pid.setdefault(c.pid, []).append(c)
        if len(by_pid) >= 2 and all(len(v) >= 3 for v in by_pid.values()):
            break
    assert len(by_pid) >= 2, "the node must serve HTTP from two processes"
    return by_pid


@pytest.fixture(params=["sqlite", "postgresql"])
def two_process_node(request, tmp_path):
    if request.param == "postgresql":
        if not PG_URL:
            pytest.skip("XRUNTIME_TEST_DATABASE_URL is not set")
        from sqlalchemy import create_engine

        from xruntime.store.schema import metadata

        engine = create_engine(PG_URL)
        metadata.drop_all(engine)
        engine.dispose()
    srv = Server(
        str(tmp_path / "node"),
        database_url=PG_URL if request.param == "postgresql" else None,
        server_keys={"processes": 2},
    ).start()
    yield srv
    srv.stop()


def test_node_serves_http_from_its_processes(two_process_node):
    by_pid = connections_in_two_processes(two_process_node)
    main = two_process_node.proc.pid
    assert main not in by_pid, "HTTP is served by the HTTP processes, not the supervisor's"


@pytest.mark.parametrize(
    "operation, answered, period",
    [
        ("stopJob", ("STOPPING", "SUCCEEDED", "FAILED"), 250),
        ("deleteJob", ("DELETED", "UNKNOWN"), 5000),  # at once, before the 5 s period
    ],
)
def test_watches_in_one_process_wake_on_a_change_through_another(
    two_process_node, operation, answered, period
):
    srv = two_process_node
    first, second = list(connections_in_two_processes(srv).values())[:2]
    job = srv.start_job(durationMs=60000, steps=1)
    srv.wait_status(job["id"], "RUNNING")
    for c in first:  # held in the first process
        c.send(
            "XRuntime",
            "watchJob",
            {"id": job["id"], "progressUpdatePeriod": period, "maximumPollingPeriod": 30000},
        )
    srv.wait_held(len(first))
    changed_at = time.monotonic()
    second[0].call("XRuntime", operation, {"id": job["id"]})  # through the second
    for c in first:
        assert c.answer()["status"] in answered
        assert time.monotonic() - changed_at < 3.0, "a change in another process wakes at once"


def test_a_start_through_any_process_runs_at_once(two_process_node):
    srv = two_process_node
    for conns in connections_in_two_processes(srv).values():
        c = conns[0]
        job = c.call("XDemo", "startSimulate", {"durationMs": 0})
        started = time.monotonic()
        answer = c.call(
            "XRuntime",
            "watchJob",
            {"id": job["id"], "progressUpdatePeriod": 250, "maximumPollingPeriod": 20000},
        )
        while answer["status"] != "SUCCEEDED":
            answer = c.call(
                "XRuntime",
                "watchJob",
                {"id": job["id"], "progressUpdatePeriod": 250, "maximumPollingPeriod": 20000},
            )
        assert time.monotonic() - started < 3.0


def test_an_edit_of_the_file_is_in_force_in_every_http_process(two_process_node):
    srv = two_process_node
    processes = connections_in_two_processes(srv)
    with open(srv.config, "a") as f:
        f.write("\n[services.XDemo]\nenabled = false\n")
    deadline = time.monotonic() + 3.0
    for conns in processes.values():  # each process, through its own connection
        c = conns[0]
        while True:
            c.send("XDemo", "startSimulate", {"durationMs": 0})
            response = c.conn.getresponse()
            body = json.loads(response.read())
            if response.status != 200:
                break
            assert time.monotonic() < deadline, "an HTTP process still serves XDemo"
            time.sleep(0.1)
        assert body["faultInfo"]["$type"] == "ServiceNotConfiguredFault"


# --------------------------------------------------------------------------- SIGTERM


async def _hold_watches(port, job_id, count):
    """Open ``count`` connections, each holding one watchJob; answers the list of
    (reader, writer) once every request is sent."""
    body = json.dumps({"id": job_id, "progressUpdatePeriod": 50000, "maximumPollingPeriod": 50000})
    request = (
        f"POST /services/rs/XRuntime/watchJob HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}"
    ).encode()
    held = []
    for start in range(0, count, 100):
        batch = await asyncio.gather(
            *(
                asyncio.open_connection("127.0.0.1", port)
                for _ in range(start, min(count, start + 100))
            )
        )
        for _, writer in batch:
            writer.write(request)
        held.extend(batch)
    for _, writer in held:
        await writer.drain()
    return held


async def _read_answer(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return status, json.loads(await reader.readexactly(length))


def test_sigterm_answers_1000_held_watches_and_hands_the_job_back(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    # (DEBUG: every job's RUNNING line, with its attempt)
    srv = Server(str(tmp_path / "node"), extra='[log]\nlevel = "debug"\n').start()
    try:
        job = srv.start_job(durationMs=60000, steps=1)
        srv.wait_status(job["id"], "RUNNING")

        async def scenario():
            held = await _hold_watches(srv.port, job["id"], 1000)
            await asyncio.to_thread(srv.wait_held, 1000)  # every request read and held
            assert not any(reader.at_eof() for reader, _ in held), "a watch answered before SIGTERM"
            srv.proc.send_signal(signal.SIGTERM)
            answers = await asyncio.wait_for(
                asyncio.gather(*(_read_answer(reader) for reader, _ in held)), 20
            )
            for _, writer in held:
                writer.close()
            return answers

        answers = asyncio.run(scenario())
        assert len(answers) == 1000
        assert all(status == 200 for status, _ in answers)
        assert {a["status"] for _, a in answers} <= {"RUNNING", "QUEUING"}
        assert srv.proc.wait(30) == 0
    finally:
        srv.stop()
    srv.start()
    try:
        assert srv.watch(job["id"], maximumPollingPeriod=250)["status"] in ("QUEUING", "RUNNING"), (
            "the job is kept"
        )
        srv.wait_status(job["id"], "RUNNING")
        assert f"job {job['id']} XDemo.simulate RUNNING on worker" in srv.log()
        assert "(attempt 1)" in srv.log().split(f"job {job['id']} handed back")[-1], (
            "a job handed back at shutdown does not count an attempt"
        )
        srv.call("XRuntime", "deleteJob", {"id": job["id"]})
    finally:
        srv.stop()


def test_a_taken_port_is_a_clean_error_and_starts_nothing(tmp_path):
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    srv = Server(str(tmp_path / "node"), port=port)
    try:
        with pytest.raises(RuntimeError, match="server exited with 1"):
            srv.start(timeout=30)
        log = srv.log()
        assert f"cannot serve on 127.0.0.1:{port}: Address already in use" in log
        assert "Traceback" not in log
        assert "worker 0 started" not in log and "HTTP process" not in log, "nothing started"
    finally:
        taken.close()
        srv.stop()
