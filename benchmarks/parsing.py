"""What parsing one request body costs an HTTP process (benchmarks/abuse.py, item 4): its
resident memory before, at the peak and after, the time to the answer, and the latency
others see meanwhile.

A real node (tests/harness.py), a fresh one for each case, with one HTTP process and the
shipped limits gets, 1 and then ``--parallel`` at a time:

- ``soap-header``: a SOAP envelope of about ``--mb`` MB whose ``soap:Header`` holds
  empty elements (``<h/>`` each), its body a valid startSimulate;
- ``json-lists``: about ``--mb`` MB of ``[[],[],...]`` to /services/rs/XDemo/startSimulate;
- ``json-dima`` and ``soap-dima``: a legitimate large request, startCreateDistanceMatrix
  with ``--locations`` start locations and a few destinations.

For each: the HTTP process's VmRSS before, its peak (VmHWM, reset before each case
through /proc/<pid>/clear_refs) and its VmRSS once every answer is in and it stops
falling; the node's RSS
(all its processes) at the same moments; the seconds to each answer and its HTTP status;
and the p50/p99 of a getRuntimeInformation sent every 10 ms by another client meanwhile.

    python benchmarks/parsing.py [--mb 10] [--parallel 8] [--locations 100000]
                                 [--case soap-header,json-lists,json-dima,soap-dima]
"""

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.roundtrip import process_names  # noqa: E402
from tests.harness import Server  # noqa: E402
from tests.processes import descendants  # noqa: E402

MB = 1024 * 1024
SOAP_ENV = "http://schemas.xmlsoap.org/soap/envelope/"
XDEMO_NS = "http://xruntime.org/xserver/xdemo"
DIMA_NS = "http://xruntime.org/xserver/xdima"


def soap_header(size):
    head = f'<soap:Envelope xmlns:soap="{SOAP_ENV}"><soap:Header>'
    tail = (
        f'</soap:Header><soap:Body><x:startSimulate xmlns:x="{XDEMO_NS}"><durationMs>0</durationMs>'
        "</x:startSimulate></soap:Body></soap:Envelope>"
    )
    count = (size - len(head) - len(tail)) // 4
    return "/services/ws/XDemo", (head + "<h/>" * count + tail).encode(), "text/xml; charset=utf-8"


def json_lists(size):
    count = (size - 2) // 3
    return (
        "/services/rs/XDemo/startSimulate",
        ("[" + ",".join(["[]"] * count) + "]").encode(),
        "application/json",
    )


def _locations(n, rng):
    return [(round(rng.uniform(6, 15), 6), round(rng.uniform(47, 55), 6)) for _ in range(n)]


def json_dima(locations):
    rng = random.Random(1)
    body = {
        "startLocations": [{"longitude": x, "latitude": y} for x, y in _locations(locations, rng)],
        "destinationLocations": [{"longitude": x, "latitude": y} for x, y in _locations(4, rng)],
    }
    return (
        "/services/rs/XDima/startCreateDistanceMatrix",
        json.dumps(body).encode(),
        "application/json",
    )


def soap_dima(locations):
    rng = random.Random(1)

    def located(tag, points):
        return "".join(
            f"<{tag}><longitude>{x}</longitude><latitude>{y}</latitude></{tag}>" for x, y in points
        )

    body = (
        f'<soap:Envelope xmlns:soap="{SOAP_ENV}"><soap:Body>'
        f'<d:startCreateDistanceMatrix xmlns:d="{DIMA_NS}">'
        + located("startLocations", _locations(locations, rng))
        + located("destinationLocations", _locations(4, rng))
        + "</d:startCreateDistanceMatrix></soap:Body></soap:Envelope>"
    )
    return "/services/ws/XDima", body.encode(), "text/xml; charset=utf-8"


def kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def node_rss(server):
    total = 0
    for pid in [server.proc.pid] + descendants(server.proc.pid):
        try:
            total += kb(pid, "VmRSS")
        except (OSError, StopIteration):
            pass
    return total / 1024


def settled(pid, within=3.0):
    """VmRSS in MB once it stops falling (memory given back after the answer), at most
    ``within`` seconds on."""
    deadline, last = time.monotonic() + within, kb(pid, "VmRSS")
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = kb(pid, "VmRSS")
        if now >= last - 1024:
            return now / 1024
        last = now
    return last / 1024


def post(port, path, body, ctype):
    began = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("POST", path, body, {"Content-Type": ctype})
        response = conn.getresponse()
        data = response.read()
        return response.status, time.monotonic() - began, data
    finally:
        conn.close()


class Prober(threading.Thread):
    """Another caller: getRuntimeInformation every 10 ms, its latencies kept."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.latencies, self.stopping = port, [], threading.Event()

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        while not self.stopping.is_set():
            began = time.monotonic()
            conn.request(
                "POST",
                "/services/rs/XRuntime/getRuntimeInformation",
                b"{}",
                {"Content-Type": "application/json"},
            )
            conn.getresponse().read()
            self.latencies.append(time.monotonic() - began)
            self.stopping.wait(0.01)
        conn.close()

    def figures(self):
        ms = sorted(1000 * t for t in self.latencies) or [0]
        return statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.99))], ms[-1]


def measure(server, http_pid, name, message, parallel):
    path, body, ctype = message
    with open(f"/proc/{http_pid}/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    before, node_before = kb(http_pid, "VmRSS") / 1024, node_rss(server)
    prober = Prober(server.port)
    prober.start()
    results = [None] * parallel

    def one(i):
        results[i] = post(server.port, path, body, ctype)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(parallel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    prober.stopping.set()
    prober.join()
    peak, after = kb(http_pid, "VmHWM") / 1024, settled(http_pid)
    node_after = node_rss(server)
    statuses = sorted({status for status, _, _ in results})
    seconds = [elapsed for _, elapsed, _ in results]
    p50, p99, worst = prober.figures()
    print(
        f"{name} ×{parallel} ({len(body) / MB:.1f} MB): HTTP {statuses}, answered in "
        f"{min(seconds):.2f}-{max(seconds):.2f} s; HTTP process RSS {before:.0f} → peak {peak:.0f} "
        f"(+{peak - before:.0f}) → after {after:.0f} MB (+{after - before:.0f}); node RSS "
        f"{node_before:.0f} → {node_after:.0f} MB; others' latency p50 {p50:.1f} p99 {p99:.1f} "
        f"max {worst:.1f} ms ({len(prober.latencies)} calls)",
        flush=True,
    )
    first = results[0][2]
    if statuses != [200]:
        print(f"  answer: {first[:300]!r}")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=float, default=10)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--locations", type=int, default=100_000)
    parser.add_argument("--case", default="soap-header,json-lists,json-dima,soap-dima")
    args = parser.parse_args()
    size = int(args.mb * MB) - 1024
    makers = {
        "soap-header": lambda: soap_header(size),
        "json-lists": lambda: json_lists(size),
        "json-dima": lambda: json_dima(args.locations),
        "soap-dima": lambda: soap_dima(args.locations),
    }
    for name in args.case.split(","):
        message = makers[name]()
        with tempfile.TemporaryDirectory() as folder:  # a fresh node for each case
            server = Server(
                folder,
                server_keys={"processes": 1},
                threads=32,
                env={"XRUNTIME_SERVICE_MODULES": ""},
            ).start()
            try:
                pids = [server.proc.pid] + descendants(server.proc.pid)
                http_pid = next(
                    pid for pid, kind in process_names(pids, server.port).items() if kind == "http"
                )
                for parallel in (1, args.parallel):
                    measure(server, http_pid, name, message, parallel)
            finally:
                server.stop()


if __name__ == "__main__":
    main()
