"""What a worker process keeps of the memory its jobs free (engine/worker_memory.py):
within the bound, a job's large arrays stay with the process and the next job's land on
the same pages (no new page faults); past it, what is free goes back after the job;
with 0, freed memory goes back at once, as it did before.

Each case runs in a process of its own: the rule changes the process's C library."""

import json
import subprocess
import sys

import pytest

from xruntime.engine.worker_memory import _glibc

pytestmark = pytest.mark.skipif(_glibc() is None, reason="the rule is glibc's")

MB = 1 << 20

PROBE = """
import json, resource, sys
import numpy as np
from xruntime.engine.worker_memory import KeptMemory, _resident_bytes

MB = 1 << 20
bound, sizes = int(sys.argv[1]), json.loads(sys.argv[2])
memory = KeptMemory()
memory.keep(bound)  # (a worker: when its first job's settings arrive)
seen = []
kept_alive = []
for size in sizes:  # one "job" each: arrays made and filled, then freed
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    arrays = np.ones(size * MB // 8)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    # a small block the process keeps, made after the arrays: their pages are no
    # longer at the heap's top, which glibc gives back by itself
    kept_alive.append(np.ones(MB // 8))  # (1 MB: no free block below fits it)
    del arrays
    freed = _resident_bytes()
    memory.after_job()
    seen.append({"faults": faults, "freed": freed, "after": _resident_bytes()})
print(json.dumps(seen))
"""


def jobs(bound: int, *sizes_mb: int) -> tuple[int, list[dict]]:
    """Run jobs making arrays of ``sizes_mb`` in a new process keeping ``bound`` bytes:
    its resident bytes before them, and per job its page faults while making its arrays,
    its resident bytes once they were freed and after ``after_job``."""
    before = """
import sys
from xruntime.engine.worker_memory import _resident_bytes
import numpy
print(_resident_bytes())
"""
    base = int(subprocess.check_output([sys.executable, "-c", before], text=True))
    out = subprocess.check_output(
        [sys.executable, "-c", PROBE, str(bound), json.dumps(sizes_mb)], text=True
    )
    return base, json.loads(out)


def test_within_the_bound_a_jobs_freed_arrays_are_kept_for_the_next_job():
    base, (first, second) = jobs(256 * MB, 72, 72)
    assert first["after"] - base > 60 * MB  # kept after the job, not given back
    assert first["faults"] > 100  # (the first job's arrays: new pages; fewer with huge pages)
    # the second job's arrays land on the pages the first one freed
    assert second["faults"] < first["faults"] / 10, (first, second)


def test_past_the_bound_what_is_free_goes_back_after_the_job():
    base, (job,) = jobs(32 * MB, 96)
    assert job["freed"] - base > 80 * MB  # (freed, still with the process until the job ends)
    assert job["after"] - base < 32 * MB + 16 * MB, job


def test_with_0_freed_arrays_go_back_at_once_as_before():
    base, (first, second) = jobs(0, 72, 72)
    assert first["freed"] - base < 16 * MB, first
    # new pages again: at least one fault per huge page of 2 MB (NumPy asks for huge
    # pages; a count of 37 was seen for 72 MB with them, 500 and more without)
    assert second["faults"] >= 72 * MB // (2 * MB) - 1, second
