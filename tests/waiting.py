"""Waiting for a condition instead of sleeping for a guess at how long it takes: a test
that sleeps passes on a quiet machine and fails on a loaded one; one that waits for
what it needs takes as long as that takes and fails only when it never comes."""

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: How long a condition may take on a loaded CI machine before it counts as never (s).
PATIENCE = 60.0


def until(predicate: Callable[[], T], what: str, timeout: float = PATIENCE, every=0.02) -> T:
    """Calls ``predicate`` until it answers something true, and answers that; fails
    saying ``what`` did not happen when ``timeout`` s pass first."""
    deadline = time.monotonic() + timeout
    while True:
        answer = predicate()
        if answer:
            return answer
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(every)
