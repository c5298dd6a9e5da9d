"""Put on PYTHONPATH of processes run under libfaketime (tests/e2e/test_clock_skew.py,
tests/cluster): Debian's libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC=1 passes
a negative time to clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), which is how
``time.sleep`` sleeps from Python 3.11 on, so every ``time.sleep`` raises OSError
EINVAL (libfaketime issue #426): a node's threads that sleep die, and a skewed node
looks well while its housekeeping (leases, recovery, timeouts) is dead.  Everything
else that waits (events, locks, select, epoll, asyncio) is unaffected.  Here, only when
``time.sleep`` fails so, it sleeps by ``select``'s relative timeout instead."""

import select
import time


def _install():
    original = time.sleep
    try:
        original(0.000001)
        return  # a libfaketime without the bug, or none
    except OSError:
        pass

    def sleep(seconds):
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            select.select([], [], [], left)

    time.sleep = sleep


_install()
