"""The no-op job cycle under steady load, over time: does a node stay as fast as it starts?

A node of this tree (and of ``--baseline-tree``, measured after it, each started fresh
on its shipped configuration, SQLite in a temporary folder: ``longpoll.start_node``)
runs ``--clients`` (default 8) clients doing the cycle of ``benchmarks/cycle.py``
back to back, without a pause, for ``--phases`` (default 6) windows of ``--seconds``
(default 5) each.  Per window it prints the cycles done a second, the node's CPU time a
cycle (every process of its tree, /proc/PID/stat) and the size of the database file and
of its WAL (``-wal``).

A node that never pauses is what shows whether anything grows with the work done: on
SQLite, the WAL was never started over under steady writes (a checkpoint's copy was
never complete when the next write began) and grew by every commit's pages, about
150 kB a job, and each statement grew slower with it (issue 36: at 8 clients the
cycle's CPU rose from 1.8 to 2.9 ms within 20 s, the WAL to 2.3 GB).

    python benchmarks/steady_load.py [--clients 8] [--phases 6] [--seconds 5]
                                     [--baseline-tree PATH [--baseline-python PYTHON]]
"""

import argparse
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.cycle import kinds, load  # noqa: E402
from benchmarks.longpoll import Tree, baseline_tree, start_node  # noqa: E402
from benchmarks.roundtrip import cpu_seconds  # noqa: E402
from tests.harness import ROOT  # noqa: E402

WARMUP_S = 1.5


def files_mb(folder):
    """{name: MB} of the node's database files (data/xruntime.db and its -wal)."""
    data = os.path.join(folder, "data")
    sizes = {}
    for name in ("xruntime.db", "xruntime.db-wal"):
        path = os.path.join(data, name)
        sizes[name] = os.path.getsize(path) / 2**20 if os.path.exists(path) else 0.0
    return sizes


def run(tree, clients, phases, seconds):
    print(f"{tree.label}: {tree.describe()}")
    with tempfile.TemporaryDirectory() as folder:
        node = start_node(tree, folder, None)
        try:
            names = kinds(node)
            stop, window, latencies, errors = threading.Event(), [None, None], [], []
            threads = load(node.port, clients, stop, window, latencies, errors)
            time.sleep(WARMUP_S)
            for phase in range(phases):
                for mine in latencies:
                    mine.clear()
                before = sum(cpu_seconds(names).values())
                window[0], window[1] = time.perf_counter(), None
                time.sleep(seconds)
                window[1] = time.perf_counter()
                cpu = sum(cpu_seconds(names).values()) - before
                done = sum(len(mine) for mine in latencies)
                if errors:
                    raise RuntimeError(f"a client failed: {errors[0]}")
                sizes = files_mb(folder)
                print(
                    f"  {(phase + 1) * seconds:5.0f} s  {done / seconds:6.0f} cycles/s  "
                    f"{cpu * 1000 / max(1, done):5.2f} ms CPU a cycle  "
                    f"database {sizes['xruntime.db']:7.1f} MB  "
                    f"WAL {sizes['xruntime.db-wal']:7.1f} MB",
                    flush=True,
                )
            stop.set()
            for thread in threads:
                thread.join(70)
        finally:
            node.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--phases", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--baseline-tree", metavar="PATH")
    parser.add_argument("--baseline-python", metavar="PATH")
    args = parser.parse_args()
    trees = [Tree("this tree", ROOT, sys.executable)]
    if args.baseline_tree:
        trees.append(baseline_tree(args.baseline_tree, args.baseline_python))
    print(f"{args.clients} clients, one process; the machine has {os.cpu_count()} cores")
    for tree in trees:
        run(tree, args.clients, args.phases, args.seconds)


if __name__ == "__main__":
    main()
