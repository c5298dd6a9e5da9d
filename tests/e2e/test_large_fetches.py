"""Large results are written as they are read (docs/xdima.md, "Large results"): an HTTP
process's memory does not grow with the result it answers, and a client that goes
away midway frees it at once.  A real node (SQLite, the shipped defaults but a larger
``max_cells``, one HTTP process), real HTTP.

Measured before: a 2 000² SOAP fetch took its HTTP process to a 460 MB peak (the stored
result decoded whole, parsed into objects), and on SQLite the first fetch rewrote the
job's row, result included (+156 MB at 3 000²)."""

import glob
import http.client
import json
import os
import random
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.harness import Server
from tests.processes import Memory, http_pids
from xruntime.engine import housekeeping, spill
from xruntime.store import result_files

DIMA_NS = "http://xruntime.org/xserver/xdima"
#: MB an HTTP process may grow by while it answers a 3 000² matrix in any form (the
#: issue's bound is 64; the old SOAP path took +400 at 2 000²).
GROWTH_MB = 64


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    srv = Server(
        str(tmp_path_factory.mktemp("large")),
        server_keys={"processes": 1},
        extra="\n[services.XDima]\nmax_cells = 9000000\n",
    ).start()
    yield srv
    srv.stop()


def matrix_job(node, size, contents="ARRAYS"):
    rng = random.Random(size)
    points = [
        {"longitude": rng.uniform(6, 15), "latitude": rng.uniform(47.3, 55.0)} for _ in range(size)
    ]
    job = node.call(
        "XDima",
        "startCreateDistanceMatrix",
        {"startLocations": points, "contentsFormat": contents},
    )
    assert node.wait_done(job["id"], timeout=300)["status"] == "SUCCEEDED"
    no_spilled_files(node)
    return job["id"]


def result_folder(node):
    """Where the node's SQLite store keeps its large results (store/result_files.py)."""
    (found,) = glob.glob(os.path.join(node.folder, "**", "*" + result_files.SUFFIX), recursive=True)
    return found


def no_spilled_files(node):
    """The worker's file of the result (engine/spill.py), in the store's result folder
    on SQLite, is taken in by the store (or removed) once the job is stored (just after
    it is seen SUCCEEDED)."""
    folders = glob.glob(os.path.join(result_folder(node), f"{spill.PREFIX}{node.proc.pid}-*"))
    assert len(folders) == 1, folders
    deadline = time.monotonic() + 10
    while os.listdir(folders[0]):
        assert time.monotonic() < deadline, os.listdir(folders[0])
        time.sleep(0.01)


def soap_envelope(job_id):
    return (
        '<?xml version="1.0" encoding="utf-8"?>'
        '<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/" '
        f'xmlns:d="{DIMA_NS}"><soap:Body><d:fetchDistanceMatrixResponse><id>{job_id}</id>'
        "</d:fetchDistanceMatrixResponse></soap:Body></soap:Envelope>"
    ).encode()


FETCHES = {
    "soap": ("/services/ws/XDima", soap_envelope, "text/xml; charset=utf-8"),
    "json": (
        "/services/rs/XDima/fetchDistanceMatrixResponse",
        lambda job_id: json.dumps({"id": job_id}).encode(),
        "application/json",
    ),
    "jsonrpc": (
        "/services/rpc/XDima",
        lambda job_id: json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "fetchDistanceMatrixResponse",
                "params": {"id": job_id},
            }
        ).encode(),
        "application/json",
    ),
}


def fetched(node, binding, job_id):
    """The answer's size and its last bytes, read in pieces (never whole here either)."""
    path, body, content_type = FETCHES[binding]
    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=300)
    try:
        conn.request("POST", path, body(job_id), {"Content-Type": content_type})
        answer = conn.getresponse()
        assert answer.status == 200
        size, tail = 0, b""
        while chunk := answer.read(1 << 20):
            size += len(chunk)
            tail = (tail + chunk)[-200:]
        return size, tail
    finally:
        conn.close()


def test_a_3000_matrix_over_soap_keeps_the_http_process_small(node):
    """The first fetch of the job (on SQLite also the one that marks it fetched), over
    SOAP, the form that costs the most: 548 MB of XML, and the HTTP process grows by
    less than GROWTH_MB; then JSON and JSON-RPC, and the encoded form over SOAP.

    Several fetches at once first, so the pool of the HTTP process has several threads
    that take turns (as on a busy node): glibc gave each its own heap, which kept the
    large blocks it had freed (+56 to +72 MB here, +110 MB in a CI run) until the node's
    threads shared one heap (xruntime.support.malloc)."""
    small = matrix_job(node, 600)
    with ThreadPoolExecutor(8) as pool:
        assert all(
            size > 10_000_000
            for size, _ in pool.map(lambda _: fetched(node, "soap", small), range(8))
        )
    node.call("XRuntime", "deleteJob", {"id": small})
    job_id = matrix_job(node, 3000)
    memory = Memory(http_pids(node.port, node.proc.pid))
    size, tail = fetched(node, "soap", job_id)
    assert size > 500_000_000 and tail.endswith(b"</soap:Envelope>")
    assert memory.peak_growth() < GROWTH_MB, memory.peak_growth()
    for binding in ("json", "jsonrpc"):
        memory = Memory(http_pids(node.port, node.proc.pid))
        size, tail = fetched(node, binding, job_id)
        assert size > 100_000_000 and tail.endswith(b"}}" if binding == "json" else b"}}}")
        assert memory.peak_growth() < GROWTH_MB, (binding, memory.peak_growth())
    node.call("XRuntime", "deleteJob", {"id": job_id})
    encoded = matrix_job(node, 3000, "ENCODED_ARRAYS")
    memory = Memory(http_pids(node.port, node.proc.pid))
    size, tail = fetched(node, "soap", encoded)
    assert 2 * 4 * 3000 * 3000 * 4 // 3 < size < 2 * 4 * 3000 * 3000 * 4 // 3 + 10_000
    assert memory.peak_growth() < GROWTH_MB, memory.peak_growth()
    node.call("XRuntime", "deleteJob", {"id": encoded})


def fetch_begun(node, binding, job_id):
    """A fetch over a raw socket of which the first MiB has been read: (socket, bytes
    read)."""
    path, body, content_type = FETCHES[binding]
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=30)
    data = body(job_id)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    received = 0
    while received < 1 << 20:
        received += len(sock.recv(65536))
    return sock, received


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / 100


@pytest.mark.parametrize("binding", ["soap", "json"])
def test_a_client_that_goes_away_midway_frees_the_http_process(node, binding):
    """The client reads 1 MB of a 2 000² answer and closes: the process stops writing
    it (it says so in its log) having spent a fraction of what the whole takes."""
    job_id = matrix_job(node, 2000)
    pids = http_pids(node.port, node.proc.pid)
    began = cpu_seconds(pids)
    fetched(node, binding, job_id)
    whole = cpu_seconds(pids) - began
    said = node.log().count("a client went away during a streamed answer")

    began = cpu_seconds(pids)
    sock, _ = fetch_begun(node, binding, job_id)
    sock.close()
    deadline = time.monotonic() + 30
    while node.log().count("a client went away during a streamed answer") == said:
        assert time.monotonic() < deadline, "the answer went on after its client left"
        time.sleep(0.05)
    spent = cpu_seconds(pids) - began
    assert spent < whole / 2, (spent, whole)
    node.call("XRuntime", "deleteJob", {"id": job_id})


def test_a_job_deleted_while_its_result_is_written_cuts_the_answer_short(node):
    """Its next piece is not there any more: the answer ends incomplete (never other
    bytes), the node logs one line, no traceback, and serves on."""
    job_id = matrix_job(node, 2000)
    sock, received = fetch_begun(node, "json", job_id)
    assert node.call("XRuntime", "deleteJob", {"id": job_id})["status"] == "DELETED"
    while chunk := sock.recv(1 << 20):  # the rest it sends, until it closes
        received += len(chunk)
    sock.close()
    assert received < 51_000_000  # the whole answer is 51.8 MB
    log = node.log()
    assert "a streamed answer was cut short" in log and "Traceback" not in log
    assert node.call("XRuntime", "getRuntimeInformation", {})["version"]


def test_a_large_result_is_a_file_beside_the_database_until_its_job_is_erased(node):
    """On SQLite a large result is kept as a file of the store's result folder
    (store/result_files.py), and its disk space comes back after the job is deleted
    (the node's sweep of erased jobs' files, every RESULT_SWEEP_PERIOD)."""
    job_id = matrix_job(node, 600)
    folder = result_folder(node)
    (name,) = [n for n in os.listdir(folder) if n.startswith(job_id)]
    assert os.stat(os.path.join(folder, name)).st_mode & 0o777 == 0o600
    assert os.stat(folder).st_mode & 0o777 == 0o700
    assert fetched(node, "json", job_id)[0] > 4_000_000
    node.call("XRuntime", "deleteJob", {"id": job_id})
    deadline = time.monotonic() + 6 * housekeeping.RESULT_SWEEP_PERIOD
    while any(n.startswith(job_id) for n in os.listdir(folder)):
        assert time.monotonic() < deadline, "the result file of a deleted job stays"
        time.sleep(0.1)


def test_a_result_file_gone_from_the_disk_is_a_fault_not_a_cut_answer(node):
    """A database restored without its result files, or a file removed by hand: the
    fetch answers InternalErrorFault before any byte of a result (not a 200 cut short),
    and the node goes on serving."""
    job_id = matrix_job(node, 400)
    folder = result_folder(node)
    (name,) = [n for n in os.listdir(folder) if n.startswith(job_id)]
    os.unlink(os.path.join(folder, name))
    path, body, content_type = FETCHES["json"]
    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=60)
    try:
        conn.request("POST", path, body(job_id), {"Content-Type": content_type})
        answer = conn.getresponse()
        fault = json.loads(answer.read())
    finally:
        conn.close()
    assert answer.status == 500
    assert fault["faultInfo"]["$type"] == "InternalErrorFault", fault
    assert job_id in fault["message"] and "Traceback" not in json.dumps(fault)
    assert node.call("XRuntime", "getRuntimeInformation", {})  # still serving
