"""What each write of a job costs by the size of its request, on SQLite.

A job's request is stored in its row of ``jobs`` (``schema.jobs.request``), and every
change of the job (its claim, a progress, its end, its first fetch) is an UPDATE of that
row.  SQLite writes a row whole: an UPDATE of a few small columns rewrites every page of
a large request too (its overflow pages: freed, written again, and copied into the WAL),
where PostgreSQL keeps a large value out of line (TOAST) and an UPDATE that leaves it
alone does not touch it.  This measures it through the store itself (``JobStore``):
for each request size, ``--jobs`` jobs each created, claimed, given ``--progress``
progress writes, finished and fetched, one after the other on a new SQLite file in
``--folder``; printed per size: the median µs of each kind of write.

    python benchmarks/request_rows.py [--sizes-kb 0.2 16 64 180 512] [--jobs 50]
                                      [--progress 5] [--folder PATH]

The requests are XDima's (a list of random locations as JSON), whose text compresses
little; a child of a ``parallelism`` 2 3 000² matrix has 4 500 of them, about 180 kB.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.xdima import random_points  # noqa: E402
from xruntime.protocol.states import Status  # noqa: E402
from xruntime.store import JobRecord, JobStore, now_ms  # noqa: E402

STEPS = ("create", "claim", "progress", "finish", "fetched")


def request_of(kilobytes):
    """A JSON request of about ``kilobytes`` kB: XDima's random locations
    (``xdima.random_points``), as many as take that much text."""
    each = len(json.dumps(random_points(1))) - 2 + len(", ")  # one item, and its separator
    return json.dumps({"startLocations": random_points(max(1, round(kilobytes * 1000 / each)))})


def one_size(folder, kilobytes, count, progress_writes):
    """{step: [µs, ...]} for requests of ``kilobytes``."""
    path = os.path.join(folder, f"jobs-{kilobytes}.db")
    store = JobStore("sqlite:///" + path)
    request = request_of(kilobytes)
    times = {step: [] for step in STEPS}

    def timed(step, call, *args, **kwargs):
        began = time.perf_counter()
        answer = call(*args, **kwargs)
        times[step].append((time.perf_counter() - began) * 1e6)
        return answer

    result = json.dumps({"$type": "DistanceMatrixResponse"})
    try:
        for _ in range(count):
            job = JobRecord(
                id=str(uuid.uuid4()),
                service="XDima",
                operation="createDistanceMatrix",
                fetch_type="fetchDistanceMatrixResponse",
                status=Status.QUEUING,
                request=request,
                queued_at=now_ms(),
            )
            timed("create", store.create, job, 0)
            claimed = timed("claim", store.claim, "bench", now_ms(), 30_000)
            assert claimed is not None and claimed.id == job.id
            for step in range(progress_writes):
                progress = json.dumps({"$type": "JobProgress", "percent": step})
                timed("progress", store.set_progress, job.id, progress)
            done = timed("finish", store.finish, job.id, Status.SUCCEEDED, now_ms(), result=result)
            assert done
            timed("fetched", store.mark_fetched, job.id, now_ms())
    finally:
        store.close()
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-kb", type=float, nargs="+", default=[0.2, 16, 64, 180, 512])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--progress", type=int, default=5)
    parser.add_argument("--folder", default=None, help="where the SQLite files go")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        print(
            f"{args.jobs} jobs a size, each: create, claim, {args.progress} progress writes, "
            "finish, first fetch (median µs a write)"
        )
        print(f"{'request kB':>10}" + "".join(f"{step:>10}" for step in STEPS))
        for kilobytes in args.sizes_kb:
            times = one_size(folder, kilobytes, args.jobs, args.progress)
            cells = "".join(f"{statistics.median(times[step]):>10.0f}" for step in STEPS)
            print(f"{kilobytes:>10g}" + cells)


if __name__ == "__main__":
    main()
