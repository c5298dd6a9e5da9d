"""No-op job cycles per second over real HTTP (JSON), and the watch wake-up latency.

A cycle is startSimulate(durationMs=0) → watchJob until SUCCEEDED → fetchSimulateResponse,
each client on its own keep-alive connection in its own process.  The wake-up latency
is the time from a job's end to the watcher's answer: a watch is held on a 200 ms job;
the job's end is its queue time (client clock when startSimulate was sent) plus its
frozen elapsedTime.

    python benchmarks/roundtrip.py [--seconds 10] [--clients 1 8] [--wakeups 200]

Targets on the 2-core machine (default config, SQLite): >= 450 cycles/s with 8 clients, both
cores busy, wake-up p99 <= 20 ms.  The CPU time of the node's processes during the run is
printed too.
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.parallel import per_second  # noqa: E402
from benchmarks.stats import percentile  # noqa: E402
from tests.harness import Server, descendants  # noqa: E402
from tests.processes import tcp_sockets  # noqa: E402


def cpu_seconds(pids):
    """{pid: user+system CPU seconds} of the given processes."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            found[pid] = (int(fields[11]) + int(fields[12])) / ticks
        except OSError:
            pass
    return found


def process_names(pids, port):
    """main, http (the processes holding the listening socket), worker, tracker."""
    listening = _listening_inode(port)
    names = {}
    for pid in pids:
        try:
            cmd = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
            fds = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        except OSError:
            continue
        names[pid] = (
            "main"
            if "xruntime serve" in cmd
            else "tracker"
            if "resource_tracker" in cmd
            else "http"
            if f"socket:[{listening}]" in fds
            else "worker"
        )
    return names


def _listening_inode(port):
    return next((inode for _, state, _, inode in tcp_sockets(port) if state == "0A"), None)


class Client:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=70)

    def call(self, service, operation, body):
        self.conn.request(
            "POST",
            f"/services/rs/{service}/{operation}",
            json.dumps(body),
            {"Content-Type": "application/json"},
        )
        response = self.conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{operation}: {response.status} {data[:200]!r}")
        return json.loads(data)


def cycle(
    client, service="XDemo", start="startSimulate", fetch="fetchSimulateResponse", request=None
):
    """``start`` → watchJob until SUCCEEDED → ``fetch`` (by default the no-op job)."""
    job = client.call(service, start, {"durationMs": 0} if request is None else request)
    while job["status"] != "SUCCEEDED":
        job = client.call("XRuntime", "watchJob", {"id": job["id"], "progressUpdatePeriod": 250})
        if job["status"] in ("FAILED", "DELETED", "UNKNOWN"):
            raise RuntimeError(f"job ended {job['status']}")
    client.call(service, fetch, {"id": job["id"]})


def cycle_step(port):
    """One cycle on this process's own connection."""
    client = Client(port)
    return lambda: cycle(client)


def wakeup_latencies(port, count):
    client = Client(port)
    latencies = []
    for _ in range(count):
        sent = time.time()
        job = client.call("XDemo", "startSimulate", {"durationMs": 200})
        while job["status"] != "SUCCEEDED":
            job = client.call(
                "XRuntime",
                "watchJob",
                {"id": job["id"], "progressUpdatePeriod": 250, "maximumPollingPeriod": 10000},
            )
        answered = time.time()
        latencies.append((answered - sent) * 1000 - job["elapsedTime"])
        client.call("XDemo", "fetchSimulateResponse", {"id": job["id"]})
    return latencies


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--wakeups", type=int, default=200)
    parser.add_argument("--database-url", help="default: SQLite in a temporary folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = Server(
            folder, database_url=args.database_url, threads=None
        ).start()  # default config
        try:
            for _ in range(20):  # warm up connections and workers
                cycle(Client(server.port))
            pids = [server.proc.pid] + descendants(server.proc.pid)
            names = process_names(pids, server.port)
            for n in args.clients:
                before, t0 = cpu_seconds(pids), time.time()
                rate = per_second(cycle_step, (server.port,), n, args.seconds)
                after, wall = cpu_seconds(pids), time.time() - t0
                busy = {pid: (after[pid] - before.get(pid, 0)) / wall for pid in after}
                print(
                    f"cycles/s with {n} client(s): {rate:.0f}   (start → watch → fetch, no-op job)"
                )
                print(
                    "  node CPU (cores busy, over the run incl. client start-up): "
                    f"{sum(busy.values()):.2f} total; "
                    + ", ".join(
                        f"{names.get(pid, '?')} {share:.2f}"
                        for pid, share in sorted(busy.items(), key=lambda item: -item[1])
                        if share >= 0.01
                    )
                )
            lat = wakeup_latencies(server.port, args.wakeups)
            print(
                f"watch wake-up latency over {len(lat)} jobs: p50 {statistics.median(lat):.1f} ms, "
                f"p99 {percentile(lat, 99):.1f} ms, max {max(lat):.1f} ms"
            )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
