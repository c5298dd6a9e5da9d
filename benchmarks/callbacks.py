"""Completion callbacks under load: N short jobs with a callback each, on a default node.

Two runs on the same node, in turns: N no-op jobs (``startSimulate`` with
``durationMs=0``) started by ``--clients`` threads, with a callback to a real receiver
(in a process of its own), then N without.  It reports, for the run with callbacks,
whether every job's end was delivered (exactly once by ``webhook-id``), the time from
each job's end (its "succeeded" event, the database's clock: this host's on SQLite) to
the receipt (p50, p99, max), and jobs/s of both runs (first start to last job
finished; with callbacks, to the last delivery).

    python benchmarks/callbacks.py [--jobs 10000] [--clients 8] [--database-url URL]

Target (issue 25): all delivered, p99 <= 50 ms, jobs/s within 10 % of the run without.
"""

import argparse
import http.client
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.stats import percentile  # noqa: E402
from tests.harness import Server, default_config, free_port  # noqa: E402
from tests.processes import descendants  # noqa: E402

SECRET = "whsec_" + "a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleQ=="


def receive(port, stop, results):
    """The receiver's process: a real HTTP server; at ``stop``, [(job id, webhook-id, time)]."""
    from tests.receiver import Receiver

    receiver = Receiver(port=port)
    stop.wait()
    results.put([(r.data["id"], r.headers["webhook-id"], r.at) for r in receiver.received])
    receiver.stop()


class Client:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(self, service, operation, body):
        self.conn.request(
            "POST",
            f"/services/rs/{service}/{operation}",
            json.dumps(body),
            {"Content-Type": "application/json"},
        )
        answer = self.conn.getresponse()
        return answer.status, json.loads(answer.read())


def start_all(port, jobs, clients, callback):
    """Start ``jobs`` jobs from ``clients`` threads (waiting out a full queue); their ids."""
    ids, lock = [], threading.Lock()
    left = [jobs]

    def run():
        client = Client(port)
        while True:
            with lock:
                if not left[0]:
                    return
                left[0] -= 1
            body = {"durationMs": 0, **({"callback": {"url": callback}} if callback else {})}
            while True:
                status, answer = client.call("XDemo", "startSimulate", body)
                if status == 200:
                    break
                assert answer["faultInfo"]["$type"] == "QueueOverflowFault", answer
                time.sleep(0.05)
            with lock:
                ids.append(answer["id"])

    threads = [threading.Thread(target=run) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ids


def wait_finished(port, total):
    """Until ``total`` jobs have succeeded; the time it was seen."""
    client = Client(port)
    while True:
        _, info = client.call("XRuntime", "getRuntimeInformation", {})
        done = {c["status"]: c["count"] for c in info.get("jobs", [])}.get("SUCCEEDED", 0)
        if done >= total:
            return time.time()
        time.sleep(0.05)


def ended_at(port, ids):
    """{job id: its "succeeded" event's time, s}."""
    from datetime import datetime

    client, found = Client(port), {}
    for job_id in ids:
        _, events = client.call("XRuntime", "getJobEvents", {"id": job_id})
        for event in events["events"]:
            if event["status"] == "SUCCEEDED":
                found[job_id] = datetime.fromisoformat(
                    event["time"].replace("Z", "+00:00")
                ).timestamp()
                break
    return found


class Cpu:
    """CPU seconds (user + system, from /proc) of the node's main process, of its
    callbacks process, of its other processes (HTTP, workers), of the receiver and of
    this process (the clients), since the last ``lap()``."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, main_pid, receiver_pid):
        self.main_pid, self.receiver_pid = main_pid, receiver_pid
        self.last = self.now()

    def now(self):
        """{pid: (kind, CPU s)} of the processes alive now."""
        kinds = [(self.main_pid, "main"), (self.receiver_pid, "receiver"), (os.getpid(), "clients")]
        kinds += [(pid, self.kind_of(pid)) for pid in descendants(self.main_pid)]
        found = {}
        for pid, kind in kinds:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # it ended meanwhile
                continue
            found[pid] = kind, (int(fields[11]) + int(fields[12])) / self.TICK
        return found

    @staticmethod
    def kind_of(pid):
        """ "callbacks" (the node's callbacks process names itself) or "others"."""
        try:
            with open(f"/proc/{pid}/comm") as f:
                return "callbacks" if f.read().strip() == "xr-callbacks" else "others"
        except OSError:
            return "others"

    def lap(self):
        """{kind: CPU s} since the last lap (of the processes alive at both)."""
        now = self.now()
        spent = dict.fromkeys(["main", "callbacks", "others", "receiver", "clients"], 0.0)
        for pid, (kind, seconds) in now.items():
            if pid in self.last:
                spent[kind] += seconds - self.last[pid][1]
        self.last = now
        return spent


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--database-url", help="default: SQLite in a temporary folder")
    args = parser.parse_args()

    ctx = multiprocessing.get_context("spawn")
    receiver_port = free_port()
    stop, results = ctx.Event(), ctx.Queue()
    receiver = ctx.Process(target=receive, args=(receiver_port, stop, results))
    receiver.start()
    with tempfile.TemporaryDirectory() as folder:
        port = free_port()
        path = default_config(folder, port, args.database_url)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        text = text.replace("\nallowed = []", '\nallowed = ["127.0.0.1"]', 1)
        text = text.replace('\nsecret = ""', f'\nsecret = "{SECRET}"', 1)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        srv = Server(folder, config=path).start()
        try:
            url = f"http://127.0.0.1:{receiver_port}/hook"
            cpu = Cpu(srv.proc.pid, receiver.pid)
            began = time.time()
            ids = start_all(port, args.jobs, args.clients, url)
            wait_finished(port, args.jobs)
            pending = args.jobs
            stop.set()
            received = results.get(timeout=600) if pending else []
            last = max(at for _, _, at in received) if received else time.time()
            with_rate = args.jobs / (last - began)
            with_cpu = cpu.lap()
            ends = ended_at(port, ids)
            cpu.lap()
            began = time.time()
            start_all(port, args.jobs, args.clients, None)
            without_rate = args.jobs / (wait_finished(port, 2 * args.jobs) - began)
            without_cpu = cpu.lap()
        finally:
            srv.stop()
    receiver.join(10)
    by_id = {}
    for job_id, message_id, at in received:
        by_id.setdefault(job_id, []).append((message_id, at))
    delivered = [job_id for job_id in ids if job_id in by_id]
    twice = [job_id for job_id, got in by_id.items() if len({m for m, _ in got}) != len(got)]
    lags = [(min(at for _, at in by_id[job_id]) - ends[job_id]) * 1000 for job_id in delivered]
    print(f"jobs: {args.jobs}, clients: {args.clients}, database: {args.database_url or 'SQLite'}")
    print(f"delivered: {len(delivered)} of {args.jobs}; an event received twice: {len(twice)}")
    print(
        f"job end → receipt: p50 {percentile(lags, 50):.1f} ms, p99 {percentile(lags, 99):.1f} ms, "
        f"max {max(lags):.1f} ms"
    )
    print(
        f"jobs/s: {with_rate:.0f} with callbacks, {without_rate:.0f} without "
        f"({with_rate / without_rate:.0%})"
    )
    for kind in with_cpu:
        print(
            f"CPU ms per job, {kind}: {with_cpu[kind] / args.jobs * 1000:.2f} with callbacks, "
            f"{without_cpu[kind] / args.jobs * 1000:.2f} without"
        )
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
