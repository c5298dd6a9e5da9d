"""XDima's large case: a 2 000 × 2 000 distance matrix computed, then fetched over JSON
and over SOAP, with the server's peak memory.

A real node (tests/harness.py, SQLite, 2 workers) gets random locations in a region
(Germany); the benchmark times startCreateDistanceMatrix → SUCCEEDED (watchJob), then
fetchDistanceMatrixResponse over JSON and over SOAP (a raw POST of the envelope; the
answer is parsed only to check the number of rows), and prints VmHWM (peak resident
memory) of the server process and of each worker process from /proc/<pid>/status.

    python benchmarks/xdima.py [--size 2000] [--repeat 1]

With ``--parallel`` it times the same matrix with ``parallelism`` 1 and 2 on a node of
2 workers (docs/protocol.md §13: the row blocks are child jobs), checks that both answer the
same matrix, and prints the ratio; with ``--database-url`` (default: the environment's
XRUNTIME_TEST_DATABASE_URL) also on two PostgreSQL nodes of one worker each.
"""

import argparse
import http.client
import json
import os
import random
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.harness import Server  # noqa: E402
from tests.processes import _children  # noqa: E402

DIMA_NS = "http://xruntime.org/xserver/xdima"


def memory(pid):
    """(VmRSS, VmHWM) of a process in MB."""
    with open(f"/proc/{pid}/status") as f:
        status = f.read()
    kb = {k: int(v) for k, v in re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M)}
    return kb.get("VmRSS", 0) / 1024, kb.get("VmHWM", 0) / 1024


def report_memory(server, when):
    pids = [("server", server.proc.pid)] + [("worker", p) for p in _children(server.proc.pid)]
    parts = []
    for name, pid in pids:
        try:
            rss, hwm = memory(pid)
        except OSError:
            continue
        parts.append(f"{name} {pid}: rss {rss:.0f} MB, peak {hwm:.0f} MB")
    print(f"  memory {when}: " + "; ".join(parts))


def post(port, path, body, content_type):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", path, body, {"Content-Type": content_type})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"{path}: {response.status} {data[:300]!r}")
    return data


def call(port, operation, body, service="XDima"):
    return json.loads(
        post(port, f"/services/rs/{service}/{operation}", json.dumps(body), "application/json")
    )


def soap_fetch(port, job_id):
    envelope = (
        f'<?xml version="1.0" encoding="utf-8"?>'
        f'<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/" '
        f'xmlns:d="{DIMA_NS}"><soap:Body>'
        f"<d:fetchDistanceMatrixResponse><id>{job_id}</id>"
        f"</d:fetchDistanceMatrixResponse></soap:Body></soap:Envelope>"
    )
    return post(port, "/services/ws/XDima", envelope.encode(), "text/xml; charset=utf-8")


def run(size, repeat):
    rng = random.Random(2000)
    points = [
        {"longitude": rng.uniform(6.0, 15.0), "latitude": rng.uniform(47.3, 55.0)}
        for _ in range(size)
    ]
    with tempfile.TemporaryDirectory() as folder:
        server = Server(folder).start()
        try:
            report_memory(server, "at start")
            for attempt in range(1, repeat + 1):
                print(f"{size} × {size} matrix, run {attempt}:")
                began = time.perf_counter()
                job = call(server.port, "startCreateDistanceMatrix", {"startLocations": points})
                while True:
                    answer = call(
                        server.port,
                        "watchJob",
                        {"id": job["id"], "maximumPollingPeriod": 5000},
                        service="XRuntime",
                    )
                    if answer["status"] in ("SUCCEEDED", "FAILED"):
                        break
                computed = time.perf_counter() - began
                assert answer["status"] == "SUCCEEDED", answer
                print(f"  compute (start → SUCCEEDED): {computed:.2f} s")
                report_memory(server, "after compute")

                began = time.perf_counter()
                body = post(
                    server.port,
                    "/services/rs/XDima/fetchDistanceMatrixResponse",
                    json.dumps({"id": job["id"]}),
                    "application/json",
                )
                fetched = time.perf_counter() - began
                rows = json.loads(body)["rows"]
                assert len(rows) == size and len(rows[-1]["distances"]) == size
                print(f"  fetch over JSON: {fetched:.2f} s, {len(body) / 1e6:.1f} MB")
                del rows, body
                report_memory(server, "after JSON fetch")

                began = time.perf_counter()
                body = soap_fetch(server.port, job["id"])
                fetched = time.perf_counter() - began
                assert body.count(b"distances>") // 2 >= size * size, "not the whole matrix"
                print(f"  fetch over SOAP: {fetched:.2f} s, {len(body) / 1e6:.1f} MB")
                del body
                report_memory(server, "after SOAP fetch")
                call(server.port, "deleteJob", {"id": job["id"]}, service="XRuntime")
        finally:
            server.stop()


def compute_time(port, points, parallelism, watch_port=None):
    """start → SUCCEEDED of one matrix (s), and its fetched JSON answer."""
    began = time.perf_counter()
    job = call(
        port, "startCreateDistanceMatrix", {"startLocations": points, "parallelism": parallelism}
    )
    while True:
        answer = call(
            watch_port or port,
            "watchJob",
            {"id": job["id"], "maximumPollingPeriod": 5000},
            service="XRuntime",
        )
        if answer["status"] in ("SUCCEEDED", "FAILED"):
            break
    took = time.perf_counter() - began
    assert answer["status"] == "SUCCEEDED", answer
    result = call(port, "fetchDistanceMatrixResponse", {"id": job["id"]})
    call(port, "deleteJob", {"id": job["id"]}, service="XRuntime")
    return took, result


def same_matrix(a, b):
    """Whether two answers hold the same matrix and summary (but the computing time)."""
    sa, sb = dict(a["summary"]), dict(b["summary"])
    sa.pop("computationTimeMs"), sb.pop("computationTimeMs")
    return a["rows"] == b["rows"] and sa == sb


def parallel(size, repeat, database_url=None):
    """parallelism 1 and 2 on 2 workers (one SQLite node), and on two PostgreSQL nodes
    of one worker each when ``database_url`` is given."""
    rng = random.Random(2000)
    points = [
        {"longitude": rng.uniform(6.0, 15.0), "latitude": rng.uniform(47.3, 55.0)}
        for _ in range(size)
    ]
    with tempfile.TemporaryDirectory() as folder:
        server = Server(folder).start()
        try:
            times = {1: [], 2: []}
            for _ in range(repeat):
                for p in (1, 2):
                    took, result = compute_time(server.port, points, p)
                    times[p].append(took)
                    if p == 1:
                        single = result
                    else:
                        assert same_matrix(single, result), "parallelism 2 gave another matrix"
                    del result
            best = {p: min(t) for p, t in times.items()}
            print(f"{size} × {size}, one node (SQLite), 2 workers, best of {repeat}:")
            for parallelism in (1, 2):
                runs = ", ".join(f"{t:.2f}" for t in times[parallelism])
                print(f"  parallelism {parallelism}: {best[parallelism]:.2f} s   (runs: {runs})")
            print(f"  ratio: {best[2] / best[1]:.2f} (target ≤ 0.60); the same matrix: yes")
        finally:
            server.stop()
    if not database_url:
        return
    with tempfile.TemporaryDirectory() as folder:
        nodes = [
            Server(os.path.join(folder, name), database_url=database_url, workers=1).start()
            for name in ("a", "b")
        ]
        try:
            times = {1: [], 2: []}
            for _ in range(repeat):
                for p in (1, 2):
                    times[p].append(compute_time(nodes[0].port, points, p, nodes[1].port)[0])
            best = {p: min(t) for p, t in times.items()}
            both = all("XDima.createDistanceMatrix RUNNING on worker" in n.log() for n in nodes)
            print(
                f"{size} × {size}, two nodes on PostgreSQL, 1 worker each (the same 2 cores), "
                f"best of {repeat}:"
            )
            print(
                f"  parallelism 1: {best[1]:.2f} s; parallelism 2: {best[2]:.2f} s; "
                f"ratio {best[2] / best[1]:.2f}; "
                f"children ran on both nodes: {'yes' if both else 'no'}"
            )
        finally:
            for node in nodes:
                node.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--parallel",
        action="store_true",
        help="time parallelism 1 against 2 instead of the fetches",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("XRUNTIME_TEST_DATABASE_URL"),
        help="with --parallel: also two nodes on this PostgreSQL database",
    )
    args = parser.parse_args()
    if args.parallel:
        parallel(args.size, args.repeat, args.database_url)
    else:
        run(args.size, args.repeat)


if __name__ == "__main__":
    main()
