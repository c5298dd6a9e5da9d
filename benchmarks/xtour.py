"""XTour: the time to plan a 200-order instance over real HTTP (JSON), and the
server's peak memory.

A real node (tests/harness.py, 2 worker processes) gets a random instance: n orders
around Karlsruhe, two quantities, a quarter of them with 2 h time windows, 5 min
service, 25 vehicles on 8 h shifts, travel from a profile (30 km/h, detour 1.3).
Measured, from the client's clock:

* first plan: startPlanTours → the first TourPlanProgress that carries a feasible plan;
* planned:    startPlanTours → SUCCEEDED with the request's own bound
              (options.maxComputationTimeMs, --seconds), then fetchToursResponse;
* sync:       the synchronous planTours with the same bound;

and the peak resident memory (VmHWM) of the server process and of each worker.

    python benchmarks/xtour.py [--orders 200] [--seconds 5] [--seed 7]

Target on the 2-core machine: a feasible plan for 200 orders within 10 s.
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.fixtures.instances import random_instance  # noqa: E402
from tests.harness import Server  # noqa: E402
from tests.processes import _children  # noqa: E402


def peak_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument(
        "--seconds",
        type=float,
        default=5.0,
        help="options.maxComputationTimeMs of the request, in seconds",
    )
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    request = random_instance(
        args.orders,
        args.seed,
        maxComputationTimeMs=int(args.seconds * 1000),
        maxIterationsWithoutImprovement=10**9,
    )

    srv = Server(tempfile.mkdtemp(prefix="xtour-bench-")).start()
    try:
        began = time.perf_counter()
        job = srv.call("XTour", "startPlanTours", request)
        first = first_progress = None
        while True:
            state = srv.watch(job["id"], progressUpdatePeriod=250, maximumPollingPeriod=5000)
            progress = state.get("progress") or {}
            if first is None and "bestDistance" in progress:
                first, first_progress = time.perf_counter() - began, progress
            if state["status"] in ("SUCCEEDED", "FAILED", "DELETED", "UNKNOWN"):
                break
        assert state["status"] == "SUCCEEDED", state
        result = srv.call("XTour", "fetchToursResponse", {"id": job["id"]})
        planned = time.perf_counter() - began

        began = time.perf_counter()
        sync = srv.call("XTour", "planTours", request)
        sync_seconds = time.perf_counter() - began

        server_peak = peak_kib(srv.proc.pid)
        workers = sorted(peak_kib(pid) for pid in _children(srv.proc.pid))
    finally:
        srv.stop()

    n = args.orders
    print(
        f"XTour, {n} orders, 25 vehicles, bound {args.seconds:g} s (options.maxComputationTimeMs)"
    )
    if first is not None:
        print(
            f"  first feasible plan:  {first:6.2f} s   "
            f"({first_progress['plannedOrders']} orders, "
            f"{first_progress['bestDistance'] / 1000:.1f} km, "
            f"iteration {first_progress['iterations']})"
        )
    print(
        f"  planned (async):      {planned:6.2f} s   ({result['plannedOrders']} orders planned, "
        f"{len(result.get('unplannedOrderIds') or [])} unplanned, {len(result['tours'])} tours, "
        f"{result['totalDistance'] / 1000:.1f} km, {result['iterations']} iterations, "
        f"solver {result['computationTimeMs']} ms)"
    )
    print(
        f"  planned (planTours):  {sync_seconds:6.2f} s   ({sync['plannedOrders']} orders, "
        f"{sync['totalDistance'] / 1000:.1f} km)"
    )
    print(
        f"  peak memory (VmHWM):  server {server_peak / 1024:.1f} MiB; its child processes "
        + ", ".join(f"{w / 1024:.1f} MiB" for w in workers)
        + " (the workers and multiprocessing's resource tracker)"
        + f"; in all {(server_peak + sum(workers)) / 1024:.1f} MiB"
    )
    ok = first is not None and first <= 10 and result["plannedOrders"] == n
    print("  target (feasible plan within 10 s):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
