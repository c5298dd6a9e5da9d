"""The no-op job cycle on xruntime beside the floor (benchmarks/floor.py), in one run.

A cycle is startSimulate(durationMs=0) → watchJob until SUCCEEDED → fetchSimulateResponse
over JSON (``roundtrip.cycle``).  The servers, each started fresh and measured in turn:

- ``floor``: benchmarks/floor.py, the cycle's least work on xruntime's parts (its
  docstring says what it does and leaves out);
- ``xruntime``: a node of this tree on its DEFAULT configuration — config/xserver.toml
  copied with only its port and database url (SQLite in a temporary folder) changed,
  so 2 HTTP processes on 2 cores, 2 workers (``longpoll.start_node``);
- ``baseline`` (``--baseline-tree PATH``): the same of another checkout, e.g.
  ``git worktree add --detach /tmp/base36 COMMIT``, run from that tree with its own
  interpreter (PATH/.venv/bin/python if there is one, or ``--baseline-python``).

The client is ONE process with N threads (``--clients``, default 1 and 8), each on its own
keep-alive ``http.client`` connection, running cycles back to back: ``--warmup`` seconds
first, then ``--seconds`` measured.  A cycle counts if it ended in the measured window;
its latency is from its start to its end.  For each server and N it prints cycles/s,
the server's CPU time per cycle by process kind (user + system of every process of its
tree, /proc/PID/stat, over the measured window: ``http`` holds the listening socket,
``main`` is the process started, ``worker`` the rest), cycle p50/p99, and the ratios to
the floor: CPU per cycle ÷ the floor's (the target of issue 36 is ≤ 3) and cycles/s ÷ the
floor's.  With ``--rounds R`` the servers are measured R times in turns (the order
alternating), so that the machine's other load hits all of them; the summary gives the
median of the rounds.  The client shares the machine's cores with the server: at 8
clients the floor is bound by the client (one process, the GIL), which the ratios
understate xruntime's gap by.

With ``--profile SECONDS``, this tree's node is then run once more with 8 clients and
``py-spy record --gil --format raw`` samples each of its processes for that long; the
top 15 functions by own time (samples holding the GIL whose innermost frame is the
function) are printed per process kind.  py-spy is looked for beside this interpreter
and on PATH (``.venv/bin/pip install py-spy``); without it the profile is skipped.

    python benchmarks/cycle.py [--seconds 10] [--warmup 2] [--clients 1 8] [--rounds 1]
                               [--baseline-tree PATH [--baseline-python PYTHON]]
                               [--profile SECONDS]
"""

import argparse
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.floor import FloorProcess  # noqa: E402
from benchmarks.longpoll import Tree, start_node  # noqa: E402
from benchmarks.roundtrip import Client, cpu_seconds, cycle, process_names  # noqa: E402
from benchmarks.stats import percentile  # noqa: E402
from tests.harness import ROOT, descendants, free_port  # noqa: E402

FLOOR = os.path.join(ROOT, "benchmarks", "floor.py")
KINDS = ("http", "main", "worker")


def Floor(folder):
    """benchmarks/floor.py in a subprocess, started and stopped as a node is."""
    return FloorProcess(FLOOR, "floor: serving", folder, free_port())


def start(tree, folder):
    """The floor (``tree`` None) or a node of ``tree``, started in ``folder``."""
    return Floor(folder).start() if tree is None else start_node(tree, folder, None)


def kinds(server):
    """{pid: kind} of the server's processes (the process started is ``main``)."""
    root = server.proc.pid
    pids = [root] + descendants(root)
    names = process_names(pids, server.port)
    names[root] = "main"
    return names


def load(port, clients, stop, window, latencies, errors):
    """``clients`` threads running cycles until ``stop``; the latency of each cycle that
    ended inside ``window`` [start, end] goes to its thread's list."""

    def run(mine):
        try:
            client = Client(port)
            while not stop.is_set():
                began = time.perf_counter()
                cycle(client)
                ended = time.perf_counter()
                start, end = window
                if start is not None and start <= ended and (end is None or ended <= end):
                    mine.append(ended - began)
        except Exception as e:  # the figures would be wrong: say it and stop
            errors.append(repr(e))
            stop.set()

    threads = []
    for _ in range(clients):
        latencies.append([])
        threads.append(threading.Thread(target=run, args=(latencies[-1],), daemon=True))
        threads[-1].start()
    return threads


def measure(server, clients, seconds, warmup):
    names = kinds(server)
    stop, window, latencies, errors = threading.Event(), [None, None], [], []
    threads = load(server.port, clients, stop, window, latencies, errors)
    time.sleep(warmup)
    before, started = cpu_seconds(names), time.perf_counter()
    window[0] = started
    time.sleep(seconds)
    ended = time.perf_counter()
    window[1] = ended
    after = cpu_seconds(names)
    stop.set()
    for thread in threads:
        thread.join(70)
    if errors:
        raise RuntimeError(f"a client failed: {errors[0]}")
    done = sorted(value * 1000 for mine in latencies for value in mine)
    cpu = collections.Counter()
    for pid, kind in names.items():
        if pid in after and pid in before:
            cpu[kind] += after[pid] - before[pid]
    count = max(1, len(done))
    return {
        "rate": len(done) / (ended - started),
        "cpu": sum(cpu.values()) * 1000 / count,
        **{kind: cpu[kind] * 1000 / count for kind in KINDS},
        "p50": percentile(done, 50) if done else float("nan"),
        "p99": percentile(done, 99) if done else float("nan"),
    }


COLUMNS = (
    ("rate", "cycles/s", "{:.0f}"),
    ("cpu", "CPU ms/cycle", "{:.2f}"),
    ("http", "http", "{:.2f}"),
    ("main", "main", "{:.2f}"),
    ("worker", "worker", "{:.2f}"),
    ("p50", "p50 ms", "{:.1f}"),
    ("p99", "p99 ms", "{:.1f}"),
)


def table(rows, with_ratios):
    """rows: (clients, label, figures); the ratios are to the floor's row of the same N."""
    head = f"{'clients':>7}  {'server':<9}" + "".join(f"{t:>13}" for _, t, _ in COLUMNS)
    if with_ratios:
        head += f"{'CPU ÷ floor':>13}{'rate ÷ floor':>14}"
    print(head)
    floor = {n: figures for n, label, figures in rows if label == "floor"}
    for n, label, figures in rows:
        line = f"{n:>7}  {label:<9}" + "".join(f"{f.format(figures[k]):>13}" for k, _, f in COLUMNS)
        if with_ratios and n in floor:
            line += f"{figures['cpu'] / floor[n]['cpu']:>13.2f}"
            line += f"{figures['rate'] / floor[n]['rate']:>14.2f}"
        print(line)
    sys.stdout.flush()


def profile(tree, seconds, clients=8):
    spy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
    if spy is None:
        print("\nprofile: py-spy is missing (.venv/bin/pip install py-spy); skipped")
        return
    with tempfile.TemporaryDirectory() as folder:
        server = start(tree, folder)
        try:
            names = kinds(server)
            stop, window, latencies, errors = threading.Event(), [None, None], [], []
            threads = load(server.port, clients, stop, window, latencies, errors)
            time.sleep(2)
            spies = {
                pid: subprocess.Popen(
                    [spy, "record", "--gil", "--format", "raw", "--duration", str(seconds)]
                    + ["--output", os.path.join(folder, f"{pid}.txt"), "--pid", str(pid)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for pid, kind in names.items()
                if kind in KINDS
            }
            failures = {pid: p.communicate(timeout=seconds + 60)[1] for pid, p in spies.items()}
            stop.set()
            for thread in threads:
                thread.join(70)
            own = collections.defaultdict(collections.Counter)
            for pid in spies:
                path = os.path.join(folder, f"{pid}.txt")
                if spies[pid].returncode != 0 or not os.path.exists(path):
                    print(f"profile: py-spy on {names[pid]} {pid} failed: {failures[pid][-300:]}")
                    continue
                with open(path) as f:
                    for line in f:
                        stack, _, count = line.rstrip("\n").rpartition(" ")
                        if stack and count.isdigit():
                            own[names[pid]][_function(stack.split(";")[-1])] += int(count)
        finally:
            server.stop()
    print(f"\n=== profile: {tree.label}, {clients} clients, {seconds} s, py-spy --gil, own time")
    for kind in KINDS:
        total = sum(own[kind].values())
        if not total:
            continue
        print(f"{kind} processes ({total} samples holding the GIL):")
        for function, count in own[kind].most_common(15):
            print(f"  {100 * count / total:5.1f} %  {function}")


def _function(frame):
    """``name (path:line)`` → ``name (path)`` with the path from its package on."""
    match = re.match(r"(.*) \((.*?)(?::\d+)?\)$", frame)
    if not match:
        return frame
    name, path = match.groups()
    for marker in ("site-packages/", "/lib/python3", ROOT + "/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10, help="measured, per client count")
    parser.add_argument("--warmup", type=float, default=2, help="before each measure (s)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline-tree", metavar="PATH")
    parser.add_argument("--baseline-python", metavar="PATH")
    parser.add_argument("--profile", type=int, metavar="SECONDS")
    args = parser.parse_args()
    this = Tree("xruntime", ROOT, sys.executable)
    servers = [("floor", None), ("xruntime", this)]
    if args.baseline_tree:
        base = os.path.abspath(args.baseline_tree)
        venv_python = os.path.join(base, ".venv", "bin", "python")
        python = args.baseline_python or (
            venv_python if os.path.exists(venv_python) else sys.executable
        )
        servers.append(("baseline", Tree("baseline", base, python)))
    for label, tree in servers[1:]:
        print(f"{label}: {tree.describe()}")
    print(f"client: 1 process, threads as clients; the machine has {os.cpu_count()} cores")
    measured = collections.defaultdict(list)  # (label, n) → figures of each round
    for turn in range(args.rounds):
        rows = []
        for label, tree in servers if turn % 2 == 0 else servers[::-1]:
            with tempfile.TemporaryDirectory() as folder:
                server = start(tree, folder)
                try:
                    for n in args.clients:
                        figures = measure(server, n, args.seconds, args.warmup)
                        measured[label, n].append(figures)
                        rows.append((n, label, figures))
                finally:
                    server.stop()
        print(f"\n=== round {turn + 1}/{args.rounds}")
        order = [label for label, _ in servers]
        table(sorted(rows, key=lambda row: (row[0], order.index(row[1]))), with_ratios=True)
    if args.rounds > 1:
        print(f"\n=== median of {args.rounds} rounds")
        table(
            [
                (n, label, {k: statistics.median(f[k] for f in measured[label, n]) for k in f0})
                for n in args.clients
                for label, _ in servers
                for f0 in [measured[label, n][0]]
            ],
            with_ratios=True,
        )
    if args.profile:
        profile(this, args.profile)


if __name__ == "__main__":
    main()
