"""watchJobs over 1 000 jobs (docs/protocol.md §14): how soon after a change it answers.

A real node on the DEFAULT configuration (config/xserver.toml copied with only its port
and database url changed: 2 workers, one HTTP process per core).  Its two workers are
held by two long XDemo jobs, so that the ``--jobs`` jobs started after them stay
QUEUING.  Each round, on keep-alive connections of their own:

1. a watchJobs over ``--jobs`` of them (``progressUpdatePeriod`` 250 ms,
   ``maximumPollingPeriod`` 50 s), and, the baseline measured beside it, a watchJob of
   the one job this round changes, are sent and held (the node's held-watches gauge);
2. once 0.3 s have passed (past the period: a change is answered at once), that job is
   deleted (``deleteJob`` erases a queued job: both watches answer it ``UNKNOWN``);
3. each answer's arrival minus the deleteJob answer's arrival (the node notifies the
   change before it answers the deleteJob): the "change → answer" time.  The time from
   before the deleteJob was sent, an upper bound, is printed too.

Then ``--rounds`` watchJobs over the same jobs with both periods 250 ms, which answer
every job at 250 ms: the answer's time past 250 ms is the cost of reading and writing
``--jobs`` jobs in one answer.

    python benchmarks/watchjobs.py [--jobs 1000] [--rounds 20] [--database-url URL]

The machine's other load moves every figure; the ratio to the watchJob baseline of the
same run moves much less.  Target (issue 25): p50 within 20 ms of the change.
"""

import argparse
import http.client
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.stats import percentile  # noqa: E402
from tests.harness import Server, default_config, free_port  # noqa: E402

HELD_AFTER = 0.3  # s after a watch was sent: past its 250 ms period


class Connection:
    """One keep-alive connection to the node's JSON binding."""

    def __init__(self, port: int) -> None:
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=70)

    def call(self, operation: str, request: dict, service: str = "XRuntime") -> tuple[dict, float]:
        """(the answer, the monotonic time it arrived)."""
        body = json.dumps(request)
        self.http.request(
            "POST",
            f"/services/rs/{service}/{operation}",
            body,
            {"Content-Type": "application/json"},
        )
        answer = self.http.getresponse()
        data = answer.read()
        arrived = time.monotonic()
        assert answer.status == 200, (operation, answer.status, data[:300])
        return json.loads(data), arrived

    def close(self) -> None:
        self.http.close()


def held(server: Server) -> float:
    return server.scrape().get(("xruntime_held_watches", frozenset()), 0)


def wait_held(server: Server, count: int) -> None:
    deadline = time.monotonic() + 30
    while held(server) < count:
        assert time.monotonic() < deadline, f"{held(server)} of {count} watches held"
        time.sleep(0.005)


def figures(values: list[float]) -> str:
    return (
        f"p50 {percentile(values, 50) * 1000:6.1f}  p99 {percentile(values, 99) * 1000:6.1f}  "
        f"max {max(values) * 1000:6.1f} ms"
    )


def in_thread(call, *args):
    """``call(*args)`` in a thread; answers the thread and the list its answer lands in."""
    out: list = []
    thread = threading.Thread(target=lambda: out.append(call(*args)), daemon=True)
    thread.start()
    return thread, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs one watchJobs watches")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temp folder")
    args = parser.parse_args()
    # this process's threads receive answers that arrive together: the one waiting for
    # the GIL would count up to the default 5 ms switch interval as the node's delay
    sys.setswitchinterval(0.0001)

    folder = tempfile.mkdtemp(prefix="xruntime-watchjobs-")
    config = default_config(folder, free_port(), args.database_url)
    server = Server(folder, config=config, env={"XRUNTIME_SERVICE_MODULES": ""}).start()
    try:
        control = Connection(server.port)
        blockers = [
            control.call("startSimulate", {"steps": 1, "durationMs": 3_600_000}, "XDemo")[0]["id"]
            for _ in range(2)
        ]
        for job in blockers:
            while control.call("watchJob", {"id": job, "maximumPollingPeriod": 500})[0][
                "status"
            ] != ("RUNNING"):
                pass
        started = time.monotonic()
        queued = [
            control.call("startSimulate", {"steps": 1, "durationMs": 0}, "XDemo")[0]["id"]
            for _ in range(args.jobs + args.rounds)
        ]
        print(
            f"{len(queued)} queued jobs started in {time.monotonic() - started:.1f} s "
            f"({os.cpu_count()} cores, the node's default configuration)"
        )
        many, one = Connection(server.port), Connection(server.port)
        to_many, to_one, sent_many, sent_one = [], [], [], []
        for _ in range(args.rounds):
            ids = queued[: args.jobs]
            changed = ids[len(ids) // 2]
            sent = time.monotonic()
            watching_many, answer_many = in_thread(
                many.call,
                "watchJobs",
                {"ids": ids, "progressUpdatePeriod": 250, "maximumPollingPeriod": 50000},
            )
            watching_one, answer_one = in_thread(
                one.call,
                "watchJob",
                {"id": changed, "progressUpdatePeriod": 250, "maximumPollingPeriod": 50000},
            )
            wait_held(server, 2)
            while time.monotonic() < sent + HELD_AFTER:
                time.sleep(0.005)
            asked = time.monotonic()
            deleted, told = control.call("deleteJob", {"id": changed})
            assert deleted["status"] == "DELETED"
            queued.remove(changed)
            watching_many.join(10)
            watching_one.join(10)
            (jobs, many_at), (job, one_at) = answer_many[0], answer_one[0]
            assert [(j["id"], j["status"]) for j in jobs["jobs"]] == [(changed, "UNKNOWN")], (
                changed,
                jobs,
            )
            assert job["status"] == "UNKNOWN"
            to_many.append(many_at - told)
            to_one.append(one_at - told)
            sent_many.append(many_at - asked)
            sent_one.append(one_at - asked)
        remaining = queued[: args.jobs]
        whole = []
        for _ in range(args.rounds):
            sent = time.monotonic()
            answer, at = many.call(
                "watchJobs",
                {"ids": remaining, "progressUpdatePeriod": 250, "maximumPollingPeriod": 250},
            )
            assert len(answer["jobs"]) == len(remaining)
            whole.append(at - sent - 0.25)
        print(f"\nchange → answer, from the deleteJob's answer ({args.rounds} rounds):")
        print(f"  {f'watchJobs over {args.jobs} jobs':<32}{figures(to_many)}")
        print(f"  {'watchJob of the job (baseline)':<32}{figures(to_one)}")
        ratio = percentile(to_many, 50) / max(percentile(to_one, 50), 1e-6)
        print(f"  watchJobs / watchJob, p50: {ratio:.2f}")
        print("from before the deleteJob was sent (an upper bound):")
        print(f"  {f'watchJobs over {args.jobs} jobs':<32}{figures(sent_many)}")
        print(f"  {'watchJob of the job (baseline)':<32}{figures(sent_one)}")
        print(
            f"every job at maximumPollingPeriod, the answer's time past 250 ms "
            f"({len(remaining)} jobs):"
        )
        print(f"  {'watchJobs':<32}{figures(whole)}")
        for connection in (many, one):
            connection.close()
        for job in blockers:
            control.call("deleteJob", {"id": job})
        control.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
