"""Runs a benchmark's step in several client processes at once and counts the steps.

Each process builds its step (``make_step(*args)``, e.g. on its own keep-alive
connection), waits for a common start, repeats the step for ``seconds`` and reports
how many it did; the answer is steps per second over all processes.
"""

import multiprocessing
import time


def _repeat(make_step, args, seconds, start_at, results):
    step = make_step(*args)
    while time.time() < start_at:
        time.sleep(0.001)
    done, end = 0, start_at + seconds
    while time.time() < end:
        step()
        done += 1
    results.put(done)


def per_second(make_step, args, clients: int, seconds: float) -> float:
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    start_at = time.time() + 1.5  # time for every process to start
    procs = [
        ctx.Process(target=_repeat, args=(make_step, args, seconds, start_at, results))
        for _ in range(clients)
    ]
    for p in procs:
        p.start()
    total = sum(results.get(timeout=seconds + 120) for _ in procs)
    for p in procs:
        p.join()
    return total / seconds
