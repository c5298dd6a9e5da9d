"""XDima's large case: a 2 000 × 2 000 distance matrix computed, then fetched over JSON
and over SOAP, with the server's peak memory.

A real node (tests/harness.py, SQLite, 2 workers) gets random locations in a region
(Germany); the benchmark times startCreateDistanceMatrix → SUCCEEDED (watchJob), then
fetchDistanceMatrixResponse over JSON and over SOAP (a raw POST of the envelope; the
answer is parsed only to check the number of rows), and prints VmHWM (peak resident
memory) of the server process and of each worker process from /proc/<pid>/status.

    python benchmarks/xdima.py [--size 2000] [--repeat 1]
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
    return json.loads(post(port, f"/services/rs/{service}/{operation}", json.dumps(body),
                           "application/json"))


def soap_fetch(port, job_id):
    envelope = (f'<?xml version="1.0" encoding="utf-8"?>'
                f'<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/" '
                f'xmlns:d="{DIMA_NS}"><soap:Body>'
                f'<d:fetchDistanceMatrixResponse><id>{job_id}</id>'
                f'</d:fetchDistanceMatrixResponse></soap:Body></soap:Envelope>')
    return post(port, "/services/ws/XDima", envelope.encode(), "text/xml; charset=utf-8")


def run(size, repeat):
    rng = random.Random(2000)
    points = [{"longitude": rng.uniform(6.0, 15.0), "latitude": rng.uniform(47.3, 55.0)}
              for _ in range(size)]
    with tempfile.TemporaryDirectory() as folder:
        server = Server(folder).start()
        try:
            report_memory(server, "at start")
            for attempt in range(1, repeat + 1):
                print(f"{size} × {size} matrix, run {attempt}:")
                began = time.perf_counter()
                job = call(server.port, "startCreateDistanceMatrix", {"startLocations": points})
                while True:
                    answer = call(server.port, "watchJob", {"id": job["id"], "maximumPollingPeriod": 5000},
                                  service="XRuntime")
                    if answer["status"] in ("SUCCEEDED", "FAILED"):
                        break
                computed = time.perf_counter() - began
                assert answer["status"] == "SUCCEEDED", answer
                print(f"  compute (start → SUCCEEDED): {computed:.2f} s")
                report_memory(server, "after compute")

                began = time.perf_counter()
                body = post(server.port, "/services/rs/XDima/fetchDistanceMatrixResponse",
                            json.dumps({"id": job["id"]}), "application/json")
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    run(args.size, args.repeat)


if __name__ == "__main__":
    main()
