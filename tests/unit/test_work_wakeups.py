"""The idle worker slots' wake-ups (``engine.shared.Work``): a job queued wakes one idle
slot, not all of them; none is lost to a slot that was not waiting yet; a shutdown
wakes them all."""

import threading

from tests.waiting import until
from xruntime.engine.shared import Work

LONG = 120.0  # s: a waiter returning before this was woken, not timed out


def waiters(work, count):
    """``count`` threads in ``work.wait(LONG)``; each appends its answer when it returns."""
    answers = []
    threads = [
        threading.Thread(target=lambda: answers.append(work.wait(LONG)), daemon=True)
        for _ in range(count)
    ]
    for thread in threads:
        thread.start()
    until(lambda: work._waiting == count, f"{count} slots waiting")
    return answers, threads


def test_one_job_queued_wakes_one_idle_slot_not_every_one():
    work = Work()
    answers, threads = waiters(work, 3)
    work.set()
    until(lambda: answers, "a slot woken")
    assert answers == [True]
    assert work._waiting == 2, "the other idle slots sleep on"
    work.set()
    until(lambda: len(answers) == 2, "a second slot woken by a second job")
    assert work._waiting == 1
    work.wake_all()
    for thread in threads:
        thread.join(LONG)
    assert answers == [True, True, True]


def test_a_wake_up_before_the_wait_is_not_lost_and_not_counted_twice():
    work = Work()
    work.set()
    work.set()  # (no slot waits: one wake-up is kept, for the next to wait)
    assert work.wait(LONG) is True
    assert work.wait(0.01) is False, "only one was kept"


def test_clear_forgets_wake_ups_the_caller_looks_at_the_store_itself():
    work = Work()
    work.set()
    work.clear()
    assert work.wait(0.01) is False


def test_wake_all_wakes_every_waiting_slot():
    work = Work()
    answers, threads = waiters(work, 4)
    work.wake_all()
    for thread in threads:
        thread.join(LONG)
    assert answers == [True] * 4
