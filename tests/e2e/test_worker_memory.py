"""A worker keeps what its large job freed, up to ``[workers] kept_memory_bytes``, so
that the next large job's arrays land on pages it has (engine/worker_memory.py); with 0
it gives them back at once, as before.  A real node (SQLite, one worker), real HTTP,
XDima matrices of 3 000² (72 MB of arrays: blocks of 36 MB, which glibc, left to
itself, always maps anew); the worker's memory and page faults read from /proc."""

import random
import re

from tests.harness import Server
from tests.processes import kb
from tests.waiting import until

MB = 1024  # (kB, as /proc tells)


def worker_pid(node):
    (pid,) = re.findall(r"worker 0 started \(pid (\d+)\)", node.log())
    return int(pid)


def page_faults(pid):
    """The process's minor page faults so far (/proc/PID/stat, field 10)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def matrix(node, size=3000):
    """A matrix job to its end; the worker's page faults meanwhile."""
    pid = worker_pid(node)
    before = page_faults(pid)
    rng = random.Random(size)
    points = [
        {"longitude": rng.uniform(6, 15), "latitude": rng.uniform(47.3, 55.0)} for _ in range(size)
    ]
    job = node.call("XDima", "startCreateDistanceMatrix", {"startLocations": points})
    assert node.wait_done(job["id"], timeout=120)["status"] == "SUCCEEDED"
    return page_faults(pid) - before


def two_matrices(folder, kept):
    """On a node whose worker keeps ``kept`` bytes (None: the default), two matrices:
    the worker's resident memory after the first over its idle one (kB, once it settles
    where it is given back), and its page faults during the second."""
    node = Server(
        folder,
        workers=1,
        worker_keys=None if kept is None else {"kept_memory_bytes": kept},
        extra="\n[services.XDima]\nmax_cells = 9000000\n",
    ).start()
    try:
        pid = worker_pid(node)
        idle = kb(pid, "VmRSS")
        matrix(node)
        if kept == 0:
            until(lambda: kb(pid, "VmRSS") - idle < 36 * MB, "the arrays' memory given back")
        grown = kb(pid, "VmRSS") - idle
        return grown, matrix(node)
    finally:
        node.stop()


def always_huge_pages():
    """Whether every large block gets huge pages (THP "always"): a new block's pages are
    then a few faults, and a count of faults tells nothing of new pages."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[always]" in f.read()
    except OSError:
        return False


def test_a_worker_keeps_a_large_jobs_freed_memory_for_the_next_one(tmp_path):
    kept, kept_faults = two_matrices(str(tmp_path / "kept"), None)
    given_back, given_back_faults = two_matrices(str(tmp_path / "none"), 0)
    assert kept > 60 * MB  # the arrays' pages stayed with the worker
    assert given_back < 36 * MB  # (with 0: given back, as before)
    if not always_huge_pages():  # the next job's arrays landed on them: no new pages
        assert kept_faults < given_back_faults / 4, (kept_faults, given_back_faults)
