"""How long the sweep of erased jobs' result files holds up the node's other writes.

A SQLite store keeps large results as files beside the database
(``store/result_files.py``); erasing a job (deleteJob, retention) leaves its file, and the
main process's housekeeping sweeps the files no row refers to, every
``RESULT_SWEEP_PERIOD``, under the database's write lock.  While the lock is held every
write of the node waits: a start, a claim, a job's end, and those of other nodes sharing
the database.

Here, for each tree (this one, and ``--baseline-tree`` in the same run, in turns): a
store on a new SQLite file in ``--folder`` (default: the temporary folder, which is
where a node's database usually is not: give the disk your database is on), ``--files``
jobs each finished with a result file of ``--megabytes`` MB and then erased; then one
sweep, while ANOTHER process writes (``BEGIN IMMEDIATE; COMMIT``, as any write of the
node begins) back to back.  Printed: the sweep's time, and the longest and the p99 wait
of the other process's writes meanwhile, best of ``--rounds``.

    python benchmarks/sweep_stall.py [--files 8] [--megabytes 36] [--rounds 3]
                                     [--folder PATH] [--baseline-tree PATH
                                     [--baseline-python PYTHON]]
"""

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.stats import percentile  # noqa: E402


def measure(root, folder, files, megabytes):
    """(In a process of the tree at ``root``.)  The sweep's seconds and the other
    process's write waits (s) while it ran."""
    sys.path.insert(0, root)
    from tests.unit.helpers import new_record
    from xruntime.protocol.states import Status
    from xruntime.store import JobStore, now_ms, result_files
    from xruntime.store.result_files import ResultFile

    database = os.path.join(folder, "jobs.db")
    store = JobStore("sqlite:///" + database)
    try:
        spill = os.path.join(result_files.make_private_folder(store.result_folder), "spill")
        os.makedirs(spill, exist_ok=True)
        blob = os.urandom(1 << 20) * megabytes
        for n in range(files):
            rec = new_record()
            assert store.create(rec, 0)
            claimed = store.claim("node-a:1", now_ms(), 30_000)
            assert claimed is not None
            path = os.path.join(spill, f"job-{n}")
            with open(path, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())  # (on disk, as a worker hands it over)
            assert store.finish(
                rec.id, Status.SUCCEEDED, now_ms(), result=ResultFile(path, len(blob))
            )
            assert store.erase(rec.id, [Status.SUCCEEDED])
        del blob
        writer = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--write", database],
            stdout=subprocess.PIPE,
            stdin=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(0.2)  # (writing back to back)
        began = time.perf_counter()
        swept = store.sweep_result_files()
        took = time.perf_counter() - began
        time.sleep(0.05)
        writer.stdin.write("stop\n")
        writer.stdin.flush()
        waits = json.loads(writer.stdout.readline())
        writer.wait()
        assert swept == files, swept
        assert not [n for n in os.listdir(store.result_folder) if n.endswith(".result")]
        return took, waits
    finally:
        store.close()


def write_back_to_back(database):
    """(In the other process.)  Write transactions back to back until told to stop; the
    wait of each (s), as JSON."""
    import threading

    conn = sqlite3.connect(database, timeout=60, isolation_level=None)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    waits = []
    print("ready", flush=True)
    while not stop.is_set():
        began = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("COMMIT")
        waits.append(time.perf_counter() - began)
        time.sleep(0.0005)
    print(json.dumps(waits), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--megabytes", type=int, default=36)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--folder", help="where the databases are made (the disk matters)")
    parser.add_argument("--baseline-tree", metavar="PATH")
    parser.add_argument("--baseline-python", metavar="PATH")
    parser.add_argument("--write", metavar="DATABASE", help=argparse.SUPPRESS)
    parser.add_argument("--measure", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        write_back_to_back(args.write)
        return
    if args.measure:
        root, folder, files, megabytes = args.measure
        print(json.dumps(measure(root, folder, int(files), int(megabytes))))
        return
    trees = [("this tree", ROOT, sys.executable)]
    if args.baseline_tree:
        python = args.baseline_python or os.path.join(args.baseline_tree, ".venv/bin/python")
        trees.insert(0, ("baseline", os.path.abspath(args.baseline_tree), python))
    results = {label: [] for label, _, _ in trees}
    for turn in range(args.rounds):
        for label, root, python in trees if turn % 2 == 0 else trees[::-1]:
            with tempfile.TemporaryDirectory(dir=args.folder) as folder:
                out = subprocess.run(
                    [python, os.path.abspath(__file__), "--measure", root, folder]
                    + [str(args.files), str(args.megabytes)],
                    capture_output=True,
                    text=True,
                    cwd=root,
                    check=True,
                ).stdout
            took, waits = json.loads(out.strip().splitlines()[-1])
            results[label].append((took, max(waits), percentile(waits, 99), len(waits)))
    print(
        f"sweep of {args.files} erased results of {args.megabytes} MB each, another process "
        f"writing back to back meanwhile; best of {args.rounds} rounds:"
    )
    for label, root, _ in trees:
        best = min(results[label], key=lambda r: r[1])
        runs = ", ".join(f"{r[1] * 1000:.1f}" for r in results[label])
        print(
            f"  {label} ({root}): sweep {best[0] * 1000:.1f} ms; the other's writes: longest "
            f"wait {best[1] * 1000:.1f} ms, p99 {best[2] * 1000:.2f} ms ({best[3]} writes); "
            f"longest wait in each round: {runs} ms"
        )


if __name__ == "__main__":
    main()
