"""The no-op job cycle under more clients than the node has cores: the longest cycle, and
the change feed's "too busy" warnings in the node's log, beside another tree's.

Under load an HTTP process's event loop is busy for a few ms at a time, and on SQLite the
node's processes tell each other of job changes by Unix datagrams, of which Linux queues
``net.unix.max_dgram_qlen`` per socket (10 by default).  A change that found the queue
full was once dropped (the node logged "a member of the change feed is too busy to take
changes"), and a watch whose job's end was dropped answered only at its maximum polling
period: a cycle of tens of seconds among cycles of tens of ms.  Since issue 36's fourth
step the feed sends such a change again (``store/feed.py``).

Each tree's node (this one; ``--baseline-tree PATH``, e.g. a git worktree of an older
commit, run with its own services) runs ``--clients`` back-to-back cycles of
``benchmarks/cycle.py`` for ``--seconds``, ``--rounds`` times in turns; for each round it
prints the cycles, their p50, p99 and longest (a cycle still waiting when the clients
stop counts until it ends), and the warnings of that name the node logged::

    python benchmarks/busy_feed.py [--clients 16] [--seconds 10] [--rounds 2]
                                   [--baseline-tree PATH [--baseline-python PATH]]
"""

import argparse
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.cycle import load, start  # noqa: E402
from benchmarks.longpoll import Tree, baseline_tree  # noqa: E402
from benchmarks.stats import percentile  # noqa: E402
from tests.harness import ROOT  # noqa: E402

#: The warning a dropped change was logged with.
TOO_BUSY = "too busy to take changes"


def measure(tree, clients, seconds):
    """One round on a fresh node of ``tree``: (cycles, p50, p99, longest in ms, warnings)."""
    with tempfile.TemporaryDirectory() as folder:
        server = start(tree, folder)
        try:
            stop, window, latencies, errors = threading.Event(), [0.0, None], [], []
            threads = load(server.port, clients, stop, window, latencies, errors)
            time.sleep(seconds)
            stop.set()
            for thread in threads:
                thread.join(120)  # (a watch held to its maximum polling period ends here)
            if errors:
                raise RuntimeError(f"a client failed: {errors[0]}")
            warnings = server.log().count(TOO_BUSY)
        finally:
            server.stop()
    done = sorted(value * 1000 for mine in latencies for value in mine)
    return len(done), percentile(done, 50), percentile(done, 99), done[-1], warnings


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline-tree", metavar="PATH")
    parser.add_argument("--baseline-python", metavar="PATH")
    args = parser.parse_args()
    trees = [Tree("this tree", ROOT, sys.executable)]
    if args.baseline_tree:
        trees.append(baseline_tree(args.baseline_tree, args.baseline_python))
    for tree in trees:
        print(f"{tree.label}: {tree.root}")
    print(f"{args.clients} clients, {args.seconds:g} s a round")
    head = ("round", "tree", "cycles", "p50 ms", "p99 ms", "longest ms")
    print("{:>5}  {:<10} {:>7} {:>8} {:>8} {:>11}".format(*head))
    for number in range(1, args.rounds + 1):
        for tree in trees if number % 2 else trees[::-1]:
            cycles, p50, p99, longest, warnings = measure(tree, args.clients, args.seconds)
            print(
                f"{number:>5}  {tree.label:<10} {cycles:>7} {p50:>8.1f} {p99:>8.1f} "
                f"{longest:>11.1f}   {warnings} '{TOO_BUSY}' warnings"
            )
            sys.stdout.flush()


if __name__ == "__main__":
    main()
